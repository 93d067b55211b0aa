//! Requests that arrive over MQTT (from MQTT consumers, in either dialect,
//! and from other sidecars), and agents' answers that leave over MQTT.

use serde_json::Value;
use tracing::{debug, warn};

use super::{Core, Decisions};
use crate::broker::{Delivery, ResponseInfo};
use crate::directory::affordances;
use crate::gateway::requests::{Consumer, Effect};
use crate::gateway::{incoming_trace, message_info};
use crate::lmos::dialect::Dialect;
use crate::lmos::{dialect, Body, Message, Problem};
use crate::telemetry::{metrics, Operation};
use crate::topics::Route;

/// Where an MQTT request's replies go: see [`Core::reply_route`].
enum ReplyRoute {
    /// The requester's own topic (Response Topic or `replyTo`).
    Asked {
        topic: String,
        correlation_data: Option<bytes::Bytes>,
    },
    /// `{prefix}/{thing}/replies/{correlationID}`.
    Default,
    /// A topic the sidecar will not publish to; replies take the default.
    Refused(String),
}

impl<D: Decisions> Core<D> {
    /// A request an MQTT consumer published in the Kotlin dialect, as the
    /// canonical request(s) it stands for, each with the topic's message
    /// type renamed alike (`.../requests/readMultipleProperties` becomes one
    /// `readProperty` per property). Anything else as it came.
    pub(super) fn kotlin_requests(
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
    ///
    /// Where replies may go is decided before the request is read, so that
    /// an error reply to a malformed request obeys the same rule as the
    /// answers to a valid one (see [`Core::reply_route`]).
    pub(super) fn mqtt_request(&mut self, thing: &str, message_type: &str, delivery: Delivery) {
        let route = self.reply_route(thing, &delivery);
        let consumer = |correlation: Option<&str>| match &route {
            ReplyRoute::Asked {
                topic,
                correlation_data,
            } => Some(Consumer::Mqtt {
                topic: topic.clone(),
                correlation_data: correlation_data.clone(),
                principal: delivery.publisher.clone(),
            }),
            ReplyRoute::Default | ReplyRoute::Refused(_) => correlation.map(|c| Consumer::Mqtt {
                topic: self.topics.reply(thing, c),
                correlation_data: None,
                principal: delivery.publisher.clone(),
            }),
        };
        let message = match Message::parse(&delivery.payload) {
            Ok(m) => m,
            Err(rejection) => {
                let Some(consumer) = consumer(rejection.reply_correlation_id()) else {
                    self.metrics.dropped("unanswerable_request");
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
        if let ReplyRoute::Refused(topic) = &route {
            let detail = format!(
                "The reply topic `{topic}` lies inside the LMOS topics; use a topic of your own, or none to get replies on `{}`.",
                self.topics.reply(thing, message.reply_correlation_id())
            );
            let problem = Problem::new(crate::lmos::ProblemKind::InvalidMember, detail);
            self.refuse(consumer, &message, problem);
            return;
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
    pub(super) fn remote_request(&mut self, thing: &str, delivery: Delivery) {
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

    /// Where the replies to an MQTT request on `thing`'s request topic may
    /// go. The sidecar publishes replies with its own rights, so a reply
    /// topic inside the LMOS topics other than this Thing's reply topics
    /// would let any consumer publish there past the MQTT guard (a fake
    /// `agent/status` would take another principal's agent offline). Such
    /// a topic is refused: every reply, an error to a malformed request
    /// included, then goes to `{prefix}/{thing}/replies/{correlationID}`,
    /// or nowhere without a correlation. Counted, logged once per topic.
    fn reply_route(&mut self, thing: &str, delivery: &Delivery) -> ReplyRoute {
        let asked = match &delivery.response {
            Some(ResponseInfo {
                topic,
                correlation_data,
            }) => Some((topic.clone(), correlation_data.clone())),
            None => serde_json::from_slice::<Value>(&delivery.payload)
                .ok()
                .and_then(|v| v["replyTo"].as_str().map(|t| (t.to_owned(), None))),
        };
        let Some((topic, correlation_data)) = asked else {
            return ReplyRoute::Default;
        };
        let inside = topic
            .strip_prefix(self.topics.prefix())
            .is_some_and(|rest| rest.starts_with('/'));
        let reply_route = matches!(
            self.topics.parse(&topic),
            Some(Route::Reply { thing: of, .. }) if of == thing
        );
        if !inside || reply_route {
            return ReplyRoute::Asked {
                topic,
                correlation_data,
            };
        }
        self.metrics.dropped("reply_topic_refused");
        if self.refusals_logged.first(&topic) {
            warn!(
                thing,
                reply_topic = %topic,
                kind = "reply-topic-refused",
                "Refused an MQTT request's reply topic inside the LMOS topics; its replies go to the Thing's reply topic instead (further ones are only counted: lmos_sidecar_dropped_messages_total, reason reply_topic_refused)."
            );
        }
        ReplyRoute::Refused(topic)
    }

    /// What the Thing's registered TD has against a request; nothing when
    /// the Thing has no TD.
    pub(super) fn against_td(&self, message: &Message) -> Option<Problem> {
        let directory = self.directory.directory();
        let td = directory.get(&message.thing_id)?;
        affordances::check_request(td, message).err()
    }

    pub(super) fn refuse(&mut self, consumer: Consumer, message: &Message, problem: Problem) {
        let text = problem
            .to_message(&message.thing_id, Some(message.reply_correlation_id()))
            .to_json();
        self.carry_out(vec![Effect::ToConsumer(consumer, text)]);
    }

    /// Records a request on its way to the agent; the forwarded request
    /// carries the new span's context.
    pub(super) fn trace_request(&self, message: &mut Message) {
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
    pub(super) fn agent_reply(&mut self, thing: &str, message: &Message) {
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
}
