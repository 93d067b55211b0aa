//! What the gateway does with each message a WebSocket client sends. Pure:
//! the connection carries the decision out.

use bytes::Bytes;

use super::dispatcher::Command;
use super::history::{self, Anchor};
use super::subscriptions::{ConnId, Selector};
use crate::broker::Publication;
use crate::lmos::{Body, Message, Problem, ProblemKind};
use crate::topics::{self, Topics};

/// Where a client's message goes (not yet what the connection does about
/// it: [`super::decide`] turns this into its `Effect`s, the connection
/// layer's one vocabulary).
#[derive(Debug)]
pub enum Destination {
    /// A subscription change or a request, for the dispatcher.
    Dispatcher(Command),
    /// Messages for the bus, in order.
    Bus(Vec<Publication>),
    /// Refused: an LMOS `error` back to the sender.
    Refused(Problem),
}

/// Decides what a parsed message means. `raw` is the message as received:
/// what agents send is published byte for byte, so MQTT subscribers get
/// exactly the message, unknown members and trace context included.
pub fn route(conn: ConnId, message: &Message, raw: Bytes, topics: &Topics) -> Destination {
    if let Some(problem) = unfit(message, topics) {
        return Destination::Refused(problem);
    }
    let thing = &message.thing_id;
    let subscribe = |selector| {
        let resume = match resume_anchor(message) {
            Ok(anchor) => anchor,
            Err(problem) => return Destination::Refused(problem),
        };
        Destination::Dispatcher(Command::Subscribe {
            conn,
            thing: thing.clone(),
            selector,
            correlation_id: message.reply_correlation_id().to_owned(),
            acknowledge: false,
            resume,
        })
    };
    let unsubscribe = |selector| {
        Destination::Dispatcher(Command::Unsubscribe {
            conn,
            thing: thing.clone(),
            selector,
            correlation_id: message.reply_correlation_id().to_owned(),
            acknowledge: false,
        })
    };
    match &message.body {
        Body::SubscribeEvent { event } => subscribe(Selector::Event(event.clone())),
        Body::UnsubscribeEvent { event } => unsubscribe(Selector::Event(event.clone())),
        Body::SubscribeAllEvents => subscribe(Selector::AllEvents),
        Body::UnsubscribeAllEvents => unsubscribe(Selector::AllEvents),
        Body::ObserveProperty { name } => subscribe(Selector::Property(name.clone())),
        Body::UnobserveProperty { name } => unsubscribe(Selector::Property(name.clone())),
        Body::Event { event, .. } => Destination::Bus(vec![Publication::new(
            topics.event(thing, event),
            raw,
            false,
        )]),
        Body::PropertyReading { name, .. } => Destination::Bus(vec![Publication::new(
            topics.property(thing, name),
            raw,
            true,
        )]),
        Body::PropertyReadings { data, timestamp } => Destination::Bus(
            data.iter()
                .map(|(name, value)| {
                    let reading = split_reading(message, name, value, timestamp);
                    Publication::new(topics.property(thing, name), reading.to_json(), true)
                })
                .collect(),
        ),
        Body::ActionStatus { action, .. } => match &message.correlation_id {
            Some(invocation) => Destination::Bus(vec![Publication::new(
                topics.action_status(thing, action, invocation),
                raw,
                false,
            )]),
            None => Destination::Refused(Problem::new(
                ProblemKind::MissingMember,
                "An actionStatus needs a correlationID: it names the invocation (the \
                 invokeAction's correlationID, else its messageID) and becomes the last \
                 level of its topic.",
            )),
        },
        Body::ReadProperty { .. }
        | Body::WriteProperty { .. }
        | Body::WriteMultipleProperties { .. }
        | Body::InvokeAction { .. }
        | Body::QueryAction { .. }
        | Body::CancelAction { .. }
        | Body::ActionInput { .. } => Destination::Dispatcher(Command::Request {
            conn,
            message: Box::new(message.clone()),
        }),
        Body::Error(_) => Destination::Refused(Problem::new(
            ProblemKind::NotSupported,
            "An `error` from an agent must answer a request it received: give it that \
             request's correlationID, and connect with `?host=<thingID>` so the sidecar \
             knows you host the Thing.",
        )),
    }
}

