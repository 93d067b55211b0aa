//! Request routing: consumers' requests to the agent hosting the Thing, the
//! agent's replies back to exactly the consumer that asked.
//!
//! Every forwarded request gets a fresh UUID as its `correlationID` (its
//! *route*); agents answer with it, as the draft asks of any reply, and the
//! router restores the consumer's own correlation ID. So two consumers using
//! the same correlation ID, or none, never see each other's replies.
//!
//! No I/O here: each call returns the [`Effect`]s the dispatcher carries out
//! (invocation records are queued for the store, never waited for:
//! `records.rs`).
//!
//! Which file holds which part: `docs/architecture.md`, "Where is what".

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;
use tokio_util::time::delay_queue::{self, DelayQueue};

mod asked;
mod credit;
mod finished;
mod hosts;
mod input;
mod lifecycle;
mod records;
mod replies;
mod routing;
mod timers;

use self::asked::{Asked, Invocation, Kind};
use super::foreign::ForeignRoutes;
use super::subscriptions::ConnId;
use crate::broker::Publication;
use crate::lmos::splice::peek_member;
use crate::lmos::{Message, MessageType};
use crate::quotas::{Quota, Quotas, Tally};
use crate::telemetry::metrics::Metrics;
use crate::topics::Topics;

/// Where a consumer's replies go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Consumer {
    WebSocket(ConnId),
    /// An MQTT consumer: its reply topic and, for MQTT 5, its Correlation
    /// Data; its principal, as the MQTT guard named it.
    Mqtt {
        topic: String,
        correlation_data: Option<Bytes>,
        principal: Option<String>,
    },
}

impl Consumer {
    /// Invocations are named per consumer: WebSocket connection, or MQTT
    /// reply topic.
    fn key(&self) -> String {
        match self {
            Consumer::WebSocket(c) => format!("ws:{c}"),
            Consumer::Mqtt { topic, .. } => format!("mqtt:{topic}"),
        }
    }
}

/// Who serves a Thing's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    WebSocket(ConnId),
    /// An MQTT agent that announced itself on `{prefix}/{thing}/agent/status`.
    Mqtt,
}

#[derive(Debug)]
pub enum Effect {
    /// A reply or error for a consumer.
    ToConsumer(Consumer, String),
    /// A message of an invocation whose consumer asked for binary chunks:
    /// a WebSocket connection writes a chunk as a binary frame, everything
    /// else as [`Effect::ToConsumer`].
    ChunkToConsumer(Consumer, String),
    /// A request for an agent connected over WebSocket.
    ToAgent(ConnId, String),
    Publish(Publication),
    /// The gateway's bus subscription changes: it takes the requests other
    /// sidecars route to a Thing hosted here, while it is.
    Subscribe(String),
    Unsubscribe(String),
}

struct Pending {
    consumer: Consumer,
    /// What the consumer's copies carry as `correlationID`.
    correlation: String,
    thing: String,
    /// The request's kind; what only an invocation has.
    asked: Asked,
    finished: bool,
    /// In the queue of remembered requests: finished, or an invocation
    /// whose agent went silent past its liveness (still listened to).
    remembered: bool,
    /// Whose quota it counts against while it waits (`anonymous` for an
    /// MQTT consumer the guard did not name).
    principal: Arc<str>,
    /// The forwarded request's `traceparent`: what the sidecar says in the
    /// agent's stead (timeouts, failures) continues its trace.
    traceparent: Option<String>,
    /// When it was forwarded and as what, until its first answer.
    started: Option<(Instant, MessageType)>,
    /// When it was forwarded, for the console's list of running invocations.
    since: Instant,
}

impl Pending {
    /// A message the sidecar writes to the consumer about this request.
    fn speak(&self, mut message: Message) -> Message {
        message.traceparent = self.traceparent.clone();
        message
    }

    /// Everyone who gets the request's answers: the consumer that asked and
    /// the invocation's watchers.
    fn to_all(&self, text: &str) -> Vec<Effect> {
        let binary = self.asked.invocation().is_some_and(|i| i.binary);
        std::iter::once(&self.consumer)
            .chain(self.watchers())
            .map(|c| match binary {
                true => Effect::ChunkToConsumer(c.clone(), text.to_owned()),
                false => Effect::ToConsumer(c.clone(), text.to_owned()),
            })
            .collect()
    }

    fn follows(&self, consumer: &Consumer) -> bool {
        self.consumer == *consumer || self.watchers().any(|w| w == consumer)
    }

