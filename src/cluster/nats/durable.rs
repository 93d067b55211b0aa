//! The JetStream edge of the native link (`cluster.jetstream = true`): it
//! sets up the event stream, the state buckets and this sidecar's durable
//! consumer, publishes events until the stream acknowledges them, writes
//! this sidecar's retained state to the buckets and reads the cluster's
//! state from them at start. What to do is decided in [`super::jetstream`]
//! and [`super::kv`]; this moves the bytes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::context::CreateStreamErrorKind;
use async_nats::jetstream::{self, consumer, kv, stream, Context};
use async_nats::HeaderMap;
use bytes::Bytes;
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use super::batch;
use super::jetstream::JetStreamCounters;
use super::jetstream::{self as js, Outbox};
use super::kv::Bucket;
use crate::config::{ClusterConfig, StreamStorage};
use crate::topics::Topics;

/// Events the link may queue for the publisher, at most.
pub const IN_FLIGHT: usize = 4096;
/// Stream messages awaiting their acknowledgement at once, at most: while
/// that many wait, what arrives queues and goes in fewer, fuller messages
/// ([`batch`]), so a slow stream is sent less work, not more.
pub const IN_FLIGHT_MESSAGES: usize = 32;
/// How long the stream may take to acknowledge before a publication is
/// repeated (a node's death is noticed by then).
pub(super) const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// What the JetStream edge hands the link.
pub enum FromDurable {
    /// An event from the stream: hand it to the broker, then acknowledge.
    Event(Box<jetstream::Message>),
    /// Retained state from a bucket, read at start.
    State { topic: String, payload: Bytes },
    /// The state read at start is all there.
    Loaded,
    /// The presence topics the presence bucket holds now.
    Present(HashSet<String>),
    /// This sidecar's consumer reads the stream: events cross from here.
    Ready,
    /// The NATS servers have no JetStream (nothing answered its API, every
    /// time of [`ABSENT_TRIES`]): the edge stopped; the link carries on
    /// with core NATS.
    NoJetStream,
}

/// Set-ups in a row that find no JetStream before the edge gives up (a
/// server that has it answers its API even while it cannot serve it).
pub const ABSENT_TRIES: u32 = 3;

/// Why the stream and buckets could not be set up.
#[derive(Debug, thiserror::Error)]
pub(super) enum SetUpError {
    #[error("nothing answers JetStream's API: the NATS server runs without JetStream")]
    Absent,
    #[error("{0}")]
    Refused(String),
}

/// What the link asks of the bucket writer.
#[derive(Debug)]
pub enum KvOp {
    /// Put (a payload) or delete (none) the entry of a retained topic.
    Write {
        topic: String,
        payload: Option<Bytes>,
    },
    /// List the presence bucket ([`FromDurable::Present`]).
    ListPresence,
    /// Read the buckets again ([`FromDurable::State`], then `Loaded`):
    /// after a reconnection, what changed meanwhile.
    Reload,
}

/// The link's handles on the JetStream edge.
pub struct Durable {
    pub events: mpsc::Sender<(String, Bytes)>,
    pub kv: mpsc::UnboundedSender<KvOp>,
}

fn replicas(config: &ClusterConfig) -> usize {
    config.jetstream_replicas.clamp(1, 3)
}

/// Starts the publisher and, in the background, the set-up, the bucket
/// writer and the consumer; `tx` gets what they bring in.
/// Who this sidecar is in JetStream.
pub struct Identity {
    /// The connection's name: its durable consumer's, escaped.
    pub connection: String,
    /// The connection's unique token: its events' [`js::ORIGIN`].
    pub origin: String,
}

pub fn start(
    client: async_nats::Client,
    config: &ClusterConfig,
    topics: Topics,
    Identity { connection, origin }: Identity,
    counters: Arc<JetStreamCounters>,
    tx: mpsc::Sender<FromDurable>,
    stop: CancellationToken,
) -> Durable {
    let context = jetstream::ContextBuilder::new()
        .timeout(ACK_TIMEOUT)
        // One wake of the publisher may send up to MAX_EVENTS messages
        // (events of alternating subjects) beyond IN_FLIGHT_MESSAGES.
        .max_ack_inflight(IN_FLIGHT_MESSAGES + batch::MAX_EVENTS + 64)
        .backpressure_on_inflight(true)
        .build(client);
    let (events, events_rx) = mpsc::channel(config.buffer.clamp(64, IN_FLIGHT));
    let (kv, kv_rx) = mpsc::unbounded_channel();
    let publisher = publish(
        context.clone(),
        Outbox::new(origin),
        events_rx,
        counters.clone(),
    );
    tokio::spawn(run_until(stop.clone(), publisher).in_current_span());
    let edge = Edge {
        context,
        config: config.clone(),
        topics,
        consumer: js::consumer_name(&connection),
        counters,
        tx,
    };
    tokio::spawn(run_until(stop, edge.run(kv_rx)).in_current_span());
    Durable { events, kv }
}

