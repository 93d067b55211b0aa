//! What the broker delivers to the gateway: events and readings checked
//! once and fanned out to their WebSocket subscribers, requests and
//! answers handed to the router.

use std::sync::Arc;
use std::time::Instant;

use tracing::{debug, warn};

use super::{parse_agent_replies, Core, Decisions};
use crate::broker::Delivery;
use crate::gateway::outbound::RecipientCopy;
use crate::gateway::published::Expected;
use crate::gateway::subscriptions::{ConnId, Stream};
use crate::gateway::{history, published};
use crate::lmos::splice::{peek_member, Prepared};
use crate::telemetry::{metrics, MessageInfo, Operation, TraceContext};
use crate::topics::Route;

impl<D: Decisions> Core<D> {
    pub(super) fn deliver(&mut self, delivery: Delivery) {
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

    pub(super) fn deliver_property(
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
    pub(super) fn checked(
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
    pub(super) fn fan_out(
        &mut self,
        topic: &str,
        thing: &str,
        affordance: &str,
        prepared: &Arc<Prepared>,
        recipients: Vec<(ConnId, Arc<str>)>,
    ) {
        let message_type = prepared.message_type.as_deref().unwrap_or_default();
        self.metrics
            .sent_many(metrics::WEBSOCKET, message_type, recipients.len() as u64);
        if !self.tracer.is_on() {
            self.copies(prepared, recipients, None);
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
        let incoming = prepared.traceparent.as_deref();
        let parent = match (
            incoming,
            self.tracer
                .parent_of(incoming, prepared.tracestate.as_deref()),
        ) {
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
        let traceparent = ctx.map(|c| Arc::from(c.traceparent));
        self.copies(prepared, recipients, traceparent);
    }

    /// Each recipient's copy, for its connection to write out (behind a
    /// Kotlin acknowledgement still waiting, written here and held).
    fn copies(
        &mut self,
        prepared: &Arc<Prepared>,
        recipients: Vec<(ConnId, Arc<str>)>,
        traceparent: Option<Arc<str>>,
    ) {
        for (conn, correlation) in recipients {
            let copy = RecipientCopy {
                prepared: prepared.clone(),
                correlation,
                traceparent: traceparent.clone(),
            };
            if self.acks.holds(conn) {
                self.send(conn, copy.text());
            } else {
                self.out.send_copy(conn, copy);
            }
        }
    }
}
