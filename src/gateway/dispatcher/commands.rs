//! What the connections ask of the dispatcher: registering, hosting,
//! subscriptions (with their limits and resume), requests and agents'
//! answers, a connection leaving.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use super::{Activity, Command, Core, Decisions, GatewayStats};
use crate::broker::{BusCommand, Delivery, Publication};
use crate::directory::affordances;
use crate::gateway::history::Anchor;
use crate::gateway::requests::{ClaimError, Consumer};
use crate::gateway::subscriptions::{ConnId, Selector};
use crate::gateway::{history, trace_publication};
use crate::lmos::splice::json_string;
use crate::lmos::{dialect, Body, Message, Problem, ProblemKind};
use crate::telemetry::metrics;

/// Who a subscription's answers go to, and whether it wants an
/// acknowledgement (the Kotlin dialect).
struct Subscriber {
    conn: ConnId,
    correlation_id: String,
    acknowledge: bool,
}

impl<D: Decisions> Core<D> {
    /// One command, handed to the method that carries it out.
    pub(super) fn apply(&mut self, command: Command) {
        match command {
            Command::Claim {
                conn,
                things,
                reply,
            } => self.claim(conn, &things, reply),
            // The edge keeps the queue (see `Dispatcher::command`).
            Command::Register {
                conn, principal, ..
            } => self.register(conn, &principal),
            Command::Subscribe {
                conn,
                thing,
                selector,
                correlation_id,
                acknowledge,
                resume,
            } => {
                let to = Subscriber {
                    conn,
                    correlation_id,
                    acknowledge,
                };
                self.subscribe(to, &thing, selector, resume)
            }
            Command::Unsubscribe {
                conn,
                thing,
                selector,
                correlation_id,
                acknowledge,
            } => {
                if let Some(change) = self.table.remove(conn, &thing, &selector) {
                    self.change_bus(change);
                }
                if acknowledge {
                    self.acknowledge(conn, &thing, &correlation_id, &selector, false);
                }
            }
            Command::Request { conn, message } => self.websocket_request(conn, message),
            Command::AgentMessage {
                conn,
                thing,
                message,
                fallback,
            } => self.agent_message(conn, &thing, &message, fallback),
            Command::Deregister { conn } => self.forget(conn),
            Command::Stats { reply } => {
                let _ = reply.send(self.stats());
            }
            Command::Activity { reply } => {
                let _ = reply.send(self.activity());
            }
            Command::Hosted { reply } => {
                let _ = reply.send(self.requests.hosts().map(|(t, _)| t.to_owned()).collect());
            }
        }
    }

    /// A connection claims `things` as their agent's; the answer goes back
    /// on `reply`.
    fn claim(
        &mut self,
        conn: ConnId,
        things: &[String],
        reply: oneshot::Sender<Result<(), ClaimError>>,
    ) {
        let effects = match self.requests.claim(conn, things) {
            Ok(effects) => {
                let _ = reply.send(Ok(()));
                effects
            }
            Err(e) => {
                let _ = reply.send(Err(e));
                Vec::new()
            }
        };
        self.carry_out(effects);
    }

    /// A subscription (new or renewed) within the limits and the TD: a
    /// property's latest value at once, the acknowledgement, the history
    /// after `resume`'s anchor.
    fn subscribe(
        &mut self,
        to: Subscriber,
        thing: &str,
        selector: Selector,
        resume: Option<Anchor>,
    ) {
        let Subscriber {
            conn,
            correlation_id,
            acknowledge,
        } = to;
        if !self.registered.contains(&conn) {
            return;
        }
        let refused = self.subscription_limit(conn, thing, &selector);
        if let Some(problem) = refused.or_else(|| self.selector_against_td(thing, &selector)) {
            let text = problem.to_message(thing, Some(&correlation_id)).to_json();
            self.count_sent(metrics::WEBSOCKET, &text);
            self.send(conn, text);
            return;
        }
        let correlation: Arc<str> = json_string(&correlation_id).into();
        let change = self
            .table
            .add(conn, thing, selector.clone(), correlation.clone());
        let answered = self.latest_value(conn, thing, &selector, &correlation);
        if let Some(change) = change {
            self.change_bus(change);
        }
        if acknowledge && !answered {
            self.acknowledge(conn, thing, &correlation_id, &selector, true);
        }
        if let Some(anchor) = resume {
            let to = (conn, correlation_id.as_str(), &correlation);
            self.resume(to, thing, &selector, &anchor);
        }
    }