async fn run_until(stop: CancellationToken, f: impl std::future::Future<Output = ()>) {
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = f => {}
    }
}

/// Publishes events in order as they come, many messages awaiting their
/// acknowledgement at once; one not acknowledged is repeated, same
/// message ID, until it is. Events that queued while the publisher sent
/// or waited go together ([`batch`]).
async fn publish(
    context: Context,
    mut outbox: Outbox,
    mut rx: mpsc::Receiver<(String, Bytes)>,
    counters: Arc<JetStreamCounters>,
) {
    let mut waiting = FuturesUnordered::new();
    let mut events = Vec::with_capacity(batch::MAX_EVENTS);
    loop {
        tokio::select! {
            n = rx.recv_many(&mut events, batch::MAX_EVENTS), if waiting.len() < IN_FLIGHT_MESSAGES => {
                if n == 0 {
                    break;
                }
                for next in batch::group(std::mem::take(&mut events)) {
                    let id = outbox.next_id();
                    let mut headers = HeaderMap::new();
                    headers.insert(js::MSG_ID, id.as_str());
                    headers.insert(js::ORIGIN, outbox.origin());
                    let (payload, count) = next.body();
                    if let Some(count) = count {
                        headers.insert(batch::BATCH, count.to_string().as_str());
                    }
                    let message = Stored {
                        subject: next.subject,
                        headers,
                        payload,
                        events: next.payloads.len() as u64,
                    };
                    counters.published.add(message.events);
                    counters.messages.inc();
                    // The first attempt is sent here, in order; only
                    // repeats may overtake later messages.
                    let first = context
                        .publish_with_headers(
                            message.subject.clone(),
                            message.headers.clone(),
                            message.payload.clone(),
                        )
                        .await;
                    waiting.push(until_acked(context.clone(), message, first, counters.clone()));
                }
            }
            Some(()) = waiting.next() => {}
        }
    }
    while waiting.next().await.is_some() {}
}

/// One stream message of the publisher's.
struct Stored {
    subject: String,
    headers: HeaderMap,
    payload: Bytes,
    /// Events it carries.
    events: u64,
}

/// Waits for `message`'s acknowledgement, sending it again (same message
/// ID) until the stream acknowledges it.
async fn until_acked(
    context: Context,
    message: Stored,
    first: Result<jetstream::context::PublishAckFuture, jetstream::context::PublishError>,
    counters: Arc<JetStreamCounters>,
) {
    let mut attempt = first;
    let mut wait = Duration::from_millis(50);
    loop {
        match attempt {
            Ok(ack) => match ack.await {
                Ok(_) => break,
                Err(e) => debug!(error = %e, "An event was not acknowledged; again."),
            },
            Err(e) => debug!(error = %e, "An event could not go to JetStream; again."),
        }
        counters.republished.inc();
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(1));
        attempt = context
            .publish_with_headers(
                message.subject.clone(),
                message.headers.clone(),
                message.payload.clone(),
            )
            .await;
    }
    counters.acked.add(message.events);
}

/// The set-up, the consumer and (in [`super::buckets`]) the buckets.
pub(super) struct Edge {
    pub(super) context: Context,
    pub(super) config: ClusterConfig,
    pub(super) topics: Topics,
    pub(super) consumer: String,
    pub(super) counters: Arc<JetStreamCounters>,
    pub(super) tx: mpsc::Sender<FromDurable>,
}

