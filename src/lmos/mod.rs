//! The LMOS message model: parsing, checking and writing messages. No I/O.
//!
//! A tolerant reader (both spellings of `thingID`/`messageID`/`correlationID`,
//! the draft's non-UUID example IDs) and a canonical writer (table spelling,
//! UUIDv4 message IDs, RFC 3339 timestamps).

pub mod binary;
pub mod dialect;
mod member;
mod message;
mod message_type;
mod problem;
mod rejection;
pub mod splice;
pub mod stream;

pub use member::parse_timestamp;
pub use message::{is_terminal, Body, ErrorBody, Message};
pub use message_type::{Direction, MessageType, UnknownMessageType};
pub use problem::{Problem, ProblemKind, ERROR_TYPE_BASE};
pub use rejection::{Rejection, RejectionKind};

/// The current time as the draft wants it: RFC 3339, UTC, milliseconds.
pub fn now_timestamp() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod spec_examples;
