//! The running native link: [`Carrier`] holds what one NATS connection's
//! life needs (the relay, the JetStream edge, the hosted Things, the echoes)
//! and has one method per thing that can happen to it; [`carry`] is the
//! loop that waits for the next one.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use async_nats::{Client, Event, StatusCode, Subscriber};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use super::answers::{self, Answer};
use super::durable::{self, Durable, FromDurable, KvOp};
use super::intake::JetStreamIn;
use super::link::{broadcast_filters, event_filters, NatsLink};
use super::options;
use super::relay::{self, Relay, ToLocal, ToNats};
use super::subjects;
use crate::broker::{Bus, Delivery, Publication};
use crate::cluster::echo::Echoes;
use crate::cluster::ClusterStatus;
use crate::topics::Topics;

/// How long a publication's return from the embedded broker is waited for
/// (it takes microseconds; a unique message's tombstone lasts this long).
const ECHO_TTL: Duration = Duration::from_secs(30);

/// What arrives from NATS, by the subscription it came on.
#[derive(Clone, Copy)]
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

/// What the link waits on, apart from its state (so that the loop can
/// borrow both at once).
struct Inputs {
    events: mpsc::UnboundedReceiver<Event>,
    deliveries: mpsc::Receiver<Delivery>,
    incoming: mpsc::Receiver<Incoming>,
    from_durable: mpsc::Receiver<FromDurable>,
    /// Renewing this sidecar's presence, and looking for others' gone.
    ticks: tokio::time::Interval,
}

/// One NATS connection's state, from connected to closed.
struct Carrier {
    topics: Topics,
    bus: Bus,
    status: ClusterStatus,
    client: Client,
    relay: Relay,
    /// Where the subscriptions' forwarders hand messages.
    tx: mpsc::Sender<Incoming>,
    /// Ends every subscription and background task of this connection.
    stop: CancellationToken,
    /// Ends the live event subscriptions (when JetStream turns out absent).
    live: CancellationToken,
    jetstream: bool,
    durable: Option<Durable>,
    js_in: JetStreamIn,
    answers: mpsc::UnboundedSender<Answer>,
    /// One subscription per Thing whose agent is here.
    hosting: HashMap<String, CancellationToken>,
    echoes: Echoes,
    connected_once: bool,
    /// Linked: connected, and with JetStream the consumer reads.
    up: bool,
    js_ready: bool,
}

/// Hands a subscription's messages to the link until it ends or `stop`.
fn forward(
    mut subscriber: Subscriber,
    kind: Kind,
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
                if tx.send(Incoming { kind, message }).await.is_err() {
                    break;
                }
            }
            // Dropping the subscriber unsubscribes.
        }
        .in_current_span(),
    );
}

/// Links to NATS and carries messages both ways until `shutdown` or the
/// embedded broker stops taking publications.
pub(super) async fn carry(link: NatsLink, shutdown: CancellationToken) {
    let Some((mut carrier, mut inputs)) = Carrier::connect(link).await else {
        return;
    };
    if carrier.subscribe().await.is_err() {
        warn!("Cannot subscribe in the NATS cluster; local traffic only.");
        return;
    }
    carrier.subscribe_live_events().await;
    // The client reports every connection, the first included, as an
    // event: the link counts as linked from there.
    loop {
        let flow = tokio::select! {
            _ = shutdown.cancelled() => ControlFlow::Break(()),
            event = inputs.events.recv() => {
                carrier.on_event(event).await;
                ControlFlow::Continue(())
            }
            Some(delivery) = inputs.deliveries.recv() => carrier.on_delivery(delivery).await,
            _ = inputs.ticks.tick(), if carrier.jetstream => {
                carrier.on_tick();
                ControlFlow::Continue(())
            }
            Some(from) = inputs.from_durable.recv() => carrier.on_durable(from).await,
            Some(incoming) = inputs.incoming.recv() => carrier.on_incoming(incoming).await,
        };
        if flow.is_break() {
            break;
        }
    }
    carrier.close().await;
}

