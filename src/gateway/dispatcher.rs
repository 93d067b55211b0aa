//! The one task that owns the gateway's state: the subscription table, the
//! request router and every connection's outbound queue. It applies the
//! connections' commands, keeps the gateway's bus subscriptions in step, fans
//! deliveries out, and routes requests and replies.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::history::{self, Anchor, History, HistoryLimits, HistoryStats};
use super::outbound::{Offer, Outbound};
use super::published::{self, Expected, LoggedOnce};
use super::requests::{ClaimError, Consumer, Effect, Requests, RunningInvocation};
use super::subscriptions::{ConnId, Selector, Stream, StreamChange, Table};
use super::{incoming_trace, message_info, trace_publication};
use crate::broker::{Bus, BusCommand, Delivery, Publication, ResponseInfo};
use crate::directory::{affordances, DirectoryService};
use crate::lmos::dialect::{self, Dialect};
use crate::lmos::splice::peek_member;
use crate::lmos::splice::{json_string, Prepared};
use crate::lmos::{Body, Message, Problem, ProblemKind};
use crate::telemetry::metrics::{self, Metrics};
use crate::telemetry::{MessageInfo, MessageTracer, Operation, TraceContext};
use crate::topics::{Route, Topics};

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
#[derive(Clone)]
pub struct Services {
    pub tracer: MessageTracer,
    pub directory: DirectoryService,
    pub metrics: Metrics,
    pub limits: Limits,
    /// Check what agents publish against their TDs' data schemas.
    pub validate_agent_data: bool,
    pub history: HistoryLimits,
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

pub struct Dispatcher {
    table: Table,
    outbounds: HashMap<ConnId, Outbound>,
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
    bus: Bus,
    /// Publications and subscription changes decided and not yet taken by
    /// the bus, in order. The loop decides without awaiting anything; the
    /// bus drains this as it can (see [`Dispatcher::run`]).
    to_bus: VecDeque<BusCommand>,
    topics: Topics,
    commands: mpsc::Receiver<Command>,
    deliveries: mpsc::Receiver<Delivery>,
}

/// Commands queued for the bus beyond which the dispatcher stops taking the
/// connections' commands until the bus catches up (backpressure, as when it
/// awaited each publication).
const BUS_BACKLOG: usize = 1024;

impl Dispatcher {
    pub fn new(
        bus: Bus,
        topics: Topics,
        requests: Requests,
        services: Services,
        commands: mpsc::Receiver<Command>,
        deliveries: mpsc::Receiver<Delivery>,
    ) -> Dispatcher {
        let Services {
            tracer,
            directory,
            metrics,
            limits,
            validate_agent_data,
            history,
        } = services;
        Dispatcher {
            table: Table::default(),
            outbounds: HashMap::new(),
            latest: HashMap::new(),
            history: History::new(history),
            requests,
            tracer,
            directory,
            metrics,
            limits,
            validate_agent_data,
            refusals_logged: LoggedOnce::default(),
            bus,
            to_bus: VecDeque::new(),
            topics,
            commands,
            deliveries,
        }
    }

