use serde_json::{Map, Value};

use super::member::{peek_envelope, CORRELATION_ID, MESSAGE_ID, THING_ID};

/// Why an incoming message was not accepted, with whatever of its envelope
/// could still be read so the error sent back can be correlated.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub kind: RejectionKind,
    pub thing_id: Option<String>,
    pub message_id: Option<String>,
    pub correlation_id: Option<String>,
    pub message_type: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RejectionKind {
    #[error("The message is not valid JSON: {reason} (line {line}, column {column}).")]
    InvalidJson {
        line: usize,
        column: usize,
        reason: String,
    },
    #[error("The message is valid JSON but not an object; LMOS messages are JSON objects.")]
    NotAnObject,
    #[error("The message has no `{0}` member, which is mandatory for this message type.")]
    MissingMember(&'static str),
    #[error("The member `{member}` must be {expected}.")]
    InvalidMember {
        member: &'static str,
        expected: &'static str,
    },
    #[error("The members `{first}` and `{second}` are both present with different values.")]
    ConflictingMembers {
        first: &'static str,
        second: &'static str,
    },
    #[error("The messageType `{0}` is not an LMOS message type.")]
    UnknownMessageType(String),
}

impl Rejection {
    pub fn new(kind: RejectionKind) -> Rejection {
        Rejection {
            kind,
            thing_id: None,
            message_id: None,
            correlation_id: None,
            message_type: None,
        }
    }

    /// Captures the correlating members of a message before it is picked apart.
    pub(super) fn context_of(map: &Map<String, Value>) -> Rejection {
        Rejection {
            kind: RejectionKind::NotAnObject,
            thing_id: peek_envelope(map, &THING_ID),
            message_id: peek_envelope(map, &MESSAGE_ID),
            correlation_id: peek_envelope(map, &CORRELATION_ID),
            message_type: map
                .get("messageType")
                .and_then(Value::as_str)
                .map(str::to_owned),
        }
    }

    pub(super) fn with_kind(mut self, kind: RejectionKind) -> Rejection {
        self.kind = kind;
        self
    }

    /// What an error reply is correlated to: the offending message's
    /// `correlationID` if it had one, else its `messageID`.
    pub fn reply_correlation_id(&self) -> Option<&str> {
        self.correlation_id
            .as_deref()
            .or(self.message_id.as_deref())
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.kind.fmt(f)
    }
}

impl std::error::Error for Rejection {}