impl Edge {
    async fn run(self, mut ops: mpsc::UnboundedReceiver<KvOp>) {
        let mut absent = 0;
        let (stream, buckets) = loop {
            match self.set_up().await {
                Ok(ready) => break ready,
                Err(e) => {
                    absent = match e {
                        SetUpError::Absent => absent + 1,
                        SetUpError::Refused(_) => 0,
                    };
                    if absent >= ABSENT_TRIES {
                        let _ = self.tx.send(FromDurable::NoJetStream).await;
                        return;
                    }
                    warn!(error = %e, "JetStream is not ready; trying again.");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        };
        self.load(&buckets).await;
        tokio::spawn(self.consume(stream).in_current_span());
        self.write(&buckets, &mut ops).await;
    }

    /// Creates what is missing with the configured replicas, or with one
    /// where NATS is not clustered.
    async fn set_up(&self) -> Result<(stream::Stream, HashMap<Bucket, kv::Store>), SetUpError> {
        let mut r = replicas(&self.config);
        loop {
            match self.create(r).await {
                Ok(ready) => return Ok(ready),
                Err(SetUpError::Refused(e)) if r > 1 => {
                    info!(error = %e, replicas = r, "JetStream refused the replicas; trying with one.");
                    r = 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn create(
        &self,
        replicas: usize,
    ) -> Result<(stream::Stream, HashMap<Bucket, kv::Store>), SetUpError> {
        let max_age = Duration::from_secs(self.config.events_max_age_s.max(60));
        let stream = self
            .context
            .get_or_create_stream(stream::Config {
                name: js::stream_name(&self.topics),
                subjects: vec![js::stream_subject(&self.topics)],
                max_age,
                num_replicas: replicas,
                storage: match self.config.jetstream_storage {
                    StreamStorage::File => stream::StorageType::File,
                    StreamStorage::Memory => stream::StorageType::Memory,
                },
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .map_err(|e| match e.kind() {
                CreateStreamErrorKind::JetStreamUnavailable => SetUpError::Absent,
                _ => SetUpError::Refused(format!("event stream: {e}")),
            })?;
        let mut buckets = HashMap::new();
        for bucket in Bucket::ALL {
            let max_age = match bucket {
                Bucket::Presence => Duration::from_secs(self.config.presence_ttl_s.max(3)),
                _ => Duration::ZERO,
            };
            let name = bucket.name(&self.topics);
            // The bucket's stream as the client library would make it:
            // its own maker first asks for the account's API level, which
            // a 2.9 server does not report in the form it parses.
            self.context
                .get_or_create_stream(stream::Config {
                    name: format!("KV_{name}"),
                    subjects: vec![format!("$KV.{name}.>")],
                    max_messages_per_subject: 1,
                    max_age,
                    storage: stream::StorageType::File,
                    num_replicas: replicas,
                    allow_rollup: true,
                    deny_delete: true,
                    allow_direct: true,
                    discard: stream::DiscardPolicy::New,
                    ..Default::default()
                })
                .await
                .map_err(|e| SetUpError::Refused(format!("bucket {name}: {e}")))?;
            let store = self
                .context
                .get_key_value(&name)
                .await
                .map_err(|e| SetUpError::Refused(format!("bucket {name}: {e}")))?;
            buckets.insert(bucket, store);
        }
        Ok((stream, buckets))
    }

    /// This sidecar's durable consumer, read for good (the client pulls
    /// again after reconnecting; the consumer is made again if it went).
    fn consume(&self, stream: stream::Stream) -> impl std::future::Future<Output = ()> {
        let tx = self.tx.clone();
        let name = self.consumer.clone();
        let subject = js::stream_subject(&self.topics);
        let inactive = Duration::from_secs(self.config.events_max_age_s.max(60));
        async move {
            loop {
                let config = consumer::pull::Config {
                    durable_name: Some(name.clone()),
                    deliver_policy: consumer::DeliverPolicy::New,
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: Duration::from_secs(10),
                    max_ack_pending: 20_000,
                    filter_subject: subject.clone(),
                    inactive_threshold: inactive,
                    ..Default::default()
                };
                let messages = match stream.get_or_create_consumer(&name, config).await {
                    Ok(c) => {
                        c.stream()
                            .max_messages_per_batch(1000)
                            .heartbeat(Duration::from_secs(2))
                            .expires(Duration::from_secs(10))
                            .messages()
                            .await
                    }
                    Err(e) => {
                        warn!(error = %e, "Cannot make this sidecar's JetStream consumer; trying again.");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                let mut messages = match messages {
                    Ok(m) => {
                        let _ = tx.send(FromDurable::Ready).await;
                        m
                    }
                    Err(e) => {
                        warn!(error = %e, "Cannot read this sidecar's JetStream consumer; trying again.");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                while let Some(m) = messages.next().await {
                    match m {
                        Ok(m) => {
                            if tx.send(FromDurable::Event(Box::new(m))).await.is_err() {
                                return;
                            }
                        }
                        Err(e) => debug!(error = %e, "JetStream consumer hiccup."),
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
