//! The native link: a link of the sidecar's own to the embedded broker (in
//! process, subscribed to the cluster filters) on one side, one NATS
//! connection on the other, and [`Relay`] deciding what crosses.
//!
//! Loops: NATS does not echo this connection's publications (`no_echo`);
//! the embedded broker does deliver what the link publishes there back to
//! its own subscriptions (MQTT has no "no local" for it), so those are
//! remembered by fingerprint ([`Echoes`]) and dropped when they return.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_nats::{Client, Event, ServerAddr, StatusCode, Subscriber};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use super::durable::{self, FromDurable, KvOp};
use super::intake::JetStreamIn;
use super::options::{self, OptionsError};
use super::relay::{self, Relay, ToLocal, ToNats};
use crate::broker::{Bus, Delivery, Publication};
use crate::cluster::echo::Echoes;
use crate::cluster::ClusterStatus;
use crate::config::ClusterConfig;
use crate::topics::Topics;

/// How long a publication's return from the embedded broker is waited for
/// (it takes microseconds; a unique message's tombstone lasts this long).
const ECHO_TTL: Duration = Duration::from_secs(30);

/// What arrives from NATS, by the subscription it came on.
enum Kind {
    /// Events, readings, statuses, TDs, presence.
    Broadcast,
    /// A request for an agent here.
    Request,
    /// This sidecar's inbox: answers, no-responders, others' state.
    Inbox,
    /// Another sidecar asks for the retained state.
    Sync,
    /// An event published into the stream, delivered live by core NATS
    /// (with JetStream; see [`super::jetstream`]).
    LiveEvent,
}

struct Incoming {
    kind: Kind,
    message: async_nats::Message,
}

pub struct NatsLink {
    topics: Topics,
    nodes: Vec<ServerAddr>,
    config: ClusterConfig,
    name: String,
    bus: Bus,
    deliveries: mpsc::Receiver<Delivery>,
    status: ClusterStatus,
}

/// Hands a subscription's messages to the link until it ends or `stop`.
fn forward(
    mut subscriber: Subscriber,
    kind: fn() -> Kind,
    tx: mpsc::Sender<Incoming>,
    stop: CancellationToken,
) {
    tokio::spawn(
        async move {
            loop {
                let message = tokio::select! {
                    _ = stop.cancelled() => break,
                    m = subscriber.next() => m,
                };
                let Some(message) = message else { break };
                let incoming = Incoming {
                    kind: kind(),
                    message,
                };
                if tx.send(incoming).await.is_err() {
                    break;
                }
            }
            // Dropping the subscriber unsubscribes.
        }
        .in_current_span(),
    );
}

impl NatsLink {
    /// `bus`/`deliveries`: a link to the embedded broker subscribed to
    /// [`crate::cluster::bridged_filters`].
    pub fn new(
        config: &ClusterConfig,
        topics: Topics,
        bus: Bus,
        deliveries: mpsc::Receiver<Delivery>,
        sidecar_id: &str,
    ) -> Result<NatsLink, OptionsError> {
        let name = match config.client_id.as_str() {
            "" => format!("lmos-bridge-{sidecar_id}"),
            id => id.to_owned(),
        };
        Ok(NatsLink {
            topics,
            nodes: options::nodes(&config.url)?,
            config: config.clone(),
            name,
            bus,
            deliveries,
            status: ClusterStatus::default(),
        })
    }

    pub fn status(&self) -> ClusterStatus {
        self.status.clone()
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let span = tracing::info_span!("cluster_nats", name = %self.name);
        self.carry(shutdown).instrument(span).await
    }

