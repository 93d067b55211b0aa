//! Which agent serves which Thing: WebSocket agents' claims, MQTT agents'
//! presence, and what fails when a host goes.

use serde_json::{json, Value};

use super::{ClaimError, Effect, Host, Requests, Timer};
use crate::broker::Publication;
use crate::gateway::subscriptions::ConnId;
use crate::lmos::splice::text;
use crate::lmos::{Body, Message, Problem, ProblemKind};
use crate::telemetry::metrics;

impl Requests {
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

    pub(super) fn presence(&self, thing: &str, online: bool) -> Effect {
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
    pub(super) fn host_gone(&mut self, thing: &str) -> Vec<Effect> {
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
            let Some(p) = self.routes.get_mut(&route) else {
                continue;
            };
            let detail = format!("The agent hosting `{thing}` disconnected before it finished.");
            let Some(action) = p.asked.action().map(str::to_owned) else {
                // A property request.
                let problem = Problem::new(ProblemKind::Unavailable, detail);
                let consumer = p.consumer.clone();
                let message = p
                    .speak(problem.to_message(thing, Some(&p.correlation)))
                    .to_json();
                effects.push(Effect::ToConsumer(consumer, message));
                self.forget(&route);
                continue;
            };
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
            let text = text(&status);
            effects.extend(p.to_all(&text));
            let mut waiters = Vec::new();
            if let Some(invocation) = p.asked.invocation_mut() {
                waiters = std::mem::take(&mut invocation.cancel_waiters);
                invocation.latest = Some(text);
            }
            effects.extend(self.answer_cancels(&status, waiters, &route, false));
            self.finish(&route);
        }
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
}