    /// Runs until `shutdown`; then answers every request still waiting
    /// (503) and cancels `closing`, so connections close after that.
    pub async fn run(mut self, shutdown: CancellationToken, closing: CancellationToken) {
        // Its own handle, so that waiting for room on the bus borrows
        // nothing the other branches change.
        let bus = self.bus.clone();
        loop {
            let expiry = self.history.next_expiry();
            tokio::select! {
                _ = shutdown.cancelled() => {
                    let effects = self.requests.shutdown();
                    self.carry_out(effects);
                    // The 503s to MQTT consumers go out before connections
                    // are told to close.
                    self.flush_bus().await;
                    closing.cancel();
                    return;
                }
                // The bus takes what is queued for it as fast as it can;
                // the loop never waits on it anywhere else.
                permit = bus.reserve(), if !self.to_bus.is_empty() => match permit {
                    Ok(permit) => self.feed_bus(permit),
                    Err(_) => self.bus_closed(),
                },
                // A bus that falls behind slows the connections' commands
                // down, never the deliveries (which would stall the broker's
                // side of the bus).
                command = self.commands.recv(), if self.to_bus.len() < BUS_BACKLOG => match command {
                    Some(command) => self.apply(command),
                    None => return,
                },
                delivery = self.deliveries.recv() => match delivery {
                    Some(delivery) => self.deliver(delivery),
                    None => {
                        warn!("The message bus closed; the gateway stops delivering.");
                        return;
                    }
                },
                Some(effects) = self.requests.next_timeout(), if self.requests.has_timers() => {
                    self.carry_out(effects);
                }
                _ = sleep_until(expiry), if expiry.is_some() => {
                    for thing in self.history.expire(Instant::now()) {
                        let filter = self.topics.thing_events_filter(&thing);
                        self.to_bus.push_back(BusCommand::Unsubscribe(filter));
                    }
                }
            }
        }
    }

