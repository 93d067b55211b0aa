//! Reading members out of a message object, with the draft's two spellings
//! of the envelope members and the checks each member type needs.

use serde_json::{Map, Value};

use super::rejection::RejectionKind;

/// The table spelling and the spelling many examples (and real clients) use.
pub struct Aliases {
    pub canonical: &'static str,
    pub alternative: &'static str,
}

pub const THING_ID: Aliases = Aliases {
    canonical: "thingID",
    alternative: "thingId",
};
pub const MESSAGE_ID: Aliases = Aliases {
    canonical: "messageID",
    alternative: "messageId",
};
pub const CORRELATION_ID: Aliases = Aliases {
    canonical: "correlationID",
    alternative: "correlationId",
};

/// Takes an envelope member under either spelling. Both present with
/// different values is ambiguous and rejected rather than guessed.
pub fn take_envelope(
    map: &mut Map<String, Value>,
    aliases: &Aliases,
) -> Result<Option<String>, RejectionKind> {
    let a = map.remove(aliases.canonical);
    let b = map.remove(aliases.alternative);
    let value = match (a, b) {
        (Some(a), Some(b)) if a != b => {
            return Err(RejectionKind::ConflictingMembers {
                first: aliases.canonical,
                second: aliases.alternative,
            })
        }
        (Some(v), _) | (None, Some(v)) => v,
        (None, None) => return Ok(None),
    };
    match value {
        Value::String(s) if !s.is_empty() => Ok(Some(s)),
        // A null correlation ID is what some serializers write for "none".
        Value::Null if aliases.canonical == CORRELATION_ID.canonical => Ok(None),
        _ => Err(RejectionKind::InvalidMember {
            member: aliases.canonical,
            expected: "a non-empty string",
        }),
    }
}

/// Reads the same member without taking it, for correlating a rejection:
/// the first spelling that holds a non-empty string, so that a message
/// rejected for, say, `"correlationID": null` beside `"correlationId": "c"`
/// still gets an error its sender can match.
pub fn peek_envelope(map: &Map<String, Value>, aliases: &Aliases) -> Option<String> {
    [aliases.canonical, aliases.alternative]
        .into_iter()
        .filter_map(|k| map.get(k)?.as_str())
        .find(|s| !s.is_empty())
        .map(str::to_owned)
}

/// A mandatory, non-empty string: affordance names end up as topic levels,
/// where an empty name would address nothing.
pub fn name(map: &mut Map<String, Value>, member: &'static str) -> Result<String, RejectionKind> {
    match map.remove(member) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        None => Err(RejectionKind::MissingMember(member)),
        Some(_) => Err(RejectionKind::InvalidMember {
            member,
            expected: "a non-empty string",
        }),
    }
}

pub fn string(map: &mut Map<String, Value>, member: &'static str) -> Result<String, RejectionKind> {
    match map.remove(member) {
        Some(Value::String(s)) => Ok(s),
        None => Err(RejectionKind::MissingMember(member)),
        Some(_) => Err(RejectionKind::InvalidMember {
            member,
            expected: "a string",
        }),
    }
}

pub fn optional_string(
    map: &mut Map<String, Value>,
    member: &'static str,
) -> Result<Option<String>, RejectionKind> {
    match map.remove(member) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(RejectionKind::InvalidMember {
            member,
            expected: "a string",
        }),
    }
}

/// Any JSON value, `null` included, but the member must be there.
pub fn any(map: &mut Map<String, Value>, member: &'static str) -> Result<Value, RejectionKind> {
    map.remove(member)
        .ok_or(RejectionKind::MissingMember(member))
}

pub fn object(
    map: &mut Map<String, Value>,
    member: &'static str,
) -> Result<Map<String, Value>, RejectionKind> {
    match map.remove(member) {
        Some(Value::Object(o)) => Ok(o),
        None => Err(RejectionKind::MissingMember(member)),
        Some(_) => Err(RejectionKind::InvalidMember {
            member,
            expected: "an object",
        }),
    }
}

/// An RFC 3339 date-time, optionally with the RFC 9557 suffix
/// (`...Z[Europe/Paris]`) the draft refers to, which does not change the
/// instant.
pub fn parse_timestamp(s: &str) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    let base = s.split_once('[').map_or(s, |(base, _)| base);
    chrono::DateTime::parse_from_rfc3339(base).ok()
}

/// A [`parse_timestamp`] date-time member. Kept as written.
pub fn timestamp(
    map: &mut Map<String, Value>,
    member: &'static str,
) -> Result<String, RejectionKind> {
    let s = string(map, member).map_err(|e| match e {
        RejectionKind::InvalidMember { member, .. } => RejectionKind::InvalidMember {
            member,
            expected: "an RFC 3339 date-time string",
        },
        other => other,
    })?;
    parse_timestamp(&s).ok_or(RejectionKind::InvalidMember {
        member,
        expected: "an RFC 3339 date-time string",
    })?;
    Ok(s)
}

/// The draft writes `"status": "500"`; numbers are common too.
pub fn status(map: &mut Map<String, Value>, member: &'static str) -> Result<String, RejectionKind> {
    match map.remove(member) {
        Some(Value::String(s)) => Ok(s),
        Some(Value::Number(n)) => Ok(n.to_string()),
        None => Err(RejectionKind::MissingMember(member)),
        Some(_) => Err(RejectionKind::InvalidMember {
            member,
            expected: "a string or number",
        }),
    }
}
