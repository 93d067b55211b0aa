//! Request routing: consumers' requests to the agent hosting the Thing, the
//! agent's replies back to exactly the consumer that asked.
//!
//! Every forwarded request gets a fresh UUID as its `correlationID` (its
//! *route*); agents answer with it, as the draft asks of any reply, and the
//! router restores the consumer's own correlation ID. So two consumers using
//! the same correlation ID, or none, never see each other's replies.
//!
//! No I/O here: each call returns the [`Effect`]s the dispatcher carries out.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};
use tokio_util::time::delay_queue::{self, DelayQueue};
use uuid::Uuid;

mod input;

use super::foreign::ForeignRoutes;
use super::subscriptions::ConnId;
use crate::broker::Publication;
use crate::directory::forms::status_href;
use crate::lmos::splice::{json_string, peek_member, Prepared};
use crate::lmos::{Body, Message, MessageType, Problem, ProblemKind};
use crate::telemetry::metrics::{self, Metrics};
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
    /// A request for an agent connected over WebSocket.
    ToAgent(ConnId, String),
    Publish(Publication),
    /// The gateway's bus subscription changes: it takes the requests other
    /// sidecars route to a Thing hosted here, while it is.
    Subscribe(String),
    Unsubscribe(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ReadProperty,
    WriteProperty,
    Invocation,
}

