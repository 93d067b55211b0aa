use serde_json::{Map, Value};
use uuid::Uuid;

use super::member::{self, CORRELATION_ID, MESSAGE_ID, THING_ID};
use super::message_type::MessageType;
use super::rejection::{Rejection, RejectionKind};

mod members;

/// One LMOS message: the common envelope, the members of its type, and every
/// member this sidecar does not know, kept so that forwarding loses nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub thing_id: String,
    pub message_id: String,
    pub correlation_id: Option<String>,
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    pub body: Body,
    /// Members outside the envelope and the type's own members, in the order
    /// they arrived.
    pub extra: Map<String, Value>,
}

/// The members each message type defines, checked on the way in.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    ReadProperty {
        name: String,
    },
    WriteProperty {
        name: String,
        data: Value,
    },
    WriteMultipleProperties {
        data: Map<String, Value>,
    },
    PropertyReading {
        name: String,
        value: Value,
        timestamp: String,
    },
    PropertyReadings {
        data: Map<String, Value>,
        timestamp: String,
    },
    ObserveProperty {
        name: String,
    },
    UnobserveProperty {
        name: String,
    },
    InvokeAction {
        action: String,
        input: Option<Value>,
    },
    QueryAction {
        action: String,
    },
    CancelAction {
        action: String,
        reason: Option<String>,
    },
    /// A chunk of a consumer's input stream (its `stream` member stays in
    /// [`Message::extra`]).
    ActionInput {
        action: String,
    },
    ActionStatus {
        action: String,
        status: String,
        output: Option<Value>,
    },
    SubscribeEvent {
        event: String,
    },
    UnsubscribeEvent {
        event: String,
    },
    SubscribeAllEvents,
    UnsubscribeAllEvents,
    Event {
        event: String,
        data: Value,
        timestamp: String,
    },
    Error(ErrorBody),
}

/// The members of an `error` message (RFC 9457 problem details inside LMOS).
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorBody {
    pub error_type: String,
    pub title: String,
    /// The draft types it as a string ("500"); numbers are accepted on the way
    /// in and written back as strings.
    pub status: String,
    pub detail: String,
    pub instance: String,
}

impl Body {
    pub fn message_type(&self) -> MessageType {
        match self {
            Body::ReadProperty { .. } => MessageType::ReadProperty,
            Body::WriteProperty { .. } => MessageType::WriteProperty,
            Body::WriteMultipleProperties { .. } => MessageType::WriteMultipleProperties,
            Body::PropertyReading { .. } => MessageType::PropertyReading,
            Body::PropertyReadings { .. } => MessageType::PropertyReadings,
            Body::ObserveProperty { .. } => MessageType::ObserveProperty,
            Body::UnobserveProperty { .. } => MessageType::UnobserveProperty,
            Body::InvokeAction { .. } => MessageType::InvokeAction,
            Body::QueryAction { .. } => MessageType::QueryAction,
            Body::CancelAction { .. } => MessageType::CancelAction,
            Body::ActionInput { .. } => MessageType::ActionInput,
            Body::ActionStatus { .. } => MessageType::ActionStatus,
            Body::SubscribeEvent { .. } => MessageType::SubscribeEvent,
            Body::UnsubscribeEvent { .. } => MessageType::UnsubscribeEvent,
            Body::SubscribeAllEvents => MessageType::SubscribeAllEvents,
            Body::UnsubscribeAllEvents => MessageType::UnsubscribeAllEvents,
            Body::Event { .. } => MessageType::Event,
            Body::Error(_) => MessageType::Error,
        }
    }
}

impl Message {
    /// A message created by the sidecar: fresh UUIDv4 message ID, no
    /// correlation, no trace context.
    pub fn new(thing_id: impl Into<String>, body: Body) -> Message {
        Message {
            thing_id: thing_id.into(),
            message_id: Uuid::new_v4().to_string(),
            correlation_id: None,
            traceparent: None,
            tracestate: None,
            body,
            extra: Map::new(),
        }
    }

    pub fn with_correlation_id(mut self, correlation_id: impl Into<String>) -> Message {
        self.correlation_id = Some(correlation_id.into());
        self
    }

    pub fn message_type(&self) -> MessageType {
        self.body.message_type()
    }