impl Carrier {
    /// Connects (the client reconnects by itself from then on) and starts
    /// the JetStream edge and the answers' sender.
    async fn connect(link: NatsLink) -> Option<(Carrier, Inputs)> {
        let NatsLink {
            topics,
            nodes,
            config,
            name,
            bus,
            deliveries,
            status,
        } = link;
        // Connection events, for readiness and the state exchange.
        let (events_tx, events) = mpsc::unbounded_channel();
        let connected = match options::connect_options(&config, &name).await {
            Ok(o) => o
                .event_callback(move |event| {
                    let tx = events_tx.clone();
                    async move {
                        let _ = tx.send(event);
                    }
                })
                .connect(nodes)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let client = match connected {
            Ok(c) => c,
            Err(error) => {
                warn!(%error, "Cannot link to the NATS cluster; local traffic only.");
                return None;
            }
        };
        let inbox = client.new_inbox();
        let jetstream = config.jetstream;
        let mut relay = Relay::new(topics.clone(), inbox.clone());
        if jetstream {
            relay = relay.with_jetstream();
        }
        let (tx, incoming) = mpsc::channel::<Incoming>(config.buffer.max(64));
        let stop = CancellationToken::new();
        // This connection's unique token names its events in the stream.
        let origin = inbox.rsplit('.').next().unwrap_or_default().to_owned();
        let (durable_tx, from_durable) = mpsc::channel(config.buffer.max(64));
        let durable = jetstream.then(|| {
            durable::start(
                client.clone(),
                &config,
                topics.clone(),
                durable::Identity {
                    connection: name.clone(),
                    origin: origin.clone(),
                },
                status.jetstream().clone(),
                durable_tx,
                stop.child_token(),
            )
        });
        let answers = answers::start(client.clone(), stop.child_token());
        let renew = Duration::from_secs(config.presence_ttl_s.max(3)) / 3;
        let ticks = tokio::time::interval_at(tokio::time::Instant::now() + renew, renew);
        let inputs = Inputs {
            events,
            deliveries,
            incoming,
            from_durable,
            ticks,
        };
        let carrier = Carrier {
            topics,
            bus,
            status,
            client,
            relay,
            tx,
            live: stop.child_token(),
            stop,
            jetstream,
            durable,
            js_in: JetStreamIn::new(origin),
            answers,
            hosting: HashMap::new(),
            echoes: Echoes::new(ECHO_TTL),
            connected_once: false,
            up: false,
            js_ready: !jetstream,
        };
        Some((carrier, inputs))
    }

    /// The broadcast filters, this sidecar's inbox and the state exchange,
    /// each named for its kind. Subscriptions are queued while disconnected
    /// and made again by the client on every reconnection. All or none are
    /// forwarded.
    async fn subscribe(&self) -> Result<(), async_nats::SubscribeError> {
        let mut wanted: Vec<(Kind, String)> = broadcast_filters(&self.topics, self.jetstream)
            .iter()
            .map(|filter| (Kind::Broadcast, subjects::subject_filter(filter)))
            .collect();
        wanted.push((Kind::Inbox, format!("{}.>", self.relay.inbox())));
        wanted.push((Kind::Sync, relay::sync_subject(&self.topics)));
        let mut subscribed = Vec::with_capacity(wanted.len());
        for (kind, subject) in wanted {
            subscribed.push((kind, self.client.subscribe(subject).await?));
        }
        for (kind, subscriber) in subscribed {
            forward(subscriber, kind, self.tx.clone(), self.stop.child_token());
        }
        Ok(())
    }

    /// With JetStream, events also come live, as NATS delivers their
    /// publication: no waiting for the stream to replicate, acknowledge
    /// and deliver them (dropped if the servers have no JetStream).
    async fn subscribe_live_events(&self) {
        if !self.jetstream {
            return;
        }
        for filter in event_filters(&self.topics) {
            match self
                .client
                .subscribe(subjects::subject_filter(&filter))
                .await
            {
                Ok(s) => forward(s, Kind::LiveEvent, self.tx.clone(), self.live.clone()),
                Err(e) => {
                    warn!(error = %e, "Cannot subscribe to live events in the NATS cluster; they come from the stream.")
                }
            }
        }
    }

    async fn on_event(&mut self, event: Option<Event>) {
        match event {
            Some(Event::Connected) => {
                let again = self.connected_once;
                self.up = self.linked(!self.jetstream).await;
                self.status.set_connected(self.up && self.js_ready);
                // Live state missed while away is in the buckets.
                if let (true, Some(d)) = (self.up && again, &self.durable) {
                    self.js_in.reload();
                    let _ = d.kv.send(KvOp::Reload);
                }
            }
            Some(Event::Disconnected) => {
                self.up = false;
                self.status.set_connected(false);
                warn!("Lost the NATS cluster; local traffic goes on, reconnecting.");
            }
            Some(Event::SlowConsumer(sid)) => {
                warn!(
                    sid,
                    "NATS dropped messages for a slow subscription of the link."
                );
            }
            Some(other) => debug!(event = %other, "NATS connection event."),
            None => {}
        }
    }

    /// The connection is up: once the servers have the subscriptions, the
    /// link is usable; then (`sync`, without the buckets) the other
    /// sidecars are asked for their state. Whether the link is up.
    async fn linked(&mut self, sync: bool) -> bool {
        if self.client.flush().await.is_err() {
            return false;
        }
        if self.connected_once {
            self.status.reconnected();
            info!("Reconnected to the NATS cluster.");
        } else {
            info!("Connected to the NATS cluster.");
        }
        self.connected_once = true;
        // The reply subject names who asks; answers go to
        // `{inbox}._state.{subject}`, one message per retained topic.
        // (With JetStream the buckets hold the state; the link still
        // answers others that ask.)
        if sync {
            self.ask_for_state().await;
        }
        true
    }

    async fn ask_for_state(&self) {
        let subject = relay::sync_subject(&self.topics);
        let _ = self
            .client
            .publish_with_reply(subject, self.relay.inbox().to_owned(), Bytes::new())
            .await;
    }

    /// A publication in the embedded broker: what of it crosses, and how.
    async fn on_delivery(&mut self, delivery: Delivery) -> ControlFlow<()> {
        let Ok(topic) = std::str::from_utf8(&delivery.topic) else {
            return ControlFlow::Continue(());
        };
        if self
            .echoes
            .is_echo(topic, &delivery.payload, Instant::now())
        {
            return ControlFlow::Continue(());
        }
        for out in self.relay.from_local(topic, delivery.payload) {
            self.send_to_nats(out).await;
        }
        ControlFlow::Continue(())
    }

    async fn send_to_nats(&mut self, out: ToNats) {
        match out {
            ToNats::Publish { subject, payload } => {
                if let Err(e) = self.client.publish(subject, payload).await {
                    debug!(error = %e, "A message could not go to NATS.");
                }
            }
            ToNats::Answer {
                subject,
                route,
                seq,
                payload,
            } => {
                let answer = Answer {
                    subject,
                    route,
                    seq,
                    payload,
                };
                let _ = self.answers.send(answer);
            }
            ToNats::Request {
                subject,
                reply,
                payload,
            } => {
                if let Err(e) = self
                    .client
                    .publish_with_reply(subject, reply, payload)
                    .await
                {
                    debug!(error = %e, "A request could not go to NATS.");
                }
            }
            ToNats::Host(thing) => self.host(thing).await,
            ToNats::Unhost(thing) => {
                if let Some(token) = self.hosting.remove(&thing) {
                    token.cancel();
                }
            }
            ToNats::Store { subject, payload } => {
                // Waits while the stream is that far behind.
                if let Some(d) = &self.durable {
                    let _ = d.events.send((subject, payload)).await;
                }
            }
            ToNats::Keep { topic, payload } => {
                if let Some(d) = &self.durable {
                    let _ = d.kv.send(KvOp::Write { topic, payload });
                }
            }
        }
    }

    /// An agent here serves `thing`: take its requests from the cluster.
    async fn host(&mut self, thing: String) {
        let subject = self.relay.requests_subject(&thing);
        match self.client.subscribe(subject).await {
            Ok(s) => {
                let token = self.stop.child_token();
                forward(s, Kind::Request, self.tx.clone(), token.clone());
                if let Some(old) = self.hosting.insert(thing, token) {
                    old.cancel();
                }
            }
            Err(e) => warn!(error = %e, thing, "Cannot take requests from the NATS cluster."),
        }
    }

    /// Presence of the agents here renewed; the others' listed.
    fn on_tick(&mut self) {
        if let Some(d) = &self.durable {
            for (topic, payload) in self.relay.hosted_presence() {
                let payload = Some(payload);
                let _ = d.kv.send(KvOp::Write { topic, payload });
            }
            let _ = d.kv.send(KvOp::ListPresence);
        }
    }

    /// What the JetStream edge brings: readiness, its absence, or events
    /// and state to hand to the broker (acknowledged once there).
    async fn on_durable(&mut self, from: FromDurable) -> ControlFlow<()> {
        if matches!(from, FromDurable::NoJetStream) {
            self.fall_back_to_core().await;
            return ControlFlow::Continue(());
        }
        if matches!(from, FromDurable::Ready) {
            self.js_ready = true;
            self.status.set_connected(self.up);
            info!("Events cross through JetStream.");
        }
        let (local, ack) = self.js_in.take(&self.topics, from, self.status.jetstream());
        if !self.hand_to_broker(local).await {
            // Not in the broker: unacknowledged, the stream keeps it for
            // this consumer.
            return ControlFlow::Break(());
        }
        // In the broker now: the stream may forget it for us.
        if let Some(m) = ack {
            if let Err(e) = m.ack().await {
                debug!(error = %e, "An event's acknowledgement did not go.");
            }
        }
        ControlFlow::Continue(())
    }

    /// The servers have no JetStream: events by core NATS, state by `_sync`.
    async fn fall_back_to_core(&mut self) {
        warn!("The NATS servers have no JetStream: falling back to core NATS (events at most once, state from the other sidecars by `_sync`). Enable JetStream on them and restart the sidecar for loss-free events, or set cluster.jetstream = false.");
        self.jetstream = false;
        self.durable = None;
        self.live.cancel();
        self.relay.without_jetstream();
        self.status.jetstream().core_fallback.inc();
        for filter in event_filters(&self.topics) {
            match self
                .client
                .subscribe(subjects::subject_filter(&filter))
                .await
            {
                Ok(s) => forward(s, Kind::Broadcast, self.tx.clone(), self.stop.child_token()),
                Err(e) => warn!(error = %e, "Cannot subscribe in the NATS cluster."),
            }
        }
        // Subscribed first, then the others' state (as `linked` asks
        // without JetStream).
        if self.up && self.client.flush().await.is_ok() {
            self.ask_for_state().await;
        }
        self.js_ready = true;
        self.status.set_connected(self.up);
    }

    /// A message from one of the link's subscriptions.
    async fn on_incoming(&mut self, Incoming { kind, message }: Incoming) -> ControlFlow<()> {
        if let Kind::LiveEvent = kind {
            let local = self.js_in.live_event(&message, self.status.jetstream());
            return match self.hand_to_broker(local).await {
                true => ControlFlow::Continue(()),
                false => ControlFlow::Break(()),
            };
        }
        // Where to acknowledge an answer another sidecar sent.
        let mut ack = None;
        let local: Vec<ToLocal> = match kind {
            Kind::LiveEvent => Vec::new(), // taken above
            Kind::Broadcast => self.broadcast(message).into_iter().collect(),
            Kind::Request => {
                let subject = message.subject.as_str();
                let reply = message.reply.as_ref().map(|r| r.as_str());
                self.relay
                    .request_from_nats(subject, reply, message.payload)
                    .into_iter()
                    .collect()
            }
            Kind::Inbox => self.inbox(message, &mut ack),
            Kind::Sync => {
                if let Some(reply) = &message.reply {
                    for (subject, payload) in self.relay.state_for(reply.as_str()) {
                        let _ = self.client.publish(subject, payload).await;
                    }
                }
                Vec::new()
            }
        };
        if !self.hand_to_broker(local).await {
            return ControlFlow::Break(());
        }
        if let Some(reply) = ack {
            let _ = self.client.publish(reply, Bytes::new()).await;
        }
        ControlFlow::Continue(())
    }

    fn broadcast(&mut self, message: async_nats::Message) -> Option<ToLocal> {
        match subjects::topic(message.subject.as_str()) {
            Ok(topic) => {
                let retain = crate::cluster::is_retained(&self.topics, &topic);
                if retain {
                    self.js_in.live(&self.topics, &topic, &message.payload);
                }
                Some(ToLocal {
                    topic,
                    payload: message.payload,
                    retain,
                })
            }
            Err(e) => {
                debug!(error = %e, "Ignored a NATS message.");
                None
            }
        }
    }

    /// On this sidecar's inbox: an answer (acknowledged through `ack` once
    /// in the broker, a repeat at once), no responders, or others' state.
    fn inbox(
        &mut self,
        message: async_nats::Message,
        ack: &mut Option<async_nats::Subject>,
    ) -> Vec<ToLocal> {
        let now = std::time::Instant::now();
        let mut local = self.relay.overdue_answers(now);
        let subject = message.subject.as_str();
        let no_responders = message.status == Some(StatusCode::NO_RESPONDERS);
        let seq = message
            .headers
            .as_ref()
            .and_then(|h| h.get(answers::HEADER))
            .and_then(|v| v.as_str().parse::<u64>().ok());
        let result = match seq {
            Some(seq) => {
                let taken = self
                    .relay
                    .answer_from_inbox(subject, message.payload, seq, now);
                if taken.is_ok() {
                    *ack = message.reply.clone();
                }
                taken
            }
            None => self
                .relay
                .from_inbox(subject, message.payload, no_responders)
                .map(|m| vec![m]),
        };
        match result {
            Ok(answers) => local.extend(answers),
            Err(e) => debug!(error = %e, "Ignored a NATS message on the inbox."),
        }
        local
    }

    /// Publishes what came from NATS into the embedded broker, in order,
    /// each remembered as an echo of this link's own. False once the
    /// broker no longer takes publications.
    async fn hand_to_broker(&mut self, local: impl IntoIterator<Item = ToLocal>) -> bool {
        for ToLocal {
            topic,
            payload,
            retain,
        } in local
        {
            self.echoes
                .remember(&topic, &payload, !retain, Instant::now());
            let publication = Publication::new(topic, payload, retain);
            if self.bus.publish(publication).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Ends the subscriptions and tasks; what was handed to the client
    /// goes out before the connection closes.
    async fn close(self) {
        self.stop.cancel();
        self.status.set_connected(false);
        let _ = tokio::time::timeout(Duration::from_millis(500), self.client.flush()).await;
    }
}