struct Pending {
    consumer: Consumer,
    /// What the consumer's copies carry as `correlationID`.
    correlation: String,
    thing: String,
    kind: Kind,
    /// For invocations: the action, the latest status (as the consumer got
    /// it) and who waits for the answer to a `cancelAction`.
    action: Option<String>,
    /// Kept as the text the consumer got: parsed only when asked for (a
    /// query, a late cancel), not for every status of a stream.
    latest: Option<String>,
    finished: bool,
    /// In the queue of remembered requests: finished, or an invocation
    /// whose agent went silent past its liveness (still listened to).
    remembered: bool,
    /// Who asked to cancel, and under which correlation ID.
    cancel_waiters: Vec<(Consumer, String)>,
    /// For invocations: the principal that owns it (WebSocket and HTTP
    /// consumers), so any of its connections can name it.
    owner: Option<String>,
    /// Other consumers of the owner following the invocation's statuses:
    /// those that queried it while it ran (a consumer back after a
    /// reconnect, say).
    watchers: Vec<Consumer>,
    /// Cancel at the agent when the invoking connection closes (asked for
    /// with `"cancelOnDisconnect": true` in the invokeAction).
    cancel_on_disconnect: bool,
    /// How long the agent may stay silent (invocations).
    liveness: Duration,
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
        std::iter::once(&self.consumer)
            .chain(&self.watchers)
            .map(|c| Effect::ToConsumer(c.clone(), text.to_owned()))
            .collect()
    }

    fn follows(&self, consumer: &Consumer) -> bool {
        self.consumer == *consumer || self.watchers.contains(consumer)
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
    finished_limit: usize,
    /// Liveness per `{thing}` or `{thing}#{action}`.
    liveness_overrides: HashMap<String, Duration>,
    /// How long a remembered invocation is kept.
    retention: Duration,
    /// Invocations running at once, at most.
    max_running: usize,
    /// The principal of each WebSocket / HTTP consumer connection.
    owners: HashMap<ConnId, String>,
    hosts: HashMap<String, Host>,
    routes: HashMap<String, Pending>,
    /// (consumer key or owner key, correlation) → route, for naming
    /// invocations.
    invocations: HashMap<(String, String), String>,
    /// (consumer key or owner key, action) → route of its latest invocation.
    latest_invocation: HashMap<(String, String), String>,
    finished: VecDeque<String>,
    timers: DelayQueue<Timer>,
    timer_keys: HashMap<Timer, delay_queue::Key>,
    /// Requests other sidecars routed to agents connected here.
    foreign: ForeignRoutes,
    metrics: Metrics,
    /// Input streams: the order of each invocation's `actionInput` chunks.
    inputs: HashMap<String, crate::lmos::stream::Sequencer>,
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

pub(crate) fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled" | "canceled")
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
            hosts: HashMap::new(),
            routes: HashMap::new(),
            invocations: HashMap::new(),
            latest_invocation: HashMap::new(),
            finished: VecDeque::new(),
            timers: DelayQueue::new(),
            timer_keys: HashMap::new(),
            foreign: ForeignRoutes::default(),
            metrics: Metrics::default(),
            inputs: HashMap::new(),
        }
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
        self.owners.insert(conn, principal.to_owned());
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
            .filter(|p| p.kind == Kind::Invocation && !p.remembered)
            .count()
    }

    // ----- hosts -----

    /// A WebSocket agent declares the Things it hosts; all or none.
    pub fn claim(&mut self, conn: ConnId, things: &[String]) -> Result<Vec<Effect>, ClaimError> {
        if let Some(t) = things.iter().find(|t| self.hosts.contains_key(*t)) {
            return Err(ClaimError::AlreadyHosted(t.clone()));
        }
        let mut effects = Vec::new();
        for t in things {
            self.hosts.insert(t.clone(), Host::WebSocket(conn));
            // Subscribed before the presence goes out, so no router that
            // learns of the agent from it routes a request into the void.
            effects.push(Effect::Subscribe(self.topics.agent_requests_filter(t)));
            effects.push(self.presence(t, true));
        }
        Ok(effects)
    }

    fn presence(&self, thing: &str, online: bool) -> Effect {
        let payload = json!({
            "thingID": thing,
            "status": if online { "online" } else { "offline" },
            "transport": "websocket",
        });
        Effect::Publish(Publication::new(
            self.topics.agent_status(thing),
            payload.to_string(),
            true,
        ))
    }

    /// An MQTT agent's presence message (retained, with a last will).
    pub fn mqtt_presence(&mut self, thing: &str, payload: &[u8]) -> Vec<Effect> {
        if matches!(self.hosts.get(thing), Some(Host::WebSocket(_))) {
            // The sidecar's own announcement for a WebSocket agent, or an
            // MQTT agent competing with it: the connected one keeps the Thing.
            return Vec::new();
        }
        let online = serde_json::from_slice::<Value>(payload)
            .ok()
            .is_some_and(|v| v["status"] == "online");
        if online {
            self.hosts.insert(thing.to_owned(), Host::Mqtt);
            Vec::new()
        } else if self.hosts.remove(thing).is_some() {
            self.host_gone(thing)
        } else {
            Vec::new()
        }
    }

    pub fn is_hosted_by(&self, thing: &str, conn: ConnId) -> bool {
        self.hosts.get(thing) == Some(&Host::WebSocket(conn))
    }

    /// Everything waiting on the Thing's agent fails: requests with 503,
    /// running invocations with a `failed` actionStatus.
    fn host_gone(&mut self, thing: &str) -> Vec<Effect> {
        let routes: Vec<String> = self
            .routes
            .iter()
            .filter(|(_, p)| p.thing == thing && !p.finished)
            .map(|(r, _)| r.clone())
            .collect();
        let mut effects = Vec::new();
        for route in routes {
            self.disarm(&Timer::Reply(route.clone()));
            self.disarm(&Timer::Cancel(route.clone()));
            let p = self.routes.get_mut(&route).expect("listed above");
            let detail = format!("The agent hosting `{thing}` disconnected before it finished.");
            match p.kind {
                Kind::Invocation => {
                    let action = p.action.clone().unwrap_or_default();
                    let status = p
                        .speak(Message::new(
                            thing,
                            Body::ActionStatus {
                                action,
                                status: "failed".into(),
                                output: Some(json!({ "error": detail })),
                            },
                        ))
                        .with_correlation_id(p.correlation.clone())
                        .to_value();
                    let waiters = std::mem::take(&mut p.cancel_waiters);
                    p.latest = Some(status.to_string());
                    effects.extend(p.to_all(&status.to_string()));
                    effects.extend(self.answer_cancels(&status, waiters, &route, false));
                    self.finish(&route);
                }
                Kind::ReadProperty | Kind::WriteProperty => {
                    let problem = Problem::new(ProblemKind::Unavailable, detail);
                    let consumer = p.consumer.clone();
                    let message = p
                        .speak(problem.to_message(thing, Some(&p.correlation)))
                        .to_json();
                    effects.push(Effect::ToConsumer(consumer, message));
                    self.forget(&route);
                }
            }
        }
        effects
    }

    // ----- requests -----

    /// A consumer's request. Returns what to send where. `td_liveness`: the
    /// invoked action's liveness when its TD gives one
    /// (`requests.action_liveness_overrides` win over it).
    pub fn request(
        &mut self,
        consumer: Consumer,
        message: Message,
        td_liveness: Option<Duration>,
    ) -> Vec<Effect> {
        let correlation = message.reply_correlation_id().to_owned();
        let thing = message.thing_id.clone();
        let error = |kind, detail: String| {
            let m = Problem::new(kind, detail).to_message(&thing, Some(&correlation));
            vec![Effect::ToConsumer(consumer.clone(), m.to_json())]
        };
        let kind = match &message.body {
            Body::ReadProperty { .. } => Kind::ReadProperty,
            Body::WriteProperty { .. } | Body::WriteMultipleProperties { .. } => {
                Kind::WriteProperty
            }
            Body::InvokeAction { .. } => Kind::Invocation,
            Body::QueryAction { action } => return self.query(consumer, &message, action.clone()),
            Body::CancelAction { action, .. } => {
                let action = action.clone();
                return self.cancel(consumer, message, action);
            }
            Body::ActionInput { action } => {
                let action = action.clone();
                return self.input(consumer, message, action);
            }
            _ => {
                return error(
                    ProblemKind::NotSupported,
                    format!("`{}` is not a request.", message.message_type()),
                )
            }
        };
        let Some(host) = self.hosts.get(&thing).copied() else {
            return error(
                ProblemKind::Unavailable,
                format!("No agent hosting the Thing `{thing}` is connected to this sidecar."),
            );
        };
        if kind == Kind::Invocation && self.running_count() >= self.max_running {
            self.metrics.limit_hit("any", "max_running_invocations");
            return error(
                ProblemKind::TooManyRequests,
                format!("{} invocations are running on this sidecar (requests.max_running_invocations); invoke again when some have ended.", self.max_running),
            );
        }
        let route = Uuid::new_v4().to_string();
        let action = match &message.body {
            Body::InvokeAction { action, .. } => Some(action.clone()),
            _ => None,
        };
        let cancel_on_disconnect =
            message.extra.get("cancelOnDisconnect") == Some(&Value::Bool(true));
        let owner = self.owner_key(&consumer);
        let message_type = message.message_type();
        let forwarded_traceparent = message.traceparent.clone();
        let forwarded = message.with_correlation_id(route.clone());
        let text = forwarded.to_json();
        if let Some(action) = &action {
            for key in std::iter::once(consumer.key()).chain(owner.clone()) {
                self.invocations
                    .insert((key.clone(), correlation.clone()), route.clone());
                self.latest_invocation
                    .insert((key, action.clone()), route.clone());
            }
        }
        let wait = match (kind, &action) {
            (Kind::Invocation, Some(action)) => self
                .liveness_overrides
                .get(&format!("{thing}#{action}"))
                .or_else(|| self.liveness_overrides.get(&thing))
                .copied()
                .or(td_liveness)
                .unwrap_or(self.liveness),
            _ => self.timeout,
        };
        let now = Instant::now();
        self.routes.insert(
            route.clone(),
            Pending {
                consumer,
                correlation,
                thing: thing.clone(),
                kind,
                action,
                latest: None,
                finished: false,
                remembered: false,
                cancel_waiters: Vec::new(),
                owner,
                watchers: Vec::new(),
                cancel_on_disconnect,
                liveness: wait,
                traceparent: forwarded_traceparent,
                started: Some((now, message_type)),
                since: now,
            },
        );
        self.arm(Timer::Reply(route), wait);
        vec![self.to_host(host, &thing, message_type.as_str(), text)]
    }

    fn to_host(&self, host: Host, thing: &str, message_type: &str, text: String) -> Effect {
        match host {
            Host::WebSocket(conn) => Effect::ToAgent(conn, text),
            Host::Mqtt => Effect::Publish(Publication::new(
                self.topics.agent_request(thing, message_type),
                text,
                false,
            )),
        }
    }

    /// The invocation a `queryAction` / `cancelAction` names: by its
    /// `correlationID` (= the invokeAction's), else the consumer's latest
    /// invocation of that action.
    fn find_invocation(
        &self,
        consumer: &Consumer,
        message: &Message,
        action: &str,
    ) -> Option<String> {
        // The consumer's own first (correlation IDs need only be unique per
        // consumer), then its principal's.
        let keys = std::iter::once(consumer.key()).chain(self.owner_key(consumer));
        keys.filter_map(|key| match &message.correlation_id {
            Some(c) => self.invocations.get(&(key, c.clone())),
            None => self.latest_invocation.get(&(key, action.to_owned())),
        })
        .find(|route| {
            self.routes
                .get(*route)
                .is_some_and(|p| p.action.as_deref() == Some(action))
        })
        .cloned()
    }

    fn no_invocation(&self, consumer: Consumer, message: &Message, action: &str) -> Vec<Effect> {
        let detail = match &message.correlation_id {
            Some(c) => format!("No invocation of `{action}` with correlationID `{c}` is known for this consumer or its principal (finished ones are kept for requests.invocation_retention_ms, at most requests.finished_invocations); name an invocation by the correlationID (or, without one, the messageID) of its invokeAction."),
            None => format!("This consumer has not invoked `{action}` (or it was forgotten)."),
        };
        let m = Problem::new(ProblemKind::NotFound, detail)
            .to_message(&message.thing_id, Some(message.reply_correlation_id()));
        vec![Effect::ToConsumer(consumer, m.to_json())]
    }

    /// Answered by the sidecar, which saw every status of the invocation.
    fn query(&mut self, consumer: Consumer, message: &Message, action: String) -> Vec<Effect> {
        let found = self.find_invocation(&consumer, message, &action);
        let Some(p) = found.and_then(|route| self.routes.get_mut(&route)) else {
            return self.no_invocation(consumer, message, &action);
        };
        if !p.finished && !p.follows(&consumer) {
            // Another connection of the owner (a consumer back after a
            // reconnect): it follows the rest of the invocation too.
            p.watchers.push(consumer.clone());
        }
        let latest = p
            .latest
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok());
        let mut status = latest.unwrap_or_else(|| {
            // Forwarded, no status from the agent yet.
            Message::new(
                p.thing.clone(),
                Body::ActionStatus {
                    action: action.clone(),
                    status: "pending".into(),
                    output: None,
                },
            )
            .to_value()
        });
        status["correlationID"] = message.reply_correlation_id().into();
        status["messageID"] = Uuid::new_v4().to_string().into();
        if let Some(tp) = &message.traceparent {
            status["traceparent"] = tp.as_str().into();
        }
        vec![Effect::ToConsumer(consumer, status.to_string())]
    }

    fn cancel(&mut self, consumer: Consumer, message: Message, action: String) -> Vec<Effect> {
        let found = self.find_invocation(&consumer, &message, &action);
        let Some((route, p)) = found.and_then(|r| self.routes.get_mut(&r).map(|p| (r, p))) else {
            return self.no_invocation(consumer, &message, &action);
        };
        let reply_correlation = message.reply_correlation_id().to_owned();
        if p.finished {
            // Too late to cancel: the answer is how it ended.
            let latest = p
                .latest
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok());
            let mut status = latest.unwrap_or(Value::Null);
            status["correlationID"] = reply_correlation.into();
            status["messageID"] = Uuid::new_v4().to_string().into();
            return vec![Effect::ToConsumer(consumer, status.to_string())];
        }
        p.cancel_waiters.push((consumer, reply_correlation));
        let thing = p.thing.clone();
        let Some(host) = self.hosts.get(&thing).copied() else {
            return self.host_gone(&thing);
        };
        let forwarded = message.with_correlation_id(route.clone()).to_json();
        self.arm(Timer::Cancel(route), self.timeout);
        vec![self.to_host(host, &thing, "cancelAction", forwarded)]
    }

    // ----- requests routed by other sidecars -----

    /// A request another sidecar's router published for a Thing; the
    /// WebSocket agent to hand it to when that agent is connected here.
    /// Requests this sidecar routed itself went to the agent directly.
    pub fn remote_request(&mut self, thing: &str, message: &Message) -> Option<ConnId> {
        let Some(Host::WebSocket(agent)) = self.hosts.get(thing).copied() else {
            return None;
        };
        let own = message
            .correlation_id
            .as_ref()
            .is_some_and(|route| self.routes.contains_key(route));
        (!own && self.foreign.admit(thing, agent, message)).then_some(agent)
    }

    /// Whether an agent's message answers a request another sidecar routed
    /// to it (see [`Requests::remote_request`]); it then belongs on the
    /// Thing's agent replies topic, for that sidecar.
    pub fn answers_remote(&mut self, thing: &str, agent: ConnId, message: &Message) -> bool {
        self.foreign.answer(thing, agent, message)
    }

    pub fn remote_count(&self) -> usize {
        self.foreign.len()
    }

    // ----- replies -----

    /// Whether a message from the agent hosting `thing` answers a request
    /// this sidecar routed and still waits on (not a late answer, not a
    /// message of its own).
    pub fn answers(&self, thing: &str, message: &Message) -> bool {
        message
            .correlation_id
            .as_ref()
            .and_then(|route| self.routes.get(route))
            .is_some_and(|p| p.thing == thing && !p.finished)
    }

    /// The consumer's copy of an agent's answer (see [`Requests::answers`]);
    /// `trace` is the `traceparent` it carries on, when traced. `None` when
    /// it answers nothing.
    pub fn reply(
        &mut self,
        thing: &str,
        message: &Message,
        trace: Option<&str>,
    ) -> Option<Vec<Effect>> {
        if !self.answers(thing, message) {
            return None;
        }
        let route = message.correlation_id.clone()?;
        let p = self.routes.get_mut(&route)?;
        if let Some((started, message_type)) = p.started.take() {
            self.metrics
                .request_done(message_type.as_str(), started.elapsed());
        }
        // The parsed message keeps every member it arrived with.
        let Value::Object(mut prepared_map) = message.to_value() else {
            return None;
        };
        if let (Body::ActionStatus { action, .. }, Kind::Invocation) = (&message.body, p.kind) {
            // Where the invocation can be asked after, as the WoT profiles'
            // status objects say.
            prepared_map
                .entry("href")
                .or_insert_with(|| status_href(thing, action, &p.correlation).into());
        }
        let copy =
            Prepared::from_map(&mut prepared_map, thing).with(&json_string(&p.correlation), trace);
        let mut effects = p.to_all(&copy);
        match (&message.body, p.kind) {
            (Body::ActionStatus { action, status, .. }, Kind::Invocation) => {
                // A sign of life: the agent has as long again (unless the
                // consumer was already told it went silent).
                if !p.remembered {
                    let liveness = p.liveness;
                    self.arm(Timer::Reply(route.clone()), liveness);
                }
                let p = self.routes.get_mut(&route)?;
                p.latest = Some(copy.clone());
                let invocation_topic = self.topics.action_status(thing, action, &p.correlation);
                if is_terminal(status) {
                    let waiters = std::mem::take(&mut p.cancel_waiters);
                    if !waiters.is_empty() {
                        let value: Value = serde_json::from_str(&copy).ok()?;
                        effects.extend(self.answer_cancels(&value, waiters, &route, false));
                    }
                    self.finish(&route);
                }
                effects.push(Effect::Publish(Publication::new(
                    invocation_topic,
                    copy,
                    false,
                )));
            }
            (Body::Error(_), Kind::Invocation) => {
                let p = self.routes.get_mut(&route)?;
                if p.cancel_waiters.is_empty() {
                    // The agent refuses the invocation: it ends here.
                    p.latest = Some(copy);
                    self.finish(&route);
                } else {
                    let value: Value = serde_json::from_str(&copy).ok()?;
                    // The agent refuses the cancel (the draft's "could not
                    // be cancelled"): the invocation goes on, and whoever
                    // asked to cancel hears why.
                    let waiters = std::mem::take(&mut p.cancel_waiters);
                    effects.clear();
                    effects.extend(self.answer_cancels(&value, waiters, &route, true));
                }
            }
            (Body::PropertyReadings { data, timestamp }, _) => {
                // Observers see what was written.
                for (name, value) in data {
                    let reading = Message::new(
                        thing,
                        Body::PropertyReading {
                            name: name.clone(),
                            value: value.clone(),
                            timestamp: timestamp.clone(),
                        },
                    );
                    effects.push(Effect::Publish(Publication::new(
                        self.topics.property(thing, name),
                        reading.to_json(),
                        true,
                    )));
                }
                self.forget(&route);
            }
            (Body::PropertyReading { name, .. }, Kind::WriteProperty) => {
                let mut reading = message.clone();
                reading.correlation_id = None;
                effects.push(Effect::Publish(Publication::new(
                    self.topics.property(thing, name),
                    reading.to_json(),
                    true,
                )));
                self.forget(&route);
            }
            _ => self.forget(&route),
        }
        Some(effects)
    }

    /// A `cancelAction` is answered by the invocation's final status, or by
    /// the agent's refusal. Each waiter gets its copy under its cancel's
    /// correlation ID, unless it follows the invocation and named it by the
    /// invocation's own (then the status it gets anyway answers it); `all`:
    /// every waiter does, as a refusal is no status of the invocation.
    fn answer_cancels(
        &mut self,
        status: &Value,
        waiters: Vec<(Consumer, String)>,
        route: &str,
        all: bool,
    ) -> Vec<Effect> {
        self.disarm(&Timer::Cancel(route.to_owned()));
        let Some(p) = self.routes.get(route) else {
            return Vec::new();
        };
        waiters
            .into_iter()
            .filter(|(c, w)| all || *w != p.correlation || !p.follows(c))
            .map(|(c, w)| {
                let mut copy = status.clone();
                copy["correlationID"] = w.into();
                Effect::ToConsumer(c, copy.to_string())
            })
            .collect()
    }

    // ----- time and cleanup -----

    fn arm(&mut self, timer: Timer, after: Duration) {
        self.disarm(&timer);
        let key = self.timers.insert(timer.clone(), after);
        self.timer_keys.insert(timer, key);
    }

    fn disarm(&mut self, timer: &Timer) {
        if let Some(key) = self.timer_keys.remove(timer) {
            self.timers.remove(&key);
        }
    }

    /// Waits for the next request to time out.
    pub async fn next_timeout(&mut self) -> Option<Vec<Effect>> {
        let expired = std::future::poll_fn(|cx| self.timers.poll_expired(cx)).await?;
        let timer = expired.into_inner();
        self.timer_keys.remove(&timer);
        Some(self.expire(timer))
    }

    /// Whether any request is waiting on a timer.
    pub fn has_timers(&self) -> bool {
        !self.timer_keys.is_empty()
    }

    fn expire(&mut self, timer: Timer) -> Vec<Effect> {
        let (route, waiters) = match &timer {
            Timer::Reply(route) => {
                let Some(p) = self.routes.get(route) else {
                    return Vec::new();
                };
                let detail = if p.kind == Kind::Invocation {
                    format!(
                        "The agent hosting `{}` sent no status of this invocation for {} ms (requests.action_liveness_ms, or the action's own). It is still remembered: a status that comes later reaches you, its status topic and queryAction.",
                        p.thing,
                        p.liveness.as_millis()
                    )
                } else {
                    format!(
                        "The agent hosting `{}` did not answer within {} ms (requests.timeout_ms).",
                        p.thing,
                        self.timeout.as_millis()
                    )
                };
                let m = p.speak(
                    Problem::new(ProblemKind::Timeout, detail)
                        .to_message(&p.thing, Some(&p.correlation)),
                );
                let effects = p.to_all(&m.to_json());
                let route = route.clone();
                if p.kind == Kind::Invocation {
                    // No late answer is dropped: the invocation stays, among
                    // the remembered ones (bounded), listening.
                    self.remember(&route);
                } else {
                    self.forget(&route);
                }
                return effects;
            }
            Timer::Retain(route) => {
                let route = route.clone();
                self.forget(&route);
                self.finished.retain(|r| *r != route);
                return Vec::new();
            }
            Timer::Cancel(route) => match self.routes.get_mut(route) {
                Some(p) => (route.clone(), std::mem::take(&mut p.cancel_waiters)),
                None => return Vec::new(),
            },
        };
        let Some(p) = self.routes.get(&route) else {
            return Vec::new();
        };
        waiters
            .into_iter()
            .map(|(c, w)| {
                let detail = format!(
                    "The agent hosting `{}` did not answer the cancelAction within {} ms; the invocation may still be running.",
                    p.thing,
                    self.timeout.as_millis()
                );
                let m = p.speak(Problem::new(ProblemKind::Timeout, detail).to_message(&p.thing, Some(&w)));
                Effect::ToConsumer(c, m.to_json())
            })
            .collect()
    }

    /// Keeps a finished invocation for queries, within the limit and for
    /// the retention (from its end).
    fn finish(&mut self, route: &str) {
        self.inputs.remove(route);
        self.disarm(&Timer::Reply(route.to_owned()));
        if let Some(p) = self.routes.get_mut(route) {
            p.finished = true;
            p.watchers.clear();
        }
        self.remember(route);
        self.arm(Timer::Retain(route.to_owned()), self.retention);
    }

    /// Puts a request among the remembered ones (once), forgetting the
    /// oldest past the limit.
    fn remember(&mut self, route: &str) {
        match self.routes.get_mut(route) {
            Some(p) if !p.remembered => p.remembered = true,
            _ => return,
        }
        self.arm(Timer::Retain(route.to_owned()), self.retention);
        self.finished.push_back(route.to_owned());
        while self.finished.len() > self.finished_limit {
            if let Some(old) = self.finished.pop_front() {
                self.forget(&old);
            }
        }
    }

    fn forget(&mut self, route: &str) {
        self.inputs.remove(route);
        self.disarm(&Timer::Reply(route.to_owned()));
        self.disarm(&Timer::Cancel(route.to_owned()));
        self.disarm(&Timer::Retain(route.to_owned()));
        let Some(p) = self.routes.remove(route) else {
            return;
        };
        for key in std::iter::once(p.consumer.key()).chain(p.owner) {
            let named = (key, p.correlation.clone());
            if self.invocations.get(&named).map(String::as_str) == Some(route) {
                self.invocations.remove(&named);
            }
            if let Some(action) = &p.action {
                let latest = (named.0, action.clone());
                if self.latest_invocation.get(&latest).map(String::as_str) == Some(route) {
                    self.latest_invocation.remove(&latest);
                }
            }
        }
    }

    /// The sidecar is stopping: every request still waiting is answered with
    /// a 503, so no consumer waits for an answer that will never come.
    pub fn shutdown(&mut self) -> Vec<Effect> {
        let waiting: Vec<String> = self
            .routes
            .iter()
            .filter(|(_, p)| !p.finished)
            .map(|(r, _)| r.clone())
            .collect();
        let mut effects = Vec::new();
        for route in waiting {
            let p = &self.routes[&route];
            let detail = format!(
                "The sidecar is shutting down; the request to `{}` was not answered.",
                p.thing
            );
            let message = p.speak(
                Problem::new(ProblemKind::Unavailable, detail)
                    .to_message(&p.thing, Some(&p.correlation)),
            );
            effects.push(Effect::ToConsumer(p.consumer.clone(), message.to_json()));
            self.forget(&route);
        }
        effects
    }

    /// A WebSocket connection closed: as a consumer, its property requests
    /// are forgotten, while its invocations stay, owned by its principal
    /// (cancelled at the agent only if it asked for that); as an agent, what
    /// waits on it fails.
    pub fn connection_gone(&mut self, conn: ConnId) -> Vec<Effect> {
        let mut effects = Vec::new();
        let hosted: Vec<String> = self
            .hosts
            .iter()
            .filter(|(_, h)| **h == Host::WebSocket(conn))
            .map(|(t, _)| t.clone())
            .collect();
        if !hosted.is_empty() {
            self.foreign.agent_gone(conn);
        }
        for thing in hosted {
            self.hosts.remove(&thing);
            effects.push(Effect::Unsubscribe(
                self.topics.agent_requests_filter(&thing),
            ));
            effects.push(self.presence(&thing, false));
            effects.extend(self.host_gone(&thing));
        }
        let gone = Consumer::WebSocket(conn);
        for p in self.routes.values_mut() {
            p.watchers.retain(|w| *w != gone);
        }
        let mine: Vec<String> = self
            .routes
            .iter()
            .filter(|(_, p)| p.consumer == gone)
            .filter(|(_, p)| p.kind != Kind::Invocation || (p.cancel_on_disconnect && !p.finished))
            .map(|(r, _)| r.clone())
            .collect();
        self.owners.remove(&conn);
        for route in mine {
            let Some(p) = self.routes.get(&route) else {
                continue;
            };
            if p.kind == Kind::Invocation {
                if let (Some(host), Some(action)) =
                    (self.hosts.get(&p.thing).copied(), p.action.clone())
                {
                    let cancel = Message::new(
                        p.thing.clone(),
                        Body::CancelAction {
                            action,
                            reason: Some("The consumer disconnected.".into()),
                        },
                    )
                    .with_correlation_id(route.clone());
                    effects.push(self.to_host(
                        host,
                        &p.thing.clone(),
                        "cancelAction",
                        cancel.to_json(),
                    ));
                }
            }
            self.forget(&route);
        }
        self.finished.retain(|r| self.routes.contains_key(r));
        effects
    }

    /// Whether an agent serves the Thing's requests.
    pub fn has_host(&self, thing: &str) -> bool {
        self.hosts.contains_key(thing)
    }

    pub fn hosted_count(&self) -> usize {
        self.hosts.len()
    }

    /// Each hosted Thing and how its agent is connected.
    pub fn hosts(&self) -> impl Iterator<Item = (&str, &'static str)> {
        self.hosts.iter().map(|(thing, host)| {
            let transport = match host {
                Host::WebSocket(_) => metrics::WEBSOCKET,
                Host::Mqtt => metrics::MQTT,
            };
            (thing.as_str(), transport)
        })
    }

    /// Invocations not finished yet, without who asked (the console shows
    /// them to anyone who may consume the Thing).
    pub fn running_invocations(&self) -> Vec<RunningInvocation> {
        self.routes
            .values()
            .filter(|p| p.kind == Kind::Invocation && !p.finished)
            .map(|p| RunningInvocation {
                thing: p.thing.clone(),
                action: p.action.clone().unwrap_or_default(),
                status: p.latest.as_deref().and_then(status_of),
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
mod tests {
    use super::*;
    use serde_json::json;

    const T: &str = "urn:t";

    fn router(limit: usize) -> Requests {
        let mut r = Requests::new(Topics::new("lmos").unwrap(), Duration::from_secs(5), limit);
        r.claim(1, &[T.to_owned()]).unwrap();
        r
    }

    fn message(v: Value) -> Message {
        Message::from_value(v).unwrap()
    }

    fn read(correlation: &str) -> Message {
        message(
            json!({"thingID": T, "messageID": "m", "messageType": "readProperty", "name": "p", "correlationID": correlation}),
        )
    }

    /// The forwarded request's route, from the effect that sends it to agent 1.
    fn forwarded(effects: &[Effect]) -> String {
        match effects {
            [Effect::ToAgent(1, text)] => {
                let v: Value = serde_json::from_str(text).unwrap();
                v["correlationID"].as_str().unwrap().to_owned()
            }
            other => panic!("{other:?}"),
        }
    }

    fn reply_to(r: &mut Requests, v: &Value) -> Option<Vec<Effect>> {
        let text = v.to_string();
        r.reply(T, &Message::parse(text.as_bytes()).unwrap(), None)
    }

    fn to_consumer(effects: &[Effect]) -> Vec<(Consumer, Value)> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::ToConsumer(c, text) => {
                    Some((c.clone(), serde_json::from_str(text).unwrap()))
                }
                _ => None,
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_request_times_out_after_the_configured_time() {
        let mut r = router(10);
        forwarded(&r.request(Consumer::WebSocket(2), read("c"), None));
        assert!(
            tokio::time::timeout(Duration::from_millis(4_999), r.next_timeout())
                .await
                .is_err()
        );
        let effects = r.next_timeout().await.unwrap();
        let replies = to_consumer(&effects);
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0].0, Consumer::WebSocket(2));
        assert_eq!(
            (
                replies[0].1["status"].as_str(),
                replies[0].1["correlationID"].as_str()
            ),
            (Some("504"), Some("c"))
        );
        assert_eq!(r.remembered_count(), 0);
        assert!(!r.has_timers());
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_disarms_the_timeout() {
        let mut r = router(10);
        let route = forwarded(&r.request(Consumer::WebSocket(2), read("c"), None));
        let reply = json!({"thingID": T, "messageID": "r", "messageType": "propertyReading", "name": "p", "value": 1, "timestamp": "2025-01-20T19:00:00Z", "correlationID": route});
        let effects = reply_to(&mut r, &reply).unwrap();
        assert_eq!(to_consumer(&effects)[0].1["correlationID"], "c");
        assert!(!r.has_timers());
        // A second answer to the same request goes nowhere.
        assert!(reply_to(&mut r, &reply).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_cancel_times_out_but_the_invocation_stays() {
        let mut r = router(10);
        let invoke = message(
            json!({"thingID": T, "messageID": "i", "messageType": "invokeAction", "action": "a", "correlationID": "inv"}),
        );
        let route = forwarded(&r.request(Consumer::WebSocket(2), invoke, None));
        let pending = json!({"thingID": T, "messageID": "s", "messageType": "actionStatus", "action": "a", "status": "pending", "correlationID": route});
        reply_to(&mut r, &pending).unwrap();
        let cancel = message(
            json!({"thingID": T, "messageID": "k", "messageType": "cancelAction", "action": "a", "correlationID": "inv"}),
        );
        assert_eq!(
            forwarded(&r.request(Consumer::WebSocket(2), cancel, None)),
            route
        );
        let effects = r.next_timeout().await.unwrap();
        let replies = to_consumer(&effects);
        assert_eq!(
            (
                replies[0].1["status"].as_str(),
                replies[0].1["correlationID"].as_str()
            ),
            (Some("504"), Some("inv"))
        );
        assert_eq!(
            r.pending_count(),
            1,
            "the invocation itself is still running"
        );
    }

    fn invoke(r: &mut Requests, correlation: &str) -> String {
        let invoke = message(
            json!({"thingID": T, "messageID": "i", "messageType": "invokeAction", "action": "a", "correlationID": correlation}),
        );
        forwarded(&r.request(Consumer::WebSocket(2), invoke, None))
    }

    /// Whether the router still waits for the agent on this route.
    fn waits(r: &Requests, route: &str) -> bool {
        r.timer_keys.contains_key(&Timer::Reply(route.to_owned()))
    }

    fn action_status(route: &str, status: &str) -> Value {
        json!({"thingID": T, "messageID": "s", "messageType": "actionStatus", "action": "a", "status": status, "output": status, "correlationID": route})
    }

    fn query(r: &mut Requests, correlation: &str) -> Value {
        let q = message(
            json!({"thingID": T, "messageID": "q", "messageType": "queryAction", "action": "a", "correlationID": correlation}),
        );
        to_consumer(&r.request(Consumer::WebSocket(2), q, None))
            .remove(0)
            .1
    }

    #[tokio::test(start_paused = true)]
    async fn an_invocation_refused_with_an_error_gets_that_error_once() {
        let mut r = router(10);
        let route = invoke(&mut r, "inv");
        let refusal = json!({"thingID": T, "messageID": "e", "messageType": "error", "type": "about:blank", "title": "Busy", "status": "409", "detail": "busy", "instance": "urn:x", "correlationID": route});
        let effects = reply_to(&mut r, &refusal).unwrap();
        assert_eq!(to_consumer(&effects)[0].1["status"], "409");
        assert!(!waits(&r, &route), "no 504 later");
        assert_eq!(query(&mut r, "inv")["status"], "409", "queried, the error");
    }

    #[tokio::test(start_paused = true)]
    async fn each_status_gives_a_long_action_as_long_again() {
        let mut r = router(10).with_action_liveness(Duration::from_secs(60));
        let route = invoke(&mut r, "inv");
        for status in ["pending", "running", "running"] {
            assert!(
                tokio::time::timeout(Duration::from_secs(59), r.next_timeout())
                    .await
                    .is_err(),
                "no timeout before {status}"
            );
            reply_to(&mut r, &action_status(&route, status)).unwrap();
        }
        tokio::time::advance(Duration::from_secs(59)).await;
        let done = reply_to(&mut r, &action_status(&route, "completed")).unwrap();
        assert_eq!(to_consumer(&done)[0].1["status"], "completed");
        assert!(!waits(&r, &route));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_agent_gets_a_504_and_its_late_answer_still_arrives() {
        let mut r = router(10).with_action_liveness(Duration::from_secs(60));
        let route = invoke(&mut r, "inv");
        let timeout = to_consumer(&r.next_timeout().await.unwrap());
        assert_eq!(timeout[0].1["status"], "504");
        assert!(timeout[0].1["detail"]
            .as_str()
            .unwrap()
            .contains("action_liveness_ms"));
        assert_eq!(r.pending_count(), 0, "no longer counted as waiting");
        let late = reply_to(&mut r, &action_status(&route, "completed")).unwrap();
        assert_eq!(to_consumer(&late)[0].1["correlationID"], "inv");
        assert!(late.iter().any(
            |e| matches!(e, Effect::Publish(p) if p.topic == "lmos/urn:t/actions/a/status/inv")
        ));
        assert_eq!(query(&mut r, "inv")["status"], "completed");
        assert!(!waits(&r, &route));
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_invocation_is_kept_for_its_retention() {
        let mut r = router(10).with_invocation_limits(Duration::from_secs(600), 10);
        let route = invoke(&mut r, "inv");
        reply_to(&mut r, &action_status(&route, "completed")).unwrap();
        tokio::time::advance(Duration::from_secs(599)).await;
        assert_eq!(query(&mut r, "inv")["status"], "completed");
        let forgotten = r.next_timeout().await.unwrap();
        assert!(forgotten.is_empty(), "forgotten quietly: {forgotten:?}");
        assert_eq!(query(&mut r, "inv")["status"], "404");
        assert_eq!(r.remembered_count(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_running_cap_an_invocation_is_refused_until_one_ends() {
        let mut r = router(10).with_invocation_limits(Duration::from_secs(600), 2);
        let first = invoke(&mut r, "a");
        invoke(&mut r, "b");
        let third = message(
            json!({"thingID": T, "messageID": "c", "messageType": "invokeAction", "action": "a"}),
        );
        let refused = to_consumer(&r.request(Consumer::WebSocket(2), third.clone(), None));
        assert_eq!(refused[0].1["status"], "429");
        assert!(refused[0].1["detail"]
            .as_str()
            .unwrap()
            .contains("max_running_invocations"));
        reply_to(&mut r, &action_status(&first, "completed")).unwrap();
        forwarded(&r.request(Consumer::WebSocket(2), third, None));
    }

    #[tokio::test(start_paused = true)]
    async fn an_action_may_have_a_liveness_of_its_own() {
        let overrides = HashMap::from([(format!("{T}#a"), Duration::from_secs(1200))]);
        let mut r = router(10)
            .with_action_liveness(Duration::from_secs(60))
            .with_liveness_overrides(overrides);
        let route = invoke(&mut r, "inv");
        assert!(
            tokio::time::timeout(Duration::from_secs(1199), r.next_timeout())
                .await
                .is_err(),
            "configured per action"
        );
        reply_to(&mut r, &action_status(&route, "running")).unwrap();
        tokio::time::advance(Duration::from_secs(1199)).await;
        assert!(waits(&r, &route), "each status gives it as long again");
        // From its TD, when configuration says nothing of it.
        let mut r = router(10).with_action_liveness(Duration::from_secs(60));
        let invoke = message(
            json!({"thingID": T, "messageID": "i", "messageType": "invokeAction", "action": "a"}),
        );
        forwarded(&r.request(
            Consumer::WebSocket(2),
            invoke,
            Some(Duration::from_secs(300)),
        ));
        let timeout = tokio::time::timeout(Duration::from_secs(299), r.next_timeout()).await;
        assert!(timeout.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn statuses_name_where_the_invocation_is_kept() {
        let mut r = router(10);
        let route = invoke(&mut r, "inv 1");
        let status = reply_to(&mut r, &action_status(&route, "running")).unwrap();
        assert_eq!(
            to_consumer(&status)[0].1["href"],
            "/things/urn:t/actions/a/inv%201"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_cancel_is_relayed_and_the_invocation_goes_on() {
        let mut r = router(10);
        let route = invoke(&mut r, "inv");
        reply_to(&mut r, &action_status(&route, "running")).unwrap();
        let cancel = message(
            json!({"thingID": T, "messageID": "k", "messageType": "cancelAction", "action": "a", "correlationID": "inv"}),
        );
        assert_eq!(
            forwarded(&r.request(Consumer::WebSocket(2), cancel, None)),
            route
        );
        let refusal = json!({"thingID": T, "messageID": "e", "messageType": "error", "type": "about:blank", "title": "Conflict", "status": "409", "detail": "cannot stop now", "instance": "urn:x", "correlationID": route});
        let answer = to_consumer(&reply_to(&mut r, &refusal).unwrap());
        assert_eq!(answer.len(), 1, "{answer:?}");
        assert_eq!(
            (
                answer[0].1["status"].as_str(),
                answer[0].1["correlationID"].as_str()
            ),
            (Some("409"), Some("inv"))
        );
        assert_eq!(r.pending_count(), 1, "still running");
        let done = to_consumer(&reply_to(&mut r, &action_status(&route, "completed")).unwrap());
        assert_eq!(done[0].1["status"], "completed");
    }

    // DelayQueue needs a runtime even when no timer fires.
    #[tokio::test]
    async fn colliding_correlation_ids_of_two_consumers_stay_apart() {
        let mut r = router(10);
        let a = forwarded(&r.request(Consumer::WebSocket(2), read("same"), None));
        let b = forwarded(&r.request(Consumer::WebSocket(3), read("same"), None));
        assert_ne!(a, b);
        let answer = |route: &str| {
            json!({"thingID": T, "messageID": "r", "messageType": "propertyReading", "name": "p", "value": route, "timestamp": "2025-01-20T19:00:00Z", "correlationID": route}).to_string()
        };
        let to_b =
            to_consumer(&reply_to(&mut r, &serde_json::from_str(&answer(&b)).unwrap()).unwrap());
        assert_eq!(to_b[0].0, Consumer::WebSocket(3));
        let to_a =
            to_consumer(&reply_to(&mut r, &serde_json::from_str(&answer(&a)).unwrap()).unwrap());
        assert_eq!(to_a[0].0, Consumer::WebSocket(2));
    }

    #[tokio::test]
    async fn finished_invocations_are_remembered_up_to_the_limit() {
        let mut r = router(2);
        for i in 0..3 {
            let c = format!("inv-{i}");
            let invoke = message(
                json!({"thingID": T, "messageID": c, "messageType": "invokeAction", "action": "a", "correlationID": c}),
            );
            let route = forwarded(&r.request(Consumer::WebSocket(2), invoke, None));
            let done = json!({"thingID": T, "messageID": "s", "messageType": "actionStatus", "action": "a", "status": "completed", "correlationID": route});
            reply_to(&mut r, &done).unwrap();
        }
        assert_eq!(r.remembered_count(), 2);
        let query = |c: &str| {
            message(
                json!({"thingID": T, "messageID": "q", "messageType": "queryAction", "action": "a", "correlationID": c}),
            )
        };
        let oldest = to_consumer(&r.request(Consumer::WebSocket(2), query("inv-0"), None));
        assert_eq!(oldest[0].1["status"], "404");
        let newest = to_consumer(&r.request(Consumer::WebSocket(2), query("inv-2"), None));
        assert_eq!(newest[0].1["status"], "completed");
    }

    #[tokio::test]
    async fn a_thing_can_have_one_agent() {
        let mut r = router(10);
        let refused = r.claim(9, &["urn:other".into(), T.into()]);
        assert!(matches!(refused, Err(ClaimError::AlreadyHosted(t)) if t == T));
        assert!(!r.is_hosted_by("urn:other", 9), "all or nothing");
        assert!(r.mqtt_presence(T, br#"{"status":"online"}"#).is_empty());
        assert!(
            r.is_hosted_by(T, 1),
            "a connected WebSocket agent keeps its Thing"
        );
    }
}