    /// The event, property or action the message is about, if any.
    pub fn affordance(&self) -> Option<&str> {
        match &self.body {
            Body::ReadProperty { name }
            | Body::WriteProperty { name, .. }
            | Body::PropertyReading { name, .. }
            | Body::ObserveProperty { name }
            | Body::UnobserveProperty { name } => Some(name),
            Body::InvokeAction { action, .. }
            | Body::QueryAction { action }
            | Body::CancelAction { action, .. }
            | Body::ActionInput { action }
            | Body::ActionStatus { action, .. } => Some(action),
            Body::SubscribeEvent { event }
            | Body::UnsubscribeEvent { event }
            | Body::Event { event, .. } => Some(event),
            _ => None,
        }
    }

    /// The correlation ID a reply to this message carries: the request's own
    /// `correlationID` when it gave one, otherwise its `messageID`.
    pub fn reply_correlation_id(&self) -> &str {
        self.correlation_id.as_deref().unwrap_or(&self.message_id)
    }

    /// Parses one message from JSON text, accepting both spellings of the
    /// envelope members and checking the mandatory members of its type.
    pub fn parse(text: &[u8]) -> Result<Message, Rejection> {
        let value: Value = serde_json::from_slice(text).map_err(|e| {
            Rejection::new(RejectionKind::InvalidJson {
                line: e.line(),
                column: e.column(),
                reason: strip_position(&e.to_string()),
            })
        })?;
        Message::from_value(value)
    }

    pub fn from_value(value: Value) -> Result<Message, Rejection> {
        let Value::Object(mut map) = value else {
            return Err(Rejection::new(RejectionKind::NotAnObject));
        };
        // Read what can correlate an error first, so that even a rejected
        // message gets an error its sender can match.
        let context = Rejection::context_of(&map);
        let result = Message::from_map(&mut map);
        result.map_err(|kind| context.with_kind(kind))
    }

    fn from_map(map: &mut Map<String, Value>) -> Result<Message, RejectionKind> {
        let thing_id = member::take_envelope(map, &THING_ID)?
            .ok_or(RejectionKind::MissingMember(THING_ID.canonical))?;
        let message_id = member::take_envelope(map, &MESSAGE_ID)?
            .ok_or(RejectionKind::MissingMember(MESSAGE_ID.canonical))?;
        let correlation_id = member::take_envelope(map, &CORRELATION_ID)?;
        let message_type = match map.remove("messageType") {
            None => return Err(RejectionKind::MissingMember("messageType")),
            Some(Value::String(s)) => s
                .parse::<MessageType>()
                .map_err(|e| RejectionKind::UnknownMessageType(e.0))?,
            Some(_) => {
                return Err(RejectionKind::InvalidMember {
                    member: "messageType",
                    expected: "a string",
                })
            }
        };
        let traceparent = member::optional_string(map, "traceparent")?;
        let tracestate = member::optional_string(map, "tracestate")?;
        let body = Body::take_from(message_type, map)?;
        Ok(Message {
            thing_id,
            message_id,
            correlation_id,
            traceparent,
            tracestate,
            body,
            extra: std::mem::take(map),
        })
    }

    /// The canonical form: table spelling of the envelope (`thingID`,
    /// `messageID`, `correlationID`), then the type's members, then the trace
    /// context, then every unknown member as it arrived.
    pub fn to_value(&self) -> Value {
        let mut map = Map::with_capacity(8 + self.extra.len());
        map.insert(THING_ID.canonical.into(), self.thing_id.clone().into());
        map.insert(MESSAGE_ID.canonical.into(), self.message_id.clone().into());
        map.insert("messageType".into(), self.message_type().as_str().into());
        if let Some(c) = &self.correlation_id {
            map.insert(CORRELATION_ID.canonical.into(), c.clone().into());
        }
        self.body.write_into(&mut map);
        if let Some(t) = &self.traceparent {
            map.insert("traceparent".into(), t.clone().into());
        }
        if let Some(t) = &self.tracestate {
            map.insert("tracestate".into(), t.clone().into());
        }
        for (k, v) in &self.extra {
            map.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(map)
    }

    pub fn to_json(&self) -> String {
        super::splice::text(&self.to_value())
    }
}

/// serde_json appends " at line L column C"; the position is reported in its
/// own fields, so the reason reads better without it.
fn strip_position(s: &str) -> String {
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_owned(),
        None => s.to_owned(),
    }
}

/// Whether an `actionStatus`'s `status` ends its invocation (both spellings
/// of cancelled are met in the wild).
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled" | "canceled")
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;