    /// An invocation's watchers; a property request has none.
    fn watchers(&self) -> impl Iterator<Item = &Consumer> {
        self.asked
            .invocation()
            .into_iter()
            .flat_map(|i| &i.watchers)
    }
}

/// Timer keys: the first reply of a request, or the answer to a cancel.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Timer {
    Reply(String),
    Cancel(String),
    /// A remembered invocation's retention ends.
    Retain(String),
}

pub struct Requests {
    topics: Topics,
    timeout: Duration,
    /// How long an invocation may go without a status from its agent.
    liveness: Duration,
    /// Remembered invocations sidecar-wide, at most.
    finished_limit: usize,
    /// Liveness per `{thing}` or `{thing}#{action}`.
    liveness_overrides: HashMap<String, Duration>,
    /// How long a remembered invocation is kept.
    retention: Duration,
    /// Invocations running at once, at most.
    max_running: usize,
    /// The principal of each WebSocket / HTTP consumer connection.
    owners: HashMap<ConnId, Arc<str>>,
    quotas: Arc<Quotas>,
    /// Per principal: invocations running, other requests waiting.
    running_by: Tally,
    pending_by: Tally,
    hosts: HashMap<String, Host>,
    routes: HashMap<String, Pending>,
    /// (consumer key or owner key, correlation) → route, for naming
    /// invocations.
    invocations: HashMap<(String, String), String>,
    /// (consumer key or owner key, action) → route of its latest invocation.
    latest_invocation: HashMap<(String, String), String>,
    /// Remembered invocations per principal (`finished.rs`).
    finished: finished::Finished,
    timers: DelayQueue<Timer>,
    timer_keys: HashMap<Timer, delay_queue::Key>,
    /// Requests other sidecars routed to agents connected here.
    foreign: ForeignRoutes,
    metrics: Metrics,
    /// Input streams: the order of each invocation's `actionInput` chunks.
    inputs: HashMap<String, crate::lmos::stream::Sequencer>,
    /// Output streams with credit, by route (`credit.rs`).
    credits: HashMap<String, credit::Credit>,
    /// `requests.stream_hold_bytes`: what one stream may hold past its
    /// credit.
    stream_hold_bytes: usize,
    /// `requests.stream_hold_total_bytes`: what all streams together may
    /// hold, and what they hold now.
    stream_hold_total: usize,
    held_total: usize,
    /// Where invocation records are kept across a restart (`records.rs`).
    records: Option<crate::store::Table>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum ClaimError {
    AlreadyHosted(String),
}

impl std::fmt::Display for ClaimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClaimError::AlreadyHosted(t) => {
                write!(f, "the Thing `{t}` is already hosted by another agent")
            }
        }
    }
}

impl Requests {
    pub fn new(topics: Topics, timeout: Duration, finished_limit: usize) -> Requests {
        Requests {
            topics,
            timeout,
            liveness: timeout,
            finished_limit,
            liveness_overrides: HashMap::new(),
            retention: Duration::from_secs(3600),
            max_running: usize::MAX,
            owners: HashMap::new(),
            quotas: Quotas::none(),
            running_by: Tally::default(),
            pending_by: Tally::default(),
            hosts: HashMap::new(),
            routes: HashMap::new(),
            invocations: HashMap::new(),
            latest_invocation: HashMap::new(),
            finished: finished::Finished::default(),
            timers: DelayQueue::new(),
            timer_keys: HashMap::new(),
            foreign: ForeignRoutes::default(),
            metrics: Metrics::default(),
            inputs: HashMap::new(),
            credits: HashMap::new(),
            stream_hold_bytes: 1024 * 1024,
            stream_hold_total: 64 * 1024 * 1024,
            held_total: 0,
            records: None,
        }
    }

    /// What one output stream may hold past its consumer's credit, and
    /// all of them together.
    pub fn with_stream_hold_bytes(mut self, per_stream: usize, total: usize) -> Requests {
        self.stream_hold_bytes = per_stream;
        self.stream_hold_total = total;
        self
    }

    /// How long an invocation may go without a sign of life from its agent
    /// (else the request timeout).
    pub fn with_action_liveness(mut self, liveness: Duration) -> Requests {
        self.liveness = liveness;
        self
    }

    /// Liveness of particular Things (`{thing}`) or actions
    /// (`{thing}#{action}`).
    pub fn with_liveness_overrides(mut self, overrides: HashMap<String, Duration>) -> Requests {
        self.liveness_overrides = overrides;
        self
    }

    /// How long finished invocations stay, and how many may run at once.
    pub fn with_invocation_limits(mut self, retention: Duration, max_running: usize) -> Requests {
        self.retention = retention;
        self.max_running = max_running;
        self
    }