    /// An observed property's cached value goes to its new observer (the
    /// answer that stands for an acknowledgement). Whether one went.
    fn latest_value(
        &mut self,
        conn: ConnId,
        thing: &str,
        selector: &Selector,
        correlation: &Arc<str>,
    ) -> bool {
        let Selector::Property(name) = selector else {
            return false;
        };
        let cached = self.latest.get(thing).and_then(|m| m.get(name)).cloned();
        let Some(prepared) = cached else {
            return false;
        };
        let topic = self.topics.property(thing, name);
        let recipient = vec![(conn, correlation.clone())];
        self.fan_out(&topic, thing, name, &prepared, recipient);
        true
    }

    /// A request from a WebSocket client, within its pending limit and the
    /// Thing's TD, to the requests' router.
    fn websocket_request(&mut self, conn: ConnId, mut message: Box<Message>) {
        let consumer = Consumer::WebSocket(conn);
        let max = self.limits.max_pending_requests;
        if self.requests.pending_for(&consumer) >= max {
            self.metrics
                .limit_hit(metrics::WEBSOCKET, "max_pending_requests");
            let detail = format!("This connection already has {max} requests waiting for an agent (gateway.max_pending_requests); send more when some are answered.");
            let problem = Problem::new(crate::lmos::ProblemKind::TooManyRequests, detail);
            self.refuse(consumer, &message, problem);
            return;
        }
        if let Some(problem) = self.against_td(&message) {
            self.refuse(Consumer::WebSocket(conn), &message, problem);
            return;
        }
        self.trace_request(&mut message);
        let liveness = self.td_liveness(&message);
        let effects = self
            .requests
            .request(Consumer::WebSocket(conn), *message, liveness);
        self.carry_out(effects);
    }

    /// An agent's message: an answer to a request here, to one from
    /// another sidecar, or else what the edge prepared (`fallback`).
    fn agent_message(
        &mut self,
        conn: ConnId,
        thing: &str,
        message: &Message,
        fallback: Vec<Publication>,
    ) {
        if self.requests.answers(thing, message) {
            self.agent_reply(thing, message);
        } else if self.requests.answers_remote(thing, conn, message) {
            // For the router on another sidecar that asked: verbatim, as an
            // MQTT agent would answer.
            let text = message.to_json();
            self.count_sent(metrics::MQTT, &text);
            let mut publication = Publication::new(self.topics.agent_replies(thing), text, false);
            trace_publication(&self.tracer, message, &mut publication);
            self.publish(publication);
        } else {
            for mut publication in fallback {
                trace_publication(&self.tracer, message, &mut publication);
                self.publish(publication);
            }
        }
    }

    fn stats(&self) -> GatewayStats {
        GatewayStats {
            connections: self.registered.len(),
            subscriptions: self.table.len(),
            pending_requests: self.requests.pending_count(),
            remembered_requests: self.requests.remembered_count(),
            hosted_things: self.requests.hosted_count(),
            remote_requests: self.requests.remote_count(),
            history: self.history.stats(),
        }
    }

    fn activity(&self) -> Activity {
        Activity {
            hosts: self
                .requests
                .hosts()
                .map(|(t, via)| (t.to_owned(), via))
                .collect(),
            subscriptions: self
                .table
                .counts()
                .into_iter()
                .map(|(t, n)| (t.to_owned(), n))
                .collect(),
            running: self.requests.running_invocations(),
        }
    }

    /// Tells a Kotlin-dialect connection its subscription change took effect,
    /// as the Kotlin server does (its client waits for this before it
    /// listens, and may publish the moment it reads it). Sent once the
    /// broker has carried out the bus subscription queued before it: the
    /// bus's barrier comes back after it (see [`PendingAcks`]).
    pub(super) fn acknowledge(
        &mut self,
        conn: ConnId,
        thing: &str,
        correlation: &str,
        selector: &Selector,
        subscribe: bool,
    ) {
        let of = match (selector, subscribe) {
            (Selector::Event(_), true) => "subscribeevent",
            (Selector::Event(_), false) => "unsubscribeEvent",
            (Selector::Property(_), true) => "observeProperty",
            (Selector::Property(_), false) => "unobserveProperty",
            (Selector::AllEvents, true) => "subscribeAllEvents",
            (Selector::AllEvents, false) => "unsubscribeAllEvents",
        };
        let text = dialect::acknowledgement(thing, correlation, of).to_string();
        self.count_sent(metrics::WEBSOCKET, &text);
        match self.acks.wait(conn, text) {
            Ok(barrier) => self.out.bus(BusCommand::Publish(barrier)),
            Err((conn, text)) => self.send(conn, text),
        }
    }