    async fn carry(mut self, shutdown: CancellationToken) {
        // Connection events, for readiness and the state exchange.
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let options = match options::connect_options(&self.config, &self.name).await {
            Ok(o) => o.event_callback(move |event| {
                let tx = events_tx.clone();
                async move {
                    let _ = tx.send(event);
                }
            }),
            Err(e) => {
                warn!(error = %e, "Cannot link to the NATS cluster; local traffic only.");
                return;
            }
        };
        let client = match options.connect(self.nodes.clone()).await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "Cannot link to the NATS cluster; local traffic only.");
                return;
            }
        };
        let inbox = client.new_inbox();
        let mut jetstream = self.config.jetstream;
        let mut relay = Relay::new(self.topics.clone(), inbox.clone());
        if jetstream {
            relay = relay.with_jetstream();
        }
        let (tx, mut incoming) = mpsc::channel::<Incoming>(self.config.buffer.max(64));
        let stop = CancellationToken::new();
        // This connection's unique token names its events in the stream.
        let origin = inbox.rsplit('.').next().unwrap_or_default().to_owned();
        let (durable_tx, mut from_durable) = mpsc::channel(self.config.buffer.max(64));
        let mut durable = jetstream.then(|| {
            durable::start(
                client.clone(),
                &self.config,
                self.topics.clone(),
                durable::Identity {
                    connection: self.name.clone(),
                    origin: origin.clone(),
                },
                self.status.jetstream().clone(),
                durable_tx,
                stop.child_token(),
            )
        });
        let mut js_in = JetStreamIn::new(origin);
        let answers = super::answers::start(client.clone(), stop.child_token());
        // Renewing this sidecar's presence, and looking for others' gone.
        let renew = Duration::from_secs(self.config.presence_ttl_s.max(3)) / 3;
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + renew, renew);
        // Subscriptions are queued while disconnected and made again by the
        // client on every reconnection.
        let mut broadcast = Vec::new();
        for filter in broadcast_filters(&self.topics, jetstream) {
            broadcast.push(
                client
                    .subscribe(super::subjects::subject_filter(&filter))
                    .await,
            );
        }
        broadcast.push(client.subscribe(format!("{inbox}.>")).await);
        broadcast.push(client.subscribe(relay::sync_subject(&self.topics)).await);
        let count = broadcast.len();
        for (i, s) in broadcast.into_iter().enumerate() {
            let Ok(s) = s else {
                warn!("Cannot subscribe in the NATS cluster; local traffic only.");
                return;
            };
            let kind: fn() -> Kind = match count - i {
                2 => || Kind::Inbox,
                1 => || Kind::Sync,
                _ => || Kind::Broadcast,
            };
            forward(s, kind, tx.clone(), stop.child_token());
        }
        // With JetStream, events also come live, as NATS delivers their
        // publication: no waiting for the stream to replicate, acknowledge
        // and deliver them (dropped if the servers have no JetStream).
        let live = stop.child_token();
        if jetstream {
            for filter in event_filters(&self.topics) {
                match client
                    .subscribe(super::subjects::subject_filter(&filter))
                    .await
                {
                    Ok(s) => forward(s, || Kind::LiveEvent, tx.clone(), live.clone()),
                    Err(e) => {
                        warn!(error = %e, "Cannot subscribe to live events in the NATS cluster; they come from the stream.")
                    }
                }
            }
        }
        // One subscription per Thing whose agent is here.
        let mut hosting: HashMap<String, CancellationToken> = HashMap::new();
        let mut echoes = Echoes::new(ECHO_TTL);
        let mut connected_once = false;
        // Linked: connected, and with JetStream the consumer reads.
        let mut up = false;
        let mut js_ready = !jetstream;
        // The client reports every connection, the first included, as an
        // event: the link counts as linked from there.
        'link: loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                event = events.recv() => match event {
                    Some(Event::Connected) => {
                        let again = connected_once;
                        up = self.linked(&client, &relay, &mut connected_once, !jetstream).await;
                        self.status.set_connected(up && js_ready);
                        // Live state missed while away is in the buckets.
                        if let (true, Some(d)) = (up && again, &durable) {
                            js_in.reload();
                            let _ = d.kv.send(KvOp::Reload);
                        }
                    }
                    Some(Event::Disconnected) => {
                        up = false;
                        self.status.set_connected(false);
                        warn!("Lost the NATS cluster; local traffic goes on, reconnecting.");
                    }
                    Some(Event::SlowConsumer(sid)) => {
                        warn!(sid, "NATS dropped messages for a slow subscription of the link.");
                    }
                    Some(other) => debug!(event = %other, "NATS connection event."),
                    None => {}
                },
                Some(delivery) = self.deliveries.recv() => {
                    let Ok(topic) = std::str::from_utf8(&delivery.topic) else { continue };
                    if echoes.is_echo(topic, &delivery.payload, Instant::now()) {
                        continue;
                    }
                    for out in relay.from_local(topic, delivery.payload) {
                        match out {
                            ToNats::Publish { subject, payload } => {
                                if let Err(e) = client.publish(subject, payload).await {
                                    debug!(error = %e, "A message could not go to NATS.");
                                }
                            }
                            ToNats::Answer { subject, route, seq, payload } => {
                                let _ = answers.send(super::answers::Answer { subject, route, seq, payload });
                            }
                            ToNats::Request { subject, reply, payload } => {
                                if let Err(e) = client.publish_with_reply(subject, reply, payload).await {
                                    debug!(error = %e, "A request could not go to NATS.");
                                }
                            }
                            ToNats::Host(thing) => {
                                let subject = relay.requests_subject(&thing);
                                match client.subscribe(subject).await {
                                    Ok(s) => {
                                        let token = stop.child_token();
                                        forward(s, || Kind::Request, tx.clone(), token.clone());
                                        if let Some(old) = hosting.insert(thing, token) {
                                            old.cancel();
                                        }
                                    }
                                    Err(e) => warn!(error = %e, thing, "Cannot take requests from the NATS cluster."),
                                }
                            }
                            ToNats::Unhost(thing) => {
                                if let Some(token) = hosting.remove(&thing) {
                                    token.cancel();
                                }
                            }
                            ToNats::Store { subject, payload } => {
                                // Waits while the stream is that far behind.
                                if let Some(d) = &durable {
                                    let _ = d.events.send((subject, payload)).await;
                                }
                            }
                            ToNats::Keep { topic, payload } => {
                                if let Some(d) = &durable {
                                    let _ = d.kv.send(KvOp::Write { topic, payload });
                                }
                            }
                        }
                    }
                }
                _ = ticks.tick(), if jetstream => {
                    if let Some(d) = &durable {
                        for (topic, payload) in relay.hosted_presence() {
                            let _ = d.kv.send(KvOp::Write { topic, payload: Some(payload) });
                        }
                        let _ = d.kv.send(KvOp::ListPresence);
                    }
                }
                Some(from) = from_durable.recv() => {
                    if matches!(from, FromDurable::NoJetStream) {
                        warn!("The NATS servers have no JetStream: falling back to core NATS (events at most once, state from the other sidecars by `_sync`). Enable JetStream on them and restart the sidecar for loss-free events, or set cluster.jetstream = false.");
                        jetstream = false;
                        durable = None;
                        live.cancel();
                        relay.without_jetstream();
                        self.status.jetstream().core_fallback.inc();
                        for filter in event_filters(&self.topics) {
                            match client.subscribe(super::subjects::subject_filter(&filter)).await {
                                Ok(s) => forward(s, || Kind::Broadcast, tx.clone(), stop.child_token()),
                                Err(e) => warn!(error = %e, "Cannot subscribe in the NATS cluster."),
                            }
                        }
                        // Subscribed first, then the others' state (as
                        // `linked` asks without JetStream).
                        if up && client.flush().await.is_ok() {
                            let subject = relay::sync_subject(&self.topics);
                            let _ = client
                                .publish_with_reply(subject, relay.inbox().to_owned(), Bytes::new())
                                .await;
                        }
                        js_ready = true;
                        self.status.set_connected(up);
                        continue;
                    }
                    if matches!(from, FromDurable::Ready) {
                        js_ready = true;
                        self.status.set_connected(up);
                        info!("Events cross through JetStream.");
                    }
                    let (local, ack) = js_in.take(&self.topics, from, self.status.jetstream());
                    if !self.hand_to_broker(&mut echoes, local).await {
                        // Not in the broker: unacknowledged, the stream
                        // keeps it for this consumer.
                        break 'link;
                    }
                    // In the broker now: the stream may forget it for us.
                    if let Some(m) = ack {
                        if let Err(e) = m.ack().await {
                            debug!(error = %e, "An event's acknowledgement did not go.");
                        }
                    }
                }
                Some(Incoming { kind, message }) = incoming.recv() => {
                    if let Kind::LiveEvent = kind {
                        let local = js_in.live_event(&message, self.status.jetstream());
                        if !self.hand_to_broker(&mut echoes, local).await {
                            break 'link;
                        }
                        continue;
                    }
                    let subject = message.subject.as_str();
                    // Where to acknowledge an answer another sidecar sent.
                    let mut ack = None;
                    let local = match kind {
                        Kind::Broadcast => match super::subjects::topic(subject) {
                            Ok(topic) => {
                                let retain = crate::cluster::is_retained(&self.topics, &topic);
                                if retain {
                                    js_in.live(&self.topics, &topic, &message.payload);
                                }
                                Some(ToLocal { topic, payload: message.payload, retain })
                            }
                            Err(e) => {
                                debug!(error = %e, "Ignored a NATS message.");
                                None
                            }
                        },
                        Kind::Request => {
                            let reply = message.reply.as_ref().map(|r| r.as_str());
                            relay.request_from_nats(subject, reply, message.payload)
                        }
                        Kind::Inbox => {
                            let no_responders = message.status == Some(StatusCode::NO_RESPONDERS);
                            let seq = message
                                .headers
                                .as_ref()
                                .and_then(|h| h.get(super::answers::HEADER))
                                .and_then(|v| v.as_str().parse::<u64>().ok());
                            let result = match seq {
                                // An acknowledged answer: acknowledged once
                                // it is in the broker (below), a repeat at once.
                                Some(seq) => {
                                    let reply = message.reply.clone();
                                    let taken = relay.answer_from_inbox(subject, message.payload, seq);
                                    if taken.is_ok() {
                                        ack = reply;
                                    }
                                    taken
                                }
                                None => relay.from_inbox(subject, message.payload, no_responders).map(Some),
                            };
                            match result {
                                Ok(local) => local,
                                Err(e) => {
                                    debug!(error = %e, "Ignored a NATS message on the inbox.");
                                    None
                                }
                            }
                        }
                        Kind::LiveEvent => None, // taken above
                        Kind::Sync => {
                            if let Some(reply) = &message.reply {
                                for (subject, payload) in relay.state_for(reply.as_str()) {
                                    let _ = client.publish(subject, payload).await;
                                }
                            }
                            None
                        }
                    };
                    if !self.hand_to_broker(&mut echoes, local).await {
                        break;
                    }
                    if let Some(reply) = ack {
                        let _ = client.publish(reply, Bytes::new()).await;
                    }
                }
            }
        }
        stop.cancel();
        self.status.set_connected(false);
        // What was handed to the client goes out before the connection closes.
        let _ = tokio::time::timeout(Duration::from_millis(500), client.flush()).await;
        drop(client);
    }

    /// Publishes what came from NATS into the embedded broker, in order,
    /// each expected back as an echo of this link's own. False once the
    /// broker no longer takes publications.
    async fn hand_to_broker(
        &self,
        echoes: &mut Echoes,
        local: impl IntoIterator<Item = ToLocal>,
    ) -> bool {
        for ToLocal {
            topic,
            payload,
            retain,
        } in local
        {
            echoes.expect(&topic, &payload, !retain, Instant::now());
            if self
                .bus
                .publish(Publication::new(topic, payload, retain))
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    }

    /// The connection is up: once the servers have the subscriptions, the
    /// link is usable; then the other sidecars are asked for their state.
    /// `sync`: ask the others for their state (without the buckets).
    /// Whether the link is up.
    async fn linked(
        &self,
        client: &Client,
        relay: &Relay,
        connected_once: &mut bool,
        sync: bool,
    ) -> bool {
        if client.flush().await.is_err() {
            return false;
        }
        if *connected_once {
            self.status.reconnected();
            info!("Reconnected to the NATS cluster.");
        } else {
            info!("Connected to the NATS cluster.");
        }
        *connected_once = true;
        // The reply subject names who asks; answers go to
        // `{inbox}._state.{subject}`, one message per retained topic.
        // (With JetStream the buckets hold the state; the link still
        // answers others that ask.)
        if sync {
            let subject = relay::sync_subject(&self.topics);
            let _ = client
                .publish_with_reply(subject, relay.inbox().to_owned(), Bytes::new())
                .await;
        }
        true
    }
}