/// Where an event subscription resumes from: `lastMessageID` (the last
/// event's `messageID` the consumer saw), else `lastEvent` (that event's
/// `timestamp`: RFC 3339, or decimal seconds as the Kotlin stack writes it).
/// Only `subscribeEvent` and `subscribeAllEvents` resume.
fn resume_anchor(message: &Message) -> Result<Option<Anchor>, Problem> {
    if !matches!(
        message.body,
        Body::SubscribeEvent { .. } | Body::SubscribeAllEvents
    ) {
        return Ok(None);
    }
    let invalid = |detail: &str| Problem::new(ProblemKind::InvalidMember, detail.to_owned());
    if let Some(id) = message.extra.get("lastMessageID") {
        return match id.as_str() {
            Some(id) if !id.is_empty() => Ok(Some(Anchor::MessageId(id.to_owned()))),
            _ => Err(invalid(
                "`lastMessageID` must be a non-empty string: the messageID of the last event received.",
            )),
        };
    }
    let Some(last) = message.extra.get("lastEvent") else {
        return Ok(None);
    };
    let micros = match last {
        serde_json::Value::Number(n) => n.as_f64().and_then(history::micros_of_seconds),
        serde_json::Value::String(s) => history::micros_of_rfc3339(s),
        _ => None,
    };
    micros.map(|t| Some(Anchor::Time(t))).ok_or_else(|| {
        invalid("`lastEvent` must be the timestamp of the last event received: an RFC 3339 date-time or decimal seconds since the epoch.")
    })
}

/// Why a message cannot be mapped to the bus, if it cannot: every topic it
/// leads to (published on, subscribed to, or used for the action status or
/// the agent's request it starts) must fit in an MQTT packet, and each
/// property of a `propertyReadings` needs a name, as it becomes a topic
/// level of its own.
pub(super) fn unfit(message: &Message, topics: &Topics) -> Option<Problem> {
    let thing = &message.thing_id;
    let correlation = message.reply_correlation_id();
    let request = || topics.agent_request(thing, message.message_type().as_str());
    let lead_to = match &message.body {
        Body::SubscribeEvent { event }
        | Body::UnsubscribeEvent { event }
        | Body::Event { event, .. } => vec![topics.event(thing, event)],
        Body::SubscribeAllEvents | Body::UnsubscribeAllEvents => {
            vec![topics.thing_events_filter(thing)]
        }
        Body::ObserveProperty { name }
        | Body::UnobserveProperty { name }
        | Body::PropertyReading { name, .. } => vec![topics.property(thing, name)],
        Body::PropertyReadings { data, .. } => {
            if data.keys().any(String::is_empty) {
                return Some(Problem::new(
                    ProblemKind::InvalidMember,
                    "Each member of a propertyReadings' `data` names a property and must not \
                     be empty.",
                ));
            }
            data.keys()
                .map(|name| topics.property(thing, name))
                .collect()
        }
        Body::InvokeAction { action, .. }
        | Body::QueryAction { action }
        | Body::CancelAction { action, .. }
        | Body::ActionInput { action } => {
            vec![topics.action_status(thing, action, correlation), request()]
        }
        Body::ActionStatus { action, .. } => vec![topics.action_status(thing, action, correlation)],
        Body::ReadProperty { name } | Body::WriteProperty { name, .. } => {
            vec![topics.property(thing, name), request()]
        }
        Body::WriteMultipleProperties { .. } => vec![request()],
        Body::Error(_) => Vec::new(),
    };
    let longest = lead_to.iter().map(String::len).max()?;
    (longest > topics::MAX_TOPIC_LEN).then(|| {
        Problem::new(
            ProblemKind::InvalidMember,
            format!(
                "The message maps to an MQTT topic of {longest} bytes; MQTT topics hold at \
                 most {}. Shorten the thingID, the affordance name or the correlationID \
                 (`/`, `+`, `#` and `%` take three bytes each in a topic).",
                topics::MAX_TOPIC_LEN
            ),
        )
    })
}

