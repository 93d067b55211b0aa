//! The one task that owns the gateway's state: the subscription table, the
//! request router and every connection's outbound queue. It applies the
//! connections' commands, keeps the gateway's bus subscriptions in step, fans
//! deliveries out, and routes requests and replies.
//!
//! Split as rumqttd splits its router from its links: [`Core`] holds the
//! state and decides, one input at a time and without I/O, handing each
//! decision (a message for a connection, a command for the bus) to its
//! [`Decisions`]; [`Dispatcher`] is the edge that feeds it and whose
//! [`Handoff`](edge::Handoff) offers those to the connections' queues and the bus, never
//! waiting on either. Tests run the core with an [`Out`] and read its
//! decisions off it.

mod bus;
mod commands;
mod deliveries;
mod edge;
mod mqtt_requests;

pub use edge::Dispatcher;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio::sync::oneshot;

use super::budget::Budgets;
use super::history::{self, Anchor, History, HistoryLimits, HistoryStats};
use super::outbound::{Outbound, RecipientCopy};
use super::published::LoggedOnce;
use super::requests::{ClaimError, Effect, Requests, RunningInvocation};
use super::subscriptions::{ConnId, Selector, Table};
use crate::broker::{BusCommand, Delivery, Publication};
use crate::directory::DirectoryService;
use crate::lmos::dialect::{self, Dialect};
use crate::lmos::splice::Prepared;
use crate::lmos::Message;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::MessageTracer;
use crate::topics::Topics;

#[derive(Debug)]
pub enum Command {
    /// A WebSocket agent declares the Things it hosts, before its handshake
    /// is answered.
    Claim {
        conn: ConnId,
        things: Vec<String>,
        reply: oneshot::Sender<Result<(), ClaimError>>,
    },
    /// A consumer connection (WebSocket, or a principal's HTTP one).
    Register {
        conn: ConnId,
        outbound: Outbound,
        /// Its principal, which owns its invocations.
        principal: String,
    },
    Subscribe {
        conn: ConnId,
        thing: String,
        selector: Selector,
        correlation_id: String,
        /// Confirm with an `acknowledgement` (a Kotlin-dialect connection,
        /// whose client waits for one) unless a reading answers it.
        acknowledge: bool,
        /// Send the events after this from the history first.
        resume: Option<Anchor>,
    },
    Unsubscribe {
        conn: ConnId,
        thing: String,
        selector: Selector,
        correlation_id: String,
        acknowledge: bool,
    },
    /// A consumer's request.
    Request {
        conn: ConnId,
        message: Box<Message>,
    },
    /// A hosting agent's message that may answer a request; published as
    /// `fallback` when it does not.
    AgentMessage {
        /// The agent's connection.
        conn: ConnId,
        thing: String,
        message: Box<Message>,
        fallback: Vec<Publication>,
    },
    Deregister {
        conn: ConnId,
    },
    Stats {
        reply: oneshot::Sender<GatewayStats>,
    },
    /// Per-Thing activity for the console.
    Activity {
        reply: oneshot::Sender<Activity>,
    },
    /// The Things an agent hosts now (MCP's tools, A2A's agents): the
    /// hosts alone, without walking the subscriptions as `Activity` does.
    Hosted {
        reply: oneshot::Sender<Vec<String>>,
    },
}

/// What the console shows of the gateway, per Thing: who hosts it, how
/// many subscribe, and the invocations running.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Activity {
    /// thingID → the agent's transport (`websocket`, `mqtt`).
    pub hosts: HashMap<String, &'static str>,
    /// thingID → (subscriptions, distinct consumer connections).
    pub subscriptions: HashMap<String, (usize, usize)>,
    pub running: Vec<RunningInvocation>,
}

/// What the dispatcher reports to and consults besides the bus.
pub struct Services {
    pub tracer: MessageTracer,
    pub directory: DirectoryService,
    pub metrics: Metrics,
    pub limits: Limits,
    /// Check what agents publish against their TDs' data schemas.
    pub validate_agent_data: bool,
    pub history: HistoryLimits,
    pub budgets: Budgets,
    /// Where the resume history is kept across a restart, and what it
    /// held at start-up (`None`: nothing is kept).
    pub kept_history: Option<(history::HistoryLog, history::Rows)>,
}

/// Per-connection limits the dispatcher enforces, because it owns the state
/// they count.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_subscriptions: usize,
    pub max_pending_requests: usize,
}

/// Counts for tests, health and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GatewayStats {
    pub connections: usize,
    pub subscriptions: usize,
    /// Requests waiting for an agent's answer.
    pub pending_requests: usize,
    /// Requests and invocations remembered, finished ones included.
    pub remembered_requests: usize,
    pub hosted_things: usize,
    /// Requests other sidecars routed to agents here, not yet fully answered.
    pub remote_requests: usize,
    /// What the resume history holds.
    pub history: HistoryStats,
}

/// The gateway's state and what it decides, without I/O: each step takes
/// one input (a command, a delivery, a timer) and hands each decision, as
/// it makes it, to its [`Decisions`]: the [`Dispatcher`]'s hand-off to the
/// connections' queues and the bus, or an [`Out`] that keeps them (tests).
/// It never awaits.
pub struct Core<D = Out> {
    table: Table,
    /// Connections registered and not yet gone.
    registered: HashSet<ConnId>,
    /// Latest reading of every property of the Things the gateway follows, so
    /// a new observer gets the current value at once even when the gateway's
    /// bus subscription (and the retained message it brought) predates it.
    latest: HashMap<String, HashMap<String, Arc<Prepared>>>,
    /// Recent events of the Things the gateway follows, for consumers that
    /// resume.
    history: History,
    requests: Requests,
    tracer: MessageTracer,
    directory: DirectoryService,
    metrics: Metrics,
    limits: Limits,
    validate_agent_data: bool,
    /// Topics whose malformed publications were logged.
    refusals_logged: LoggedOnce,
    topics: Topics,
    /// Kotlin `acknowledgement`s waiting for their subscription to be live.
    acks: commands::PendingAcks,
    out: D,
}

