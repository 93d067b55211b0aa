use uuid::Uuid;

use super::message::{Body, ErrorBody, Message};
use super::rejection::{Rejection, RejectionKind};

/// Error `type` URIs live under the LMOS namespace, the way the one public
/// `lmosprotocol` implementation names them, so clients can match on them.
pub const ERROR_TYPE_BASE: &str = "https://eclipse.dev/lmos/protocol/v1/errors#";

/// The classes of error the sidecar itself reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    InvalidJson,
    BinaryFrame,
    NotAnObject,
    MissingMember,
    InvalidMember,
    ConflictingMembers,
    UnknownMessageType,
    NotSupported,
    MessageTooLarge,
    NotFound,
    InvalidData,
    Forbidden,
    Conflict,
    Unavailable,
    Timeout,
    TooManyRequests,
    /// An imported upstream answered what cannot be passed on (malformed,
    /// too large) or failed in a way the consumer cannot fix.
    BadGateway,
    /// A resuming consumer asked for events further back than the history
    /// holds. Not a failure: what is held follows.
    HistoryGap,
}

impl ProblemKind {
    /// Low-cardinality name, used as the URI fragment and as a log label.
    pub fn slug(self) -> &'static str {
        match self {
            ProblemKind::InvalidJson => "invalid-json",
            ProblemKind::BinaryFrame => "binary-frame",
            ProblemKind::NotAnObject => "not-an-object",
            ProblemKind::MissingMember => "missing-member",
            ProblemKind::InvalidMember => "invalid-member",
            ProblemKind::ConflictingMembers => "conflicting-members",
            ProblemKind::UnknownMessageType => "unknown-message-type",
            ProblemKind::NotSupported => "not-supported",
            ProblemKind::MessageTooLarge => "message-too-large",
            ProblemKind::NotFound => "not-found",
            ProblemKind::InvalidData => "invalid-data",
            ProblemKind::Forbidden => "forbidden",
            ProblemKind::Conflict => "conflict",
            ProblemKind::Unavailable => "unavailable",
            ProblemKind::Timeout => "timeout",
            ProblemKind::TooManyRequests => "limit-exceeded",
            ProblemKind::BadGateway => "bad-gateway",
            ProblemKind::HistoryGap => "history-gap",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            ProblemKind::InvalidJson => "Invalid JSON",
            ProblemKind::BinaryFrame => "Binary frame is not a stream chunk",
            ProblemKind::NotAnObject => "Message is not a JSON object",
            ProblemKind::MissingMember => "Missing mandatory member",
            ProblemKind::InvalidMember => "Invalid member",
            ProblemKind::ConflictingMembers => "Conflicting members",
            ProblemKind::UnknownMessageType => "Unknown message type",
            ProblemKind::NotSupported => "Operation not supported",
            ProblemKind::MessageTooLarge => "Message too large",
            ProblemKind::NotFound => "Not found",
            ProblemKind::InvalidData => "Data does not match the Thing Description",
            ProblemKind::Forbidden => "Forbidden",
            ProblemKind::Conflict => "Conflict",
            ProblemKind::Unavailable => "Agent unavailable",
            ProblemKind::Timeout => "Agent did not answer in time",
            ProblemKind::TooManyRequests => "Limit exceeded",
            ProblemKind::BadGateway => "Upstream failed",
            ProblemKind::HistoryGap => "History gap",
        }
    }

    pub fn status(self) -> u16 {
        match self {
            ProblemKind::NotSupported => 501,
            ProblemKind::MessageTooLarge => 413,
            ProblemKind::NotFound => 404,
            ProblemKind::Forbidden => 403,
            ProblemKind::Conflict => 409,
            ProblemKind::Unavailable => 503,
            ProblemKind::Timeout => 504,
            ProblemKind::TooManyRequests => 429,
            ProblemKind::BadGateway => 502,
            ProblemKind::HistoryGap => 410,
            _ => 400,
        }
    }

    pub const ALL: [ProblemKind; 18] = [
        ProblemKind::InvalidJson,
        ProblemKind::BinaryFrame,
        ProblemKind::NotAnObject,
        ProblemKind::MissingMember,
        ProblemKind::InvalidMember,
        ProblemKind::ConflictingMembers,
        ProblemKind::UnknownMessageType,
        ProblemKind::NotSupported,
        ProblemKind::MessageTooLarge,
        ProblemKind::NotFound,
        ProblemKind::InvalidData,
        ProblemKind::Forbidden,
        ProblemKind::Conflict,
        ProblemKind::Unavailable,
        ProblemKind::Timeout,
        ProblemKind::TooManyRequests,
        ProblemKind::BadGateway,
        ProblemKind::HistoryGap,
    ];

    /// The kind an error `type` URI names, if it is one of ours.
    pub fn from_type_uri(uri: &str) -> Option<ProblemKind> {
        let slug = uri.strip_prefix(ERROR_TYPE_BASE)?;
        ProblemKind::ALL.into_iter().find(|k| k.slug() == slug)
    }

    pub fn type_uri(self) -> String {
        format!("{ERROR_TYPE_BASE}{}", self.slug())
    }
}