/// One `propertyReading` per member of a `propertyReadings`, so observers of
/// each property see it; trace context is carried over.
fn split_reading(
    message: &Message,
    name: &str,
    value: &serde_json::Value,
    timestamp: &str,
) -> Message {
    let mut reading = Message::new(
        message.thing_id.clone(),
        Body::PropertyReading {
            name: name.to_owned(),
            value: value.clone(),
            timestamp: timestamp.to_owned(),
        },
    );
    reading.traceparent = message.traceparent.clone();
    reading.tracestate = message.tracestate.clone();
    reading
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn route_json(v: serde_json::Value) -> Destination {
        let raw = Bytes::from(v.to_string());
        let message = Message::parse(&raw).unwrap();
        route(7, &message, raw, &Topics::new("lmos").unwrap())
    }

    #[test]
    fn subscriptions_carry_the_reply_correlation() {
        let outcome = route_json(
            json!({"thingID": "urn:t", "messageID": "m", "messageType": "observeProperty", "name": "p"}),
        );
        match outcome {
            Destination::Dispatcher(Command::Subscribe {
                conn: 7,
                thing,
                selector: Selector::Property(p),
                correlation_id,
                acknowledge: false,
                resume: None,
            }) => {
                assert_eq!(
                    (thing.as_str(), p.as_str(), correlation_id.as_str()),
                    ("urn:t", "p", "m")
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn agent_messages_are_published_verbatim_and_readings_retained() {
        let v = json!({"thingId": "urn:t", "messageId": "m", "messageType": "propertyReading", "name": "p", "value": 1, "timestamp": "2025-01-20T19:00:00Z", "x": 1});
        match route_json(v.clone()) {
            Destination::Bus(p) => {
                assert_eq!(p.len(), 1);
                assert_eq!(p[0].topic, "lmos/urn:t/properties/p");
                assert_eq!(p[0].payload, v.to_string());
                assert!(p[0].retain);
            }
            other => panic!("{other:?}"),
        }
    }

    fn rejected(v: serde_json::Value) -> Problem {
        match route_json(v) {
            Destination::Refused(p) => p,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn messages_whose_topic_mqtt_cannot_carry_are_refused() {
        // Found fuzzing the gateway: an event named with 21 900 `/` (a 66 kB
        // topic once escaped) reached MQTT subscribers with its topic length
        // wrapped at 16 bits by rumqttd: a wrong, shorter topic, and the rest
        // of it at the start of the payload.
        let long = "/".repeat(21_900);
        for v in [
            json!({"thingID": "urn:t", "messageID": "m", "messageType": "event", "event": long, "data": 1, "timestamp": "2025-01-20T19:00:00Z"}),
            json!({"thingID": long, "messageID": "m", "messageType": "subscribeAllEvents"}),
            json!({"thingID": "urn:t", "messageID": "m", "messageType": "observeProperty", "name": long}),
            json!({"thingID": "urn:t", "messageID": "m", "correlationID": long, "messageType": "invokeAction", "action": "a"}),
            json!({"thingID": "urn:t", "messageID": "m", "messageType": "propertyReadings", "data": {"ok": 1, long.clone(): 2}, "timestamp": "2025-01-20T19:00:00Z"}),
        ] {
            let p = rejected(v);
            assert_eq!(p.kind, ProblemKind::InvalidMember);
            assert!(p.detail.contains("65535"), "{}", p.detail);
        }
        // Up to the limit is fine: `lmos/urn:t/events/` is 18 bytes.
        let fits = "a".repeat(topics::MAX_TOPIC_LEN - 18);
        let v = json!({"thingID": "urn:t", "messageID": "m", "messageType": "event", "event": fits, "data": 1, "timestamp": "2025-01-20T19:00:00Z"});
        assert!(matches!(route_json(v), Destination::Bus(_)));
    }

    #[test]
    fn readings_of_a_property_without_a_name_are_refused() {
        // `"data": {"": 1}` was published as a propertyReading named "" on
        // `.../properties/`, which no observer can ask for and the reader
        // itself rejects.
        let p = rejected(
            json!({"thingID": "urn:t", "messageID": "m", "messageType": "propertyReadings", "data": {"": 1}, "timestamp": "2025-01-20T19:00:00Z"}),
        );
        assert_eq!(p.kind, ProblemKind::InvalidMember);
    }

    #[test]
    fn requests_go_to_the_router() {
        let outcome = route_json(
            json!({"thingID": "urn:t", "messageID": "m", "messageType": "readProperty", "name": "p"}),
        );
        assert!(matches!(
            outcome,
            Destination::Dispatcher(Command::Request { conn: 7, .. })
        ));
    }
}