    fn apply(&mut self, command: Command) {
        match command {
            Command::Claim {
                conn,
                things,
                reply,
            } => {
                let result = self.requests.claim(conn, &things);
                let effects = match result {
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
            Command::Register {
                conn,
                outbound,
                principal,
            } => {
                self.outbounds.insert(conn, outbound);
                self.requests.register(conn, &principal);
            }
            Command::Subscribe {
                conn,
                thing,
                selector,
                correlation_id,
                acknowledge,
                resume,
            } => {
                if !self.outbounds.contains_key(&conn) {
                    return;
                }
                let refused = self.subscription_limit(conn, &thing, &selector);
                if let Some(problem) =
                    refused.or_else(|| self.selector_against_td(&thing, &selector))
                {
                    let text = problem.to_message(&thing, Some(&correlation_id)).to_json();
                    self.count_sent(metrics::WEBSOCKET, &text);
                    self.send(conn, text);
                    return;
                }
                let correlation: Arc<str> = json_string(&correlation_id).into();
                let change = self
                    .table
                    .add(conn, &thing, selector.clone(), correlation.clone());
                let mut answered = false;
                if let Selector::Property(name) = &selector {
                    let cached = self.latest.get(&thing).and_then(|m| m.get(name)).cloned();
                    if let Some(prepared) = cached {
                        let topic = self.topics.property(&thing, name);
                        let recipient = vec![(conn, correlation.clone())];
                        self.fan_out(&topic, &thing, name, &prepared, recipient);
                        answered = true;
                    }
                }
                if let Some(change) = change {
                    self.change_bus(change);
                }
                if acknowledge && !answered {
                    self.acknowledge(conn, &thing, &correlation_id, &selector, true);
                }
                if let Some(anchor) = resume {
                    let to = (conn, correlation_id.as_str(), &correlation);
                    self.resume(to, &thing, &selector, &anchor);
                }
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
            Command::Request { conn, mut message } => {
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
            Command::AgentMessage {
                conn,
                thing,
                message,
                fallback,
            } => {
                if self.requests.answers(&thing, &message) {
                    self.agent_reply(&thing, &message);
                } else if self.requests.answers_remote(&thing, conn, &message) {
                    // For the router on another sidecar that asked: verbatim,
                    // as an MQTT agent would answer.
                    let text = message.to_json();
                    self.count_sent(metrics::MQTT, &text);
                    let mut publication =
                        Publication::new(self.topics.agent_replies(&thing), text, false);
                    trace_publication(&self.tracer, &message, &mut publication);
                    self.publish(publication);
                } else {
                    for mut publication in fallback {
                        trace_publication(&self.tracer, &message, &mut publication);
                        self.publish(publication);
                    }
                }
            }
            Command::Deregister { conn } => self.forget(conn),
            Command::Stats { reply } => {
                let _ = reply.send(GatewayStats {
                    connections: self.outbounds.len(),
                    subscriptions: self.table.len(),
                    pending_requests: self.requests.pending_count(),
                    remembered_requests: self.requests.remembered_count(),
                    hosted_things: self.requests.hosted_count(),
                    remote_requests: self.requests.remote_count(),
                    history: self.history.stats(),
                });
            }
            Command::Activity { reply } => {
                let _ = reply.send(Activity {
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
                });
            }
        }
    }

    /// Tells a Kotlin-dialect connection its subscription change took effect,
    /// as the Kotlin server does (its client waits for this before it
    /// listens). Sent after the bus subscription, so what is published
    /// after it arrives reaches the subscriber.
    fn acknowledge(
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
        self.send(conn, text);
    }

    /// An invoked action's liveness as its TD declares it
    /// (`"lmos:livenessMs"` in the action affordance).
    fn td_liveness(&self, message: &Message) -> Option<std::time::Duration> {
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
    fn resume(
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
    fn selector_against_td(&self, thing: &str, selector: &Selector) -> Option<Problem> {
        let directory = self.directory.directory();
        let td = directory.get(thing)?;
        let result = match selector {
            Selector::Event(e) => affordances::require(td, "events", e),
            Selector::Property(p) => affordances::require(td, "properties", p),
            Selector::AllEvents => Ok(()),
        };
        result.err()
    }

    fn forget(&mut self, conn: ConnId) {
        self.outbounds.remove(&conn);
        for change in self.table.remove_connection(conn) {
            self.change_bus(change);
        }
        let effects = self.requests.connection_gone(conn);
        self.carry_out(effects);
    }

    fn change_bus(&mut self, change: StreamChange) {
        // With a history, the gateway keeps following a Thing's events for
        // a while after its last subscriber left, so a consumer that comes
        // back finds what it missed.
        if change.stream == Stream::Events {
            let needed = if change.subscribe {
                self.history.follow(&change.thing)
            } else {
                self.history.leave(&change.thing, Instant::now())
            };
            if !needed {
                return;
            }
        }
        let filter = match change.stream {
            Stream::Events => self.topics.thing_events_filter(&change.thing),
            Stream::Properties => self.topics.thing_properties_filter(&change.thing),
        };
        if !change.subscribe && change.stream == Stream::Properties {
            self.latest.remove(&change.thing);
        }
        self.to_bus.push_back(if change.subscribe {
            BusCommand::Subscribe(filter)
        } else {
            BusCommand::Unsubscribe(filter)
        });
    }

    /// Counts a message the sidecar sends; errors by kind too.
    fn count_sent(&self, transport: &'static str, text: &str) {
        let message_type = peek_member(text, "messageType").unwrap_or_default();
        self.metrics.sent(transport, message_type);
        if message_type == "error" {
            let kind = peek_member(text, "type").and_then(ProblemKind::from_type_uri);
            self.metrics.error(kind.map_or("agent", ProblemKind::slug));
        }
    }

    fn carry_out(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match &effect {
                Effect::ToConsumer(Consumer::WebSocket(_), text) | Effect::ToAgent(_, text) => {
                    self.count_sent(metrics::WEBSOCKET, text)
                }
                Effect::ToConsumer(Consumer::Mqtt { .. }, text) => {
                    self.count_sent(metrics::MQTT, text)
                }
                Effect::Publish(p) => {
                    if let Ok(text) = std::str::from_utf8(&p.payload) {
                        self.count_sent(metrics::MQTT, text);
                    }
                }
                Effect::Subscribe(_) | Effect::Unsubscribe(_) => {}
            }
            match effect {
                Effect::ToConsumer(Consumer::WebSocket(conn), text)
                | Effect::ToAgent(conn, text) => self.send(conn, text),
                Effect::ToConsumer(
                    Consumer::Mqtt {
                        topic,
                        correlation_data,
                        ..
                    },
                    text,
                ) => {
                    let mut publication = Publication::new(topic, text, false);
                    publication.correlation_data = correlation_data;
                    self.publish(publication);
                }
                Effect::Publish(publication) => self.publish(publication),
                Effect::Subscribe(filter) => self.to_bus.push_back(BusCommand::Subscribe(filter)),
                Effect::Unsubscribe(filter) => {
                    self.to_bus.push_back(BusCommand::Unsubscribe(filter))
                }
            }
        }
    }

    /// Hands the bus the first queued command through `permit`, and as
    /// many more as it has room for now.
    fn feed_bus(&mut self, permit: mpsc::Permit<'_, BusCommand>) {
        let Some(first) = self.to_bus.pop_front() else {
            return;
        };
        permit.send(first);
        let mut closed = false;
        while !self.to_bus.is_empty() {
            match self.bus.try_reserve() {
                Ok(Some(permit)) => {
                    if let Some(command) = self.to_bus.pop_front() {
                        permit.send(command);
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        if closed {
            self.bus_closed();
        }
    }

    fn bus_closed(&mut self) {
        warn!(
            dropped = self.to_bus.len(),
            "The message bus closed; queued publications and subscription changes are lost."
        );
        self.to_bus.clear();
    }

    /// Waits until the bus has taken everything queued (at shutdown).
    async fn flush_bus(&mut self) {
        while let Some(command) = self.to_bus.pop_front() {
            if self.bus.send_command(command).await.is_err() {
                return self.bus_closed();
            }
        }
    }

    /// Queues a publication for the bus (see [`Dispatcher::to_bus`]).
    fn publish(&mut self, publication: Publication) {
        self.to_bus.push_back(BusCommand::Publish(publication));
    }

    fn deliver(&mut self, delivery: Delivery) {
        let Ok(topic) = std::str::from_utf8(&delivery.topic) else {
            return;
        };
        let Some(route) = self.topics.parse(topic) else {
            debug!(topic, "Ignoring a delivery outside the LMOS topics.");
            return;
        };
        match &route {
            Route::Event { .. } => self.metrics.received(metrics::MQTT, "event"),
            Route::Property { .. } => self.metrics.received(metrics::MQTT, "propertyReading"),
            Route::Request { message_type, .. } => {
                self.metrics.received(metrics::MQTT, message_type)
            }
            Route::AgentReplies { .. } => {
                let payload = std::str::from_utf8(&delivery.payload).unwrap_or_default();
                let message_type = peek_member(payload, "messageType").unwrap_or_default();
                self.metrics.received(metrics::MQTT, message_type);
            }
            _ => {}
        }
        match route {
            Route::Event { thing, event } => {
                let recipients = self.table.event_recipients(&thing, &event);
                let keep = self.history.holds(&thing);
                // Events nobody wants (now or to resume) are not worth parsing.
                if !recipients.is_empty() || keep {
                    let expected = Expected::Event {
                        thing: &thing,
                        event: &event,
                    };
                    if let Some(prepared) =
                        self.checked(topic, &delivery.payload, expected, delivery.trace)
                    {
                        if keep {
                            let now = Instant::now();
                            let wall = history::wall_micros();
                            self.history
                                .record(&thing, &event, prepared.clone(), now, wall);
                        }
                        if !recipients.is_empty() {
                            self.fan_out(topic, &thing, &event, &prepared, recipients)
                        }
                    }
                }
            }
            Route::Property { thing, name } => {
                self.deliver_property(topic, &thing, &name, &delivery.payload, delivery.trace)
            }
            Route::Request {
                thing,
                message_type,
            } => {
                for (message_type, delivery) in self.kotlin_requests(&thing, message_type, delivery)
                {
                    self.mqtt_request(&thing, &message_type, delivery);
                }
            }
            Route::AgentReplies { thing } => {
                let messages = parse_agent_replies(&delivery.payload);
                if messages.is_empty() {
                    debug!("Dropped an unreadable agent reply.");
                }
                for mut message in messages {
                    if !self.requests.answers(&thing, &message) {
                        debug!("Dropped an agent reply that answers no pending request.");
                        continue;
                    }
                    if message.traceparent.is_none() {
                        // MQTT 5 agents may carry the context in user properties only.
                        if let Some(t) = &delivery.trace {
                            message.traceparent = Some(t.traceparent.clone());
                            message.tracestate = t.tracestate.clone();
                        }
                    }
                    self.agent_reply(&thing, &message);
                }
            }
            Route::AgentStatus { thing } => {
                let effects = self.requests.mqtt_presence(&thing, &delivery.payload);
                self.carry_out(effects);
            }
            Route::AgentRequest { thing, .. } => self.remote_request(&thing, delivery),
            Route::Td { thing } => self.directory.learn(&thing, &delivery.payload),
            Route::ActionStatus { .. } | Route::Reply { .. } => {}
        }
    }

    fn deliver_property(
        &mut self,
        topic: &str,
        thing: &str,
        name: &str,
        payload: &[u8],
        trace: Option<TraceContext>,
    ) {
        if payload.is_empty() {
            // An empty retained message clears the property.
            if let Some(m) = self.latest.get_mut(thing) {
                m.remove(name);
            }
            return;
        }
        let expected = Expected::Reading { thing, name };
        let Some(prepared) = self.checked(topic, payload, expected, trace) else {
            return;
        };
        // Cached even without an observer of this property yet, but only
        // while the gateway follows the Thing's properties: a reading still
        // in flight after the last observer left must not stay behind.
        if self.table.follows(thing, Stream::Properties) {
            self.latest
                .entry(thing.to_owned())
                .or_default()
                .insert(name.to_owned(), prepared.clone());
        }
        let recipients = self.table.property_recipients(thing, name);
        self.fan_out(topic, thing, name, &prepared, recipients);
    }

    /// A publication for consumers, checked once; what fails is counted,
    /// logged once per topic, and reaches no one.
    fn checked(
        &mut self,
        topic: &str,
        payload: &[u8],
        expected: Expected<'_>,
        trace: Option<TraceContext>,
    ) -> Option<Arc<Prepared>> {
        // The directory is locked only when the data is to be checked
        // against a TD: this runs for every event with a recipient.
        let result = if self.validate_agent_data {
            let directory = self.directory.directory();
            published::check(payload, expected, trace, directory.get(expected.thing()))
        } else {
            published::check(payload, expected, trace, None)
        };
        match result {
            Ok(prepared) => Some(prepared),
            Err(refused) => {
                self.metrics.dropped("invalid_payload");
                if self.refusals_logged.first(topic) {
                    warn!(topic, reason = %refused, kind = "invalid-payload", "Dropped a message published for consumers; further ones on this topic are only counted (lmos_sidecar_dropped_messages_total, reason invalid_payload).");
                }
                None
            }
        }
    }

    /// One copy per recipient. Traced: one CONSUMER span for the fan-out
    /// (`lmos.recipients` says to how many), a child of the message's
    /// publisher (or, for an untraced message, of a PRODUCER span standing
    /// in for it), and every copy carries it. A span per recipient made ten
    /// thousand spans of one event for ten thousand consumers, and cost a
    /// quarter of the fan-out's throughput.
    fn fan_out(
        &mut self,
        topic: &str,
        thing: &str,
        affordance: &str,
        prepared: &Prepared,
        recipients: Vec<(ConnId, Arc<str>)>,
    ) {
        let message_type = prepared.message_type.as_deref().unwrap_or_default();
        self.metrics
            .sent_many(metrics::WEBSOCKET, message_type, recipients.len() as u64);
        if !self.tracer.is_on() {
            for (conn, correlation) in recipients {
                self.send(conn, prepared.with_correlation(&correlation));
            }
            return;
        }
        let info = MessageInfo {
            message_type: prepared.message_type.as_deref(),
            thing_id: Some(thing),
            affordance: Some(affordance),
            message_id: prepared.message_id.as_deref(),
            correlation_id: None,
            recipients: None,
        };
        let incoming = prepared.traceparent.as_ref().map(|tp| TraceContext {
            traceparent: tp.clone(),
            tracestate: prepared.tracestate.clone(),
        });
        let parent = match (&incoming, self.tracer.parent(incoming.as_ref())) {
            // An untraced message: a producer span stands in for its publisher.
            (None, Some(root)) => self
                .tracer
                .hop_from(&root, Operation::Publish, topic, &info, None)
                .and_then(|stand_in| root.child(&stand_in)),
            (_, parent) => parent,
        };
        let fan_out = MessageInfo {
            recipients: Some(recipients.len()),
            ..info
        };
        let ctx = parent.as_ref().and_then(|p| {
            self.tracer
                .hop_from(p, Operation::Process, topic, &fan_out, None)
        });
        let traceparent = ctx.as_ref().map(|c| c.traceparent.as_str());
        for (conn, correlation) in recipients {
            let text = prepared.with(&correlation, traceparent);
            self.send(conn, text);
        }
    }

    /// A request an MQTT consumer published in the Kotlin dialect, as the
    /// canonical request(s) it stands for, each with the topic's message
    /// type renamed alike (`.../requests/readMultipleProperties` becomes one
    /// `readProperty` per property). Anything else as it came.
    fn kotlin_requests(
        &self,
        thing: &str,
        message_type: String,
        delivery: Delivery,
    ) -> Vec<(String, Delivery)> {
        let kotlin = serde_json::from_slice::<Value>(&delivery.payload)
            .ok()
            .and_then(|v| match v {
                Value::Object(map) if dialect::detect(&map) == Some(Dialect::Kotlin) => Some(map),
                _ => None,
            });
        let Some(map) = kotlin else {
            return vec![(message_type, delivery)];
        };
        let original = map
            .get("messageType")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let normalized = dialect::normalize(map, |t| {
            dialect::readable_properties(self.directory.directory().get(t)?)
        });
        let Ok(normalized) = normalized else {
            // Refused as an unknown type by the usual reader, with its reply.
            return vec![(message_type, delivery)];
        };
        normalized
            .messages
            .into_iter()
            .map(|m| {
                let canonical_type = m
                    .get("messageType")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let topic_type = if message_type == original {
                    canonical_type
                } else {
                    message_type.clone()
                };
                let mut copy = delivery.clone();
                copy.payload = crate::lmos::splice::text(&Value::Object(m)).into();
                debug!(thing, "Read an MQTT request in the Kotlin dialect.");
                (topic_type, copy)
            })
            .collect()
    }

    /// A request published by an MQTT consumer on
    /// `{prefix}/{thing}/requests/{messageType}`. Replies go to its MQTT 5
    /// Response Topic, else to the topic in its `replyTo` member, else to
    /// `{prefix}/{thing}/replies/{correlationID}`.
    fn mqtt_request(&mut self, thing: &str, message_type: &str, delivery: Delivery) {
        let raw: Option<Value> = serde_json::from_slice(&delivery.payload).ok();
        let reply_to = raw
            .as_ref()
            .and_then(|v| v["replyTo"].as_str())
            .map(str::to_owned);
        let consumer = |correlation: Option<&str>| match (&delivery.response, &reply_to) {
            (
                Some(ResponseInfo {
                    topic,
                    correlation_data,
                }),
                _,
            ) => Some(Consumer::Mqtt {
                topic: topic.clone(),
                correlation_data: correlation_data.clone(),
                principal: delivery.publisher.clone(),
            }),
            (None, Some(topic)) => Some(Consumer::Mqtt {
                topic: topic.clone(),
                correlation_data: None,
                principal: delivery.publisher.clone(),
            }),
            (None, None) => correlation.map(|c| Consumer::Mqtt {
                topic: self.topics.reply(thing, c),
                correlation_data: None,
                principal: delivery.publisher.clone(),
            }),
        };
        let message = match Message::parse(&delivery.payload) {
            Ok(m) => m,
            Err(rejection) => {
                let Some(consumer) = consumer(rejection.reply_correlation_id()) else {
                    warn!(
                        kind = "invalid-request",
                        "Dropped an MQTT request that names no one to answer."
                    );
                    return;
                };
                let problem = Problem::from(&rejection);
                let text = problem
                    .to_message(
                        rejection.thing_id.as_deref().unwrap_or(thing),
                        rejection.reply_correlation_id(),
                    )
                    .to_json();
                self.carry_out(vec![Effect::ToConsumer(consumer, text)]);
                return;
            }
        };
        let consumer =
            consumer(Some(message.reply_correlation_id())).expect("a correlation is given");
        // The sidecar publishes replies with its own rights; a reply topic
        // inside a Thing's subtree would let any consumer publish there
        // (fake events, fake agent replies) past the MQTT guard.
        if let Consumer::Mqtt { topic, .. } = &consumer {
            let inside = topic
                .strip_prefix(self.topics.prefix())
                .is_some_and(|rest| rest.starts_with('/'));
            let reply_route = matches!(
                self.topics.parse(topic),
                Some(Route::Reply { thing: of, .. }) if of == thing
            );
            if inside && !reply_route {
                let detail = format!(
                    "The reply topic `{topic}` lies inside the LMOS topics; use a topic of your own, or none to get replies on `{}`.",
                    self.topics.reply(thing, message.reply_correlation_id())
                );
                let problem = Problem::new(crate::lmos::ProblemKind::InvalidMember, detail);
                let fallback = Consumer::Mqtt {
                    topic: self.topics.reply(thing, message.reply_correlation_id()),
                    correlation_data: None,
                    principal: None,
                };
                self.refuse(fallback, &message, problem);
                return;
            }
        }
        if message.thing_id != thing || message.message_type().as_str() != message_type {
            let detail = format!(
                "The request was published on the topic for `{message_type}` of `{thing}` but is a `{}` for `{}`.",
                message.message_type(),
                message.thing_id
            );
            let problem = Problem::new(crate::lmos::ProblemKind::InvalidMember, detail);
            let text = problem
                .to_message(&message.thing_id, Some(message.reply_correlation_id()))
                .to_json();
            self.carry_out(vec![Effect::ToConsumer(consumer, text)]);
            return;
        }
        let mut message = message;
        if message.traceparent.is_none() {
            if let Some(t) = delivery.trace {
                message.traceparent = Some(t.traceparent);
                message.tracestate = t.tracestate;
            }
        }
        if let Some(problem) = self.against_td(&message) {
            self.refuse(consumer, &message, problem);
            return;
        }
        self.trace_request(&mut message);
        let liveness = self.td_liveness(&message);
        let effects = self.requests.request(consumer, message, liveness);
        self.carry_out(effects);
    }

    /// A request another sidecar routed to a Thing whose agent is connected
    /// here over WebSocket (requests for MQTT agents are theirs to take).
    /// The routing sidecar checked it and keeps its timers; this one hands
    /// it on and remembers where the answers go.
    fn remote_request(&mut self, thing: &str, delivery: Delivery) {
        let Ok(mut message) = Message::parse(&delivery.payload) else {
            debug!("Dropped an unreadable request routed by another sidecar.");
            return;
        };
        if message.thing_id != thing {
            debug!("Dropped a request routed by another sidecar to the wrong Thing.");
            return;
        }
        let Some(agent) = self.requests.remote_request(thing, &message) else {
            return;
        };
        self.metrics
            .received(metrics::MQTT, message.message_type().as_str());
        if message.traceparent.is_none() {
            if let Some(t) = delivery.trace {
                message.traceparent = Some(t.traceparent);
                message.tracestate = t.tracestate;
            }
        }
        if self.tracer.is_on() {
            let destination = self
                .topics
                .agent_request(thing, message.message_type().as_str());
            let incoming = incoming_trace(&message);
            if let Some(ctx) = self.tracer.hop(
                Operation::Process,
                &destination,
                incoming.as_ref(),
                &message_info(&message),
                None,
            ) {
                message.traceparent = Some(ctx.traceparent);
            }
        }
        let text = message.to_json();
        self.count_sent(metrics::WEBSOCKET, &text);
        self.send(agent, text);
    }

    /// What the Thing's registered TD has against a request; nothing when
    /// the Thing has no TD.
    fn against_td(&self, message: &Message) -> Option<Problem> {
        let directory = self.directory.directory();
        let td = directory.get(&message.thing_id)?;
        affordances::check_request(td, message).err()
    }

    /// A new subscription beyond `gateway.max_subscriptions` is refused;
    /// renewing one the connection holds is not.
    fn subscription_limit(
        &self,
        conn: ConnId,
        thing: &str,
        selector: &Selector,
    ) -> Option<Problem> {
        let max = self.limits.max_subscriptions;
        if self.table.subscription_count(conn) < max || self.table.holds(conn, thing, selector) {
            return None;
        }
        self.metrics
            .limit_hit(metrics::WEBSOCKET, "max_subscriptions");
        let detail = format!("This connection already holds {max} subscriptions (gateway.max_subscriptions); unsubscribe from some first.");
        Some(Problem::new(
            crate::lmos::ProblemKind::TooManyRequests,
            detail,
        ))
    }

    fn refuse(&mut self, consumer: Consumer, message: &Message, problem: Problem) {
        let text = problem
            .to_message(&message.thing_id, Some(message.reply_correlation_id()))
            .to_json();
        self.carry_out(vec![Effect::ToConsumer(consumer, text)]);
    }

    /// Records a request on its way to the agent; the forwarded request
    /// carries the new span's context.
    fn trace_request(&self, message: &mut Message) {
        if !self.tracer.is_on() {
            return;
        }
        let destination = self
            .topics
            .agent_request(&message.thing_id, message.message_type().as_str());
        let needs_agent = !matches!(message.body, Body::QueryAction { .. });
        let error = (needs_agent && !self.requests.has_host(&message.thing_id))
            .then_some("No agent hosts the Thing.");
        let incoming = incoming_trace(message);
        if let Some(ctx) = self.tracer.hop(
            Operation::Publish,
            &destination,
            incoming.as_ref(),
            &message_info(message),
            error,
        ) {
            message.traceparent = Some(ctx.traceparent);
        }
    }

    /// An agent's answer: recorded as processed, then routed to its consumer.
    fn agent_reply(&mut self, thing: &str, message: &Message) {
        let destination = self.topics.agent_replies(thing);
        let error = match &message.body {
            Body::Error(e) => Some(e.title.as_str()),
            Body::ActionStatus { status, .. } if status == "failed" => Some("The action failed."),
            _ => None,
        };
        let incoming = incoming_trace(message);
        let ctx = self.tracer.hop(
            Operation::Process,
            &destination,
            incoming.as_ref(),
            &message_info(message),
            error,
        );
        if let Some(effects) =
            self.requests
                .reply(thing, message, ctx.as_ref().map(|c| c.traceparent.as_str()))
        {
            self.carry_out(effects);
        }
    }

    fn send(&mut self, conn: ConnId, text: String) {
        let Some(outbound) = self.outbounds.get(&conn) else {
            return;
        };
        match outbound.offer(Utf8Bytes::from(text)) {
            Offer::Queued => {}
            Offer::Dropped => self.metrics.dropped("slow_consumer"),
            // The connection closes itself and deregisters; stop offering now.
            Offer::Disconnected => {
                self.metrics.dropped("slow_consumer_disconnected");
                self.outbounds.remove(&conn);
            }
            Offer::Closed => {
                self.outbounds.remove(&conn);
            }
        }
    }
}

/// Sleeps until `at`; never polled when there is none.
fn sleep_until(at: Option<Instant>) -> tokio::time::Sleep {
    let at = at.map_or_else(tokio::time::Instant::now, tokio::time::Instant::from_std);
    tokio::time::sleep_until(at)
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
