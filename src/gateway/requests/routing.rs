//! A consumer's request on its way to the Thing's agent: forwarded under a
//! route of its own, or answered here (queryAction, a cancelAction of a
//! finished invocation, refusals); and requests other sidecars route to
//! agents connected here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use uuid::Uuid;

use super::{Asked, Consumer, Effect, Host, Invocation, Kind, Pending, Requests, Timer};
use crate::broker::Publication;
use crate::gateway::subscriptions::ConnId;
use crate::lmos::{Body, Message, Problem, ProblemKind};
use crate::quotas::Quota;

impl Requests {
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
        // `"stream": {"credit": N, "binary": true}`: chunks paced by the
        // consumer (`credit.rs`), and binary chunks as binary frames;
        // checked before anything is forwarded.
        let (credit, binary) = match stream_options(&message, kind) {
            Ok(options) => options,
            Err(e) => return error(ProblemKind::InvalidMember, format!("In `stream`: {e}")),
        };
        let (host, principal) = match self.admit(&consumer, kind, &thing) {
            Ok(admitted) => admitted,
            Err(problem) => {
                let m = problem.to_message(&thing, Some(&correlation));
                return vec![Effect::ToConsumer(consumer, m.to_json())];
            }
        };
        let route = Uuid::new_v4().to_string();
        let action = match &message.body {
            Body::InvokeAction { action, .. } => Some(action.clone()),
            _ => None,
        };
        let cancel_on_disconnect =
            message.extra.get("cancelOnDisconnect") == Some(&Value::Bool(true));
        let message_type = message.message_type();
        let forwarded_traceparent = message.traceparent.clone();
        let forwarded = message.with_correlation_id(route.clone());
        let text = forwarded.to_json();
        let wait = self.wait_for(kind, &thing, action.as_deref(), td_liveness);
        // Invocations, and only they, name an action.
        let asked = match (kind, action) {
            (_, Some(action)) => {
                let owner = self.owner_key(&consumer);
                self.remember_invocation(&consumer, &owner, &correlation, &action, &route);
                Asked::Invocation(Invocation {
                    cancel_on_disconnect,
                    binary,
                    ..Invocation::new(action, owner, wait)
                })
            }
            (Kind::ReadProperty, None) => Asked::ReadProperty,
            _ => Asked::WriteProperty,
        };
        let now = Instant::now();
        self.tally(kind).add(&principal, 1);
        self.routes.insert(
            route.clone(),
            Pending {
                consumer,
                correlation,
                thing: thing.clone(),
                asked,
                finished: false,
                remembered: false,
                principal,
                traceparent: forwarded_traceparent,
                started: Some((now, message_type)),
                since: now,
            },
        );
        if let Some(credit) = credit {
            let credit = super::credit::Credit::new(credit, self.stream_hold_bytes);
            self.credits.insert(route.clone(), credit);
        }
        self.arm(Timer::Reply(route.clone()), wait);
        self.persist(&route);
        vec![self.to_host(host, &thing, message_type.as_str(), text)]
    }

    /// Whether a request of `kind` for `thing` may go: an agent hosts it
    /// here, and the principal's quota and the sidecar's limit have room.
    /// Its host and the consumer's principal.
    fn admit(
        &self,
        consumer: &Consumer,
        kind: Kind,
        thing: &str,
    ) -> Result<(Host, Arc<str>), Problem> {
        let Some(host) = self.hosts.get(thing).copied() else {
            return Err(Problem::new(
                ProblemKind::Unavailable,
                format!("No agent hosting the Thing `{thing}` is connected to this sidecar."),
            ));
        };
        let principal = self.principal_of(consumer);
        let (quota, usage) = match kind {
            Kind::Invocation => (Quota::RunningInvocations, &self.running_by),
            _ => (Quota::PendingRequests, &self.pending_by),
        };
        let used = usage.get(&principal);
        if let Err(full) = self.quotas.check(&principal, quota, used, 1) {
            self.metrics.limit_hit("any", quota.label());
            return Err(Problem::new(ProblemKind::TooManyRequests, full.to_string()));
        }
        if kind == Kind::Invocation && self.running_count() >= self.max_running {
            self.metrics.limit_hit("any", "max_running_invocations");
            return Err(Problem::new(
                ProblemKind::TooManyRequests,
                format!("{} invocations are running on this sidecar (requests.max_running_invocations); invoke again when some have ended.", self.max_running),
            ));
        }
        Ok((host, principal))
    }

    /// An invocation's route, found again by the consumer's correlation
    /// and by its action (for the consumer and for its owner).
    fn remember_invocation(
        &mut self,
        consumer: &Consumer,
        owner: &Option<String>,
        correlation: &str,
        action: &str,
        route: &str,
    ) {
        for key in std::iter::once(consumer.key()).chain(owner.clone()) {
            self.invocations
                .insert((key.clone(), correlation.to_owned()), route.to_owned());
            self.latest_invocation
                .insert((key, action.to_owned()), route.to_owned());
        }
    }

    /// How long a request waits for its agent: an invocation its liveness
    /// (`requests.action_liveness_overrides`, then the TD's, then the
    /// default), any other request the request timeout.
    fn wait_for(
        &self,
        kind: Kind,
        thing: &str,
        action: Option<&str>,
        td_liveness: Option<Duration>,
    ) -> Duration {
        match (kind, action) {
            (Kind::Invocation, Some(action)) => self
                .liveness_overrides
                .get(&format!("{thing}#{action}"))
                .or_else(|| self.liveness_overrides.get(thing))
                .copied()
                .or(td_liveness)
                .unwrap_or(self.liveness),
            _ => self.timeout,
        }
    }

    pub(super) fn to_host(
        &self,
        host: Host,
        thing: &str,
        message_type: &str,
        text: String,
    ) -> Effect {
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
    pub(super) fn find_invocation(
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
                .is_some_and(|p| p.asked.action() == Some(action))
        })
        .cloned()
    }

    pub(super) fn no_invocation(
        &self,
        consumer: Consumer,
        message: &Message,
        action: &str,
    ) -> Vec<Effect> {
        let detail = match &message.correlation_id {
            Some(c) => format!("No invocation of `{action}` with correlationID `{c}` is known for this consumer or its principal (finished ones are kept for requests.invocation_retention_ms, at most quotas.finished_invocations of each principal and requests.finished_invocations in all); name an invocation by the correlationID (or, without one, the messageID) of its invokeAction."),
            None => format!("This consumer has not invoked `{action}` (or it was forgotten)."),
        };
        let m = Problem::new(ProblemKind::NotFound, detail)
            .to_message(&message.thing_id, Some(message.reply_correlation_id()));
        vec![Effect::ToConsumer(consumer, m.to_json())]
    }

    /// Answered by the sidecar, which saw every status of the invocation.
    pub(super) fn query(
        &mut self,
        consumer: Consumer,
        message: &Message,
        action: String,
    ) -> Vec<Effect> {
        let found = self.find_invocation(&consumer, message, &action);
        let Some(p) = found.and_then(|route| self.routes.get_mut(&route)) else {
            return self.no_invocation(consumer, message, &action);
        };
        let follows = p.follows(&consumer);
        let Some(invocation) = p.asked.invocation_mut() else {
            return self.no_invocation(consumer, message, &action);
        };
        if !p.finished && !follows {
            // Another connection of the owner (a consumer back after a
            // reconnect): it follows the rest of the invocation too.
            invocation.watchers.push(consumer.clone());
        }
        let latest = invocation
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

    pub(super) fn cancel(
        &mut self,
        consumer: Consumer,
        message: Message,
        action: String,
    ) -> Vec<Effect> {
        let found = self.find_invocation(&consumer, &message, &action);
        let Some((route, p)) = found.and_then(|r| self.routes.get_mut(&r).map(|p| (r, p))) else {
            return self.no_invocation(consumer, &message, &action);
        };
        let reply_correlation = message.reply_correlation_id().to_owned();
        let Some(invocation) = p.asked.invocation_mut() else {
            return self.no_invocation(consumer, &message, &action);
        };
        if p.finished {
            // Too late to cancel: the answer is how it ended.
            let latest = invocation
                .latest
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok());
            let mut status = latest.unwrap_or(Value::Null);
            status["correlationID"] = reply_correlation.into();
            status["messageID"] = Uuid::new_v4().to_string().into();
            return vec![Effect::ToConsumer(consumer, status.to_string())];
        }
        invocation
            .cancel_waiters
            .push((consumer, reply_correlation));
        let thing = p.thing.clone();
        let Some(host) = self.hosts.get(&thing).copied() else {
            return self.host_gone(&thing);
        };
        let forwarded = message.with_correlation_id(route.clone()).to_json();
        self.arm(Timer::Cancel(route), self.timeout);
        vec![self.to_host(host, &thing, "cancelAction", forwarded)]
    }

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
}

/// An invocation's `stream` object: the credit it starts with and whether
/// binary chunks go out as binary frames (`Err`: what is wrong).
fn stream_options(message: &Message, kind: Kind) -> Result<(Option<u64>, bool), String> {
    let Some(Value::Object(stream)) = message.extra.get(crate::lmos::stream::MEMBER) else {
        return Ok((None, false));
    };
    if kind != Kind::Invocation {
        return Ok((None, false));
    }
    let credit = super::credit::granted(stream.get(super::credit::CREDIT))?;
    let binary = match stream.get("binary") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err("`binary` must be a boolean (chunks as binary WebSocket frames)".into())
        }
    };
    Ok((credit, binary))
}