/// An error about to be reported to a client as an LMOS `error` message.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub kind: ProblemKind,
    pub detail: String,
}

impl Problem {
    pub fn new(kind: ProblemKind, detail: impl Into<String>) -> Problem {
        Problem {
            kind,
            detail: detail.into(),
        }
    }

    /// Builds the `error` message. `instance` names this one occurrence, so it
    /// can be found in the sidecar's logs.
    pub fn to_message(&self, thing_id: &str, correlation_id: Option<&str>) -> Message {
        let body = Body::Error(ErrorBody {
            error_type: self.kind.type_uri(),
            title: self.kind.title().to_owned(),
            status: self.kind.status().to_string(),
            detail: self.detail.clone(),
            instance: format!("urn:uuid:{}", Uuid::new_v4()),
        });
        let mut message = Message::new(thing_id, body);
        message.correlation_id = correlation_id.map(str::to_owned);
        message
    }
}

impl From<&Rejection> for Problem {
    fn from(r: &Rejection) -> Problem {
        let kind = match &r.kind {
            RejectionKind::InvalidJson { .. } => ProblemKind::InvalidJson,
            RejectionKind::NotAnObject => ProblemKind::NotAnObject,
            RejectionKind::MissingMember(_) => ProblemKind::MissingMember,
            RejectionKind::InvalidMember { .. } => ProblemKind::InvalidMember,
            RejectionKind::ConflictingMembers { .. } => ProblemKind::ConflictingMembers,
            RejectionKind::UnknownMessageType(_) => ProblemKind::UnknownMessageType,
        };
        let detail = match &r.message_type {
            Some(t) if !matches!(r.kind, RejectionKind::UnknownMessageType(_)) => {
                format!("{} (messageType `{t}`)", r.kind)
            }
            _ => r.kind.to_string(),
        };
        Problem::new(kind, detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_carry_every_mandatory_member() {
        let m = Problem::new(ProblemKind::InvalidJson, "bad").to_message("urn:x", Some("m1"));
        let v = m.to_value();
        for k in [
            "thingID",
            "messageID",
            "messageType",
            "correlationID",
            "type",
            "title",
            "status",
            "detail",
            "instance",
        ] {
            assert!(v.get(k).is_some(), "missing {k} in {v}");
        }
        assert_eq!(v["status"], "400");
        assert_eq!(
            v["type"],
            "https://eclipse.dev/lmos/protocol/v1/errors#invalid-json"
        );
        assert!(v["instance"].as_str().unwrap().starts_with("urn:uuid:"));
        // What the sidecar writes, it can read back.
        assert_eq!(Message::from_value(v).unwrap(), m);
    }
}