/// Where the core's decisions go.
pub trait Decisions {
    /// A message for a connection.
    fn send(&mut self, conn: ConnId, text: String);
    /// One recipient's copy of a fanned-out message (see [`Frame::Copy`]).
    fn send_copy(&mut self, conn: ConnId, copy: RecipientCopy);
    /// A message of an invocation streamed in binary frames (see
    /// [`Frame::Chunk`]).
    fn send_chunk(&mut self, conn: ConnId, text: String) {
        self.send(conn, text)
    }
    /// A publication or subscription change for the bus.
    fn bus(&mut self, command: BusCommand);
}

/// Decisions kept in order per destination, to be read (tests).
#[derive(Debug, Default)]
pub struct Out {
    pub(crate) sends: Vec<(ConnId, String)>,
    pub(crate) bus: Vec<BusCommand>,
}

impl Decisions for Out {
    fn send(&mut self, conn: ConnId, text: String) {
        self.sends.push((conn, text));
    }

    fn send_copy(&mut self, conn: ConnId, copy: RecipientCopy) {
        self.sends.push((conn, copy.text()));
    }

    fn bus(&mut self, command: BusCommand) {
        self.bus.push(command);
    }
}

impl<D: Decisions> Core<D> {
    pub fn new(topics: Topics, requests: Requests, services: Services, out: D) -> Core<D> {
        let Services {
            tracer,
            directory,
            metrics,
            limits,
            validate_agent_data,
            history,
            budgets,
            kept_history,
        } = services;
        let per_thing = metrics.budget_hit_counter("history_per_thing");
        let history = History::new(history).with_budget(budgets.history, per_thing);
        let mut core = Core {
            table: Table::with_gauge(
                metrics.quota_largest(crate::quotas::Quota::Subscriptions.label()),
            ),
            registered: HashSet::new(),
            latest: HashMap::new(),
            history,
            requests,
            tracer,
            directory,
            metrics,
            limits,
            validate_agent_data,
            refusals_logged: LoggedOnce::default(),
            topics,
            acks: commands::PendingAcks::default(),
            out,
        };
        if let Some((log, rows)) = kept_history {
            core.restore_history(log, rows);
        }
        core
    }

    /// Acknowledgements wait for the bus's barrier on `topic` (see
    /// [`Bus::with_barrier`]); without one they go at once.
    pub fn with_barrier(mut self, topic: Option<Arc<str>>) -> Core<D> {
        self.acks = commands::PendingAcks::new(topic);
        self
    }

    /// A connection's command (its outbound queue, for `Register`, stays
    /// with the edge).
    pub fn on_command(&mut self, command: Command) {
        self.apply(command);
    }

    /// What the broker delivered.
    pub fn on_delivery(&mut self, delivery: Delivery) {
        if let Some(token) = self.acks.barrier(&delivery) {
            return self.barrier_passed(token);
        }
        self.deliver(delivery);
    }

    /// The end of a turn of deliveries: what the history recorded in it
    /// goes to the store together.
    pub fn end_turn(&mut self) {
        self.history.flush();
    }

    /// The router's timers that fired.
    pub fn on_timeout(&mut self, effects: Vec<Effect>) {
        self.carry_out(effects);
    }

    /// The history's Things nobody follows any longer.
    pub fn on_history_expiry(&mut self, now: Instant) {
        for thing in self.history.expire(now) {
            let filter = self.topics.thing_events_filter(&thing);
            self.out.bus(BusCommand::Unsubscribe(filter));
        }
    }

    /// Shutdown: every request still waiting is answered (503).
    pub fn on_shutdown(&mut self) {
        let effects = self.requests.shutdown();
        self.carry_out(effects);
    }

    fn send(&mut self, conn: ConnId, text: String) {
        if let Some(text) = self.acks.hold(conn, text) {
            self.out.send(conn, text);
        }
    }
}

#[cfg(test)]
impl Core<Out> {
    /// What the steps since the last call decided.
    pub fn take(&mut self) -> Out {
        std::mem::take(&mut self.out)
    }
}

/// Parses a delivery once for all its recipients. Trace context from MQTT 5
/// user properties counts when the payload has none. An event or reading a
/// Kotlin-dialect agent published is put in the draft's form first, so
/// draft consumers read it (Kotlin ones get it rendered back).
/// An agent's reply as the canonical messages it stands for (several for a
/// Kotlin `actionStatuses`), parsed once; none when it is unreadable.
pub(crate) fn parse_agent_replies(payload: &[u8]) -> Vec<Message> {
    let value = match serde_json::from_slice::<Value>(payload) {
        Ok(Value::Object(map)) if dialect::detect(&map) == Some(Dialect::Kotlin) => {
            let Ok(normalized) = dialect::normalize(map, |_| None) else {
                return Vec::new();
            };
            return normalized
                .messages
                .into_iter()
                .filter_map(|m| Message::from_value(Value::Object(m)).ok())
                .collect();
        }
        Ok(value) => value,
        Err(_) => return Vec::new(),
    };
    Message::from_value(value).into_iter().collect()
}

#[cfg(test)]
mod tests;