    /// The bus's barrier `token` came back: its acknowledgement goes out,
    /// and what waited behind it.
    pub(super) fn barrier_passed(&mut self, token: u64) {
        if let Some((conn, ready)) = self.acks.passed(token) {
            for text in ready {
                self.out.send(conn, text);
            }
        }
    }

    /// An invoked action's liveness as its TD declares it
    /// (`"lmos:livenessMs"` in the action affordance).
    pub(super) fn td_liveness(&self, message: &Message) -> Option<std::time::Duration> {
        let Body::InvokeAction { action, .. } = &message.body else {
            return None;
        };
        let directory = self.directory.directory();
        let td = directory.get(&message.thing_id)?;
        let ms = td["actions"][action]["lmos:livenessMs"].as_u64()?;
        Some(std::time::Duration::from_millis(ms))
    }

    /// A resuming subscriber gets what the history holds after its anchor,
    /// as it would have had it live, before any live event (the dispatcher
    /// handles the next delivery only after this): no duplicates, no
    /// reordering. When the history cannot reach back that far, an `error`
    /// (`history-gap`, 410) says so first.
    pub(super) fn resume(
        &mut self,
        (conn, correlation_id, correlation): (ConnId, &str, &Arc<str>),
        thing: &str,
        selector: &Selector,
        anchor: &Anchor,
    ) {
        let replay = if self.history.is_on() {
            self.history.replay(thing, anchor, selector, Instant::now())
        } else {
            history::Replay {
                gap: true,
                events: Vec::new(),
            }
        };
        if replay.gap {
            let from = match anchor {
                Anchor::MessageId(id) => format!("the event `{id}`"),
                Anchor::Time(t) => format!("{t} µs since the epoch"),
            };
            let detail = if self.history.is_on() {
                format!("The history of `{thing}` does not reach back to {from}: events may have been missed. The {} it holds follow.", replay.events.len())
            } else {
                "The gateway keeps no history (history.events_per_thing or history.max_age_ms is 0): events may have been missed.".to_owned()
            };
            let problem = Problem::new(ProblemKind::HistoryGap, detail);
            let text = problem.to_message(thing, Some(correlation_id)).to_json();
            self.count_sent(metrics::WEBSOCKET, &text);
            self.send(conn, text);
        }
        for (event, prepared) in replay.events {
            let topic = self.topics.event(thing, &event);
            let recipient = vec![(conn, correlation.clone())];
            self.fan_out(&topic, thing, &event, &prepared, recipient);
        }
    }

    /// A subscription to an event or property the Thing's TD lacks.
    pub(super) fn selector_against_td(&self, thing: &str, selector: &Selector) -> Option<Problem> {
        let directory = self.directory.directory();
        let td = directory.get(thing)?;
        let result = match selector {
            Selector::Event(e) => affordances::require(td, "events", e),
            Selector::Property(p) => affordances::require(td, "properties", p),
            Selector::AllEvents => Ok(()),
        };
        result.err()
    }

    /// A new subscription beyond `gateway.max_subscriptions` is refused;
    /// renewing one the connection holds is not.
    pub(super) fn subscription_limit(
        &self,
        conn: ConnId,
        thing: &str,
        selector: &Selector,
    ) -> Option<Problem> {
        if self.table.holds(conn, thing, selector) {
            return None;
        }
        let max = self.limits.max_subscriptions;
        if self.table.subscription_count(conn) >= max {
            self.metrics
                .limit_hit(metrics::WEBSOCKET, "max_subscriptions");
            let detail = format!("This connection already holds {max} subscriptions (gateway.max_subscriptions); unsubscribe from some first.");
            return Some(Problem::new(ProblemKind::TooManyRequests, detail));
        }
        // The principal's, over all its connections.
        let (principal, used) = self.table.principal_usage(conn)?;
        let quota = crate::quotas::Quota::Subscriptions;
        let full = self
            .requests
            .quotas()
            .check(principal, quota, used, 1)
            .err()?;
        self.metrics.limit_hit(metrics::WEBSOCKET, quota.label());
        Some(Problem::new(ProblemKind::TooManyRequests, full.to_string()))
    }