    /// A consumer connection and its principal: its invocations belong to
    /// the principal, so another of its connections can query or cancel
    /// them.
    pub fn register(&mut self, conn: ConnId, principal: &str) {
        self.owners.insert(conn, principal.into());
    }

    /// Per-principal quotas on running invocations and waiting requests.
    pub fn with_quotas(mut self, quotas: Arc<Quotas>) -> Requests {
        self.quotas = quotas;
        self
    }

    /// The quotas, for the dispatcher's own (subscriptions).
    pub fn quotas(&self) -> &Arc<Quotas> {
        &self.quotas
    }

    /// Whose quotas a consumer's requests count against.
    fn principal_of(&self, consumer: &Consumer) -> Arc<str> {
        let named = match consumer {
            Consumer::WebSocket(conn) => self.owners.get(conn).cloned(),
            Consumer::Mqtt { principal, .. } => principal.as_deref().map(Arc::from),
        };
        named.unwrap_or_else(|| Arc::from(crate::auth::ANONYMOUS))
    }

    /// The tally a waiting request of this kind counts in.
    fn tally(&mut self, kind: Kind) -> &mut Tally {
        match kind {
            Kind::Invocation => &mut self.running_by,
            Kind::ReadProperty | Kind::WriteProperty => &mut self.pending_by,
        }
    }

    /// A request stops waiting (answered, remembered, forgotten): its
    /// principal's quota has room again.
    fn stops_waiting(&mut self, kind: Kind, principal: &str) {
        self.tally(kind).sub(principal, 1);
    }

    /// Invocations running / property requests waiting of one principal.
    pub fn usage(&self, principal: &str) -> (u64, u64) {
        (
            self.running_by.get(principal),
            self.pending_by.get(principal),
        )
    }

    fn owner_key(&self, consumer: &Consumer) -> Option<String> {
        match consumer {
            Consumer::WebSocket(conn) => self.owners.get(conn).map(|p| format!("principal:{p}")),
            Consumer::Mqtt { principal, .. } => {
                principal.as_ref().map(|p| format!("principal:{p}"))
            }
        }
    }

    /// Reports request latencies here.
    pub fn with_metrics(mut self, metrics: Metrics) -> Requests {
        self.running_by = Tally::new(metrics.quota_largest(Quota::RunningInvocations.label()));
        self.pending_by = Tally::new(metrics.quota_largest(Quota::PendingRequests.label()));
        self.metrics = metrics;
        self
    }

    pub fn pending_count(&self) -> usize {
        self.routes.values().filter(|p| !p.remembered).count()
    }

    /// Requests of one consumer still waiting, running invocations included
    /// (not those whose agent went silent: they are remembered, bounded).
    pub fn pending_for(&self, consumer: &Consumer) -> usize {
        self.routes
            .values()
            .filter(|p| !p.remembered && p.consumer == *consumer)
            .count()
    }

    pub fn remembered_count(&self) -> usize {
        self.routes.len()
    }

    /// Invocations waiting for their agent's final status.
    fn running_count(&self) -> usize {
        self.routes
            .values()
            .filter(|p| p.asked.kind() == Kind::Invocation && !p.remembered)
            .count()
    }

    /// Invocations not finished yet, without who asked (the console shows
    /// them to anyone who may consume the Thing).
    pub fn running_invocations(&self) -> Vec<RunningInvocation> {
        self.routes
            .values()
            .filter(|p| !p.finished)
            .filter_map(|p| Some((p, p.asked.invocation()?)))
            .map(|(p, i)| RunningInvocation {
                thing: p.thing.clone(),
                action: i.action.clone(),
                status: i.latest.as_deref().and_then(status_of),
                age_ms: u64::try_from(p.since.elapsed().as_millis()).unwrap_or(u64::MAX),
            })
            .collect()
    }
}

/// A status's `status`: peeked when the text is compact, else parsed (an
/// agent's status may be forwarded as the agent wrote it).
fn status_of(text: &str) -> Option<String> {
    peek_member(text, "status").map(str::to_owned).or_else(|| {
        serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|v| v["status"].as_str().map(str::to_owned))
    })
}

/// An invocation in progress, as the console lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunningInvocation {
    pub thing: String,
    pub action: String,
    /// The latest status its agent sent, none before the first.
    pub status: Option<String>,
    pub age_ms: u64,
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod quota_tests;

#[cfg(test)]
#[path = "credit_router_tests.rs"]
mod credit_router_tests;

#[cfg(test)]
mod record_tests;