/// The filters whose messages every sidecar gets; requests and replies go
/// by request/reply instead, events (with `jetstream`) through the stream.
fn broadcast_filters(topics: &Topics, jetstream: bool) -> Vec<String> {
    crate::cluster::bridged_filters(topics)
        .into_iter()
        .filter(|f| !f.ends_with("/agent/requests/+") && !f.ends_with("/agent/replies"))
        .filter(|f| !(jetstream && f.ends_with("/events/+")))
        .collect()
}

/// The filters of events (what the stream carries with JetStream).
fn event_filters(topics: &Topics) -> Vec<String> {
    crate::cluster::bridged_filters(topics)
        .into_iter()
        .filter(|f| f.ends_with("/events/+"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_are_not_broadcast() {
        let t = Topics::new("lmos").unwrap();
        let f = broadcast_filters(&t, false);
        assert_eq!(f.len(), crate::cluster::bridged_filters(&t).len() - 2);
        let f = broadcast_filters(&t, true);
        assert!(
            !f.iter().any(|f| f.contains("/events/")),
            "through the stream"
        );
        assert!(!f.iter().any(|f| f.contains("agent/re")));
        let mut all = f;
        all.extend(event_filters(&t));
        assert_eq!(
            all.len(),
            broadcast_filters(&t, false).len(),
            "the events are the rest"
        );
    }
}