    pub(super) fn register(&mut self, conn: ConnId, principal: &str) {
        self.registered.insert(conn);
        self.table.register(conn, principal);
        self.requests.register(conn, principal);
    }

    pub(super) fn forget(&mut self, conn: ConnId) {
        self.registered.remove(&conn);
        self.acks.forget(conn);
        for change in self.table.remove_connection(conn) {
            self.change_bus(change);
        }
        let effects = self.requests.connection_gone(conn);
        self.carry_out(effects);
    }
}

/// Acknowledgements queued behind a barrier on the bus: a publication on a
/// topic only the sidecar's own bus connection subscribes to, which the
/// broker delivers back only after every command queued before it. Before
/// this, a Kotlin client that published the moment it read its
/// `acknowledgement` could beat the subscription to the broker and miss
/// its own first events.
///
/// While a connection's acknowledgement waits, whatever else is for that
/// connection (a resume's replay, live events) waits behind it, so the
/// order stays as before: acknowledgement first.
#[derive(Debug, Default)]
pub(super) struct PendingAcks {
    topic: Option<Arc<str>>,
    next: u64,
    /// Barrier token → the connection whose acknowledgement waits for it.
    tokens: HashMap<u64, ConnId>,
    /// Per connection with an acknowledgement waiting, its messages in
    /// order.
    held: HashMap<ConnId, VecDeque<Held>>,
}

#[derive(Debug)]
enum Held {
    /// An acknowledgement until its barrier passes.
    Ack {
        token: u64,
        text: String,
    },
    Message(String),
}

impl PendingAcks {
    pub(super) fn new(topic: Option<Arc<str>>) -> PendingAcks {
        PendingAcks {
            topic,
            ..PendingAcks::default()
        }
    }

    /// The barrier to publish before `text` may go; without a barrier
    /// topic, the message back (to send at once).
    pub(super) fn wait(
        &mut self,
        conn: ConnId,
        text: String,
    ) -> Result<Publication, (ConnId, String)> {
        let Some(topic) = &self.topic else {
            return Err((conn, text));
        };
        self.next += 1;
        let token = self.next;
        self.tokens.insert(token, conn);
        self.held
            .entry(conn)
            .or_default()
            .push_back(Held::Ack { token, text });
        Ok(Publication::new(
            topic.to_string(),
            token.to_string(),
            false,
        ))
    }

    /// `text` for `conn`, unless it must wait behind an acknowledgement
    /// (then it is kept and `None` comes back).
    pub(super) fn hold(&mut self, conn: ConnId, text: String) -> Option<String> {
        if self.held.is_empty() {
            return Some(text);
        }
        match self.held.get_mut(&conn) {
            Some(queue) => {
                queue.push_back(Held::Message(text));
                None
            }
            None => Some(text),
        }
    }

    /// Whether what is for `conn` waits behind an acknowledgement.
    pub(super) fn holds(&self, conn: ConnId) -> bool {
        !self.held.is_empty() && self.held.contains_key(&conn)
    }

    /// The token, if `delivery` is a barrier coming back.
    pub(super) fn barrier(&self, delivery: &Delivery) -> Option<u64> {
        let topic = self.topic.as_deref()?;
        if delivery.topic != topic.as_bytes() {
            return None;
        }
        // Anything else on this topic (the readiness probe's token) is
        // no barrier of ours and is dropped as one that waits for nothing.
        Some(
            std::str::from_utf8(&delivery.payload)
                .ok()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0),
        )
    }

    /// The barrier `token` passed: its connection and what may go to it
    /// now, in order (up to the next acknowledgement still waiting).
    pub(super) fn passed(&mut self, token: u64) -> Option<(ConnId, Vec<String>)> {
        let conn = self.tokens.remove(&token)?;
        let queue = self.held.get_mut(&conn)?;
        for held in queue.iter_mut() {
            if let Held::Ack { token: t, text } = held {
                if *t == token {
                    *held = Held::Message(std::mem::take(text));
                }
            }
        }
        let mut ready = Vec::new();
        while let Some(Held::Message(_)) = queue.front() {
            if let Some(Held::Message(text)) = queue.pop_front() {
                ready.push(text);
            }
        }
        if queue.is_empty() {
            self.held.remove(&conn);
        }
        Some((conn, ready))
    }

    /// A connection gone: nothing waits for it any longer.
    pub(super) fn forget(&mut self, conn: ConnId) {
        if self.held.remove(&conn).is_some() {
            self.tokens.retain(|_, c| *c != conn);
        }
    }
}
