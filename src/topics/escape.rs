//! One topic level of an arbitrary string and back: the escapes tabled in
//! [`crate::topics`]'s documentation, which keep any thingID or name one
//! level, safe in MQTT and NATS, and the mapping reversible.

use std::borrow::Cow;
use std::fmt::Write;

fn needs_escape(c: char, first: bool) -> bool {
    matches!(c, '/' | '+' | '#' | '%' | ' ' | '.' | '@')
        || c.is_ascii_control()
        || (first && c == '$')
}

/// A whole level that is a NATS wildcard.
fn is_nats_wildcard(level: &str) -> bool {
    matches!(level, "*" | ">")
}

/// Makes one topic level of an arbitrary string: see [`crate::topics`]
/// for the escapes (`/` becomes `%2F`, `.` becomes `%2E`, ...).
/// Everything else, `:` included, stays as it is, so `urn:uuid:...` remains
/// readable.
pub fn escape(s: &str) -> Cow<'_, str> {
    if is_nats_wildcard(s) {
        return Cow::Owned(format!("%{:02X}", s.as_bytes()[0]));
    }
    if !s.chars().enumerate().any(|(i, c)| needs_escape(c, i == 0)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for (i, c) in s.chars().enumerate() {
        if needs_escape(c, i == 0) {
            write!(out, "%{:02X}", c as u32).expect("writing to a String cannot fail");
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The byte written as two upper-case hex digits, as [`escape`] writes them.
fn hex_byte(code: &str) -> Option<u8> {
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    };
    match code.as_bytes() {
        [hi, lo] => Some(digit(*hi)? << 4 | digit(*lo)?),
        _ => None,
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnescapeError {
    #[error("`%` at byte {0} is not one of the escapes the sidecar writes")]
    BadEscape(usize),
    #[error("unescaped `{0}` in a topic level")]
    Unescaped(char),
}

/// The inverse of [`escape`]. Strict: only the escapes [`escape`] writes are
/// accepted, so each Thing has exactly one topic.
pub fn unescape(level: &str) -> Result<Cow<'_, str>, UnescapeError> {
    if let Some(c) = level
        .chars()
        .enumerate()
        .find(|&(i, c)| c != '%' && needs_escape(c, i == 0))
    {
        return Err(UnescapeError::Unescaped(c.1));
    }
    if is_nats_wildcard(level) {
        return Err(UnescapeError::Unescaped(
            level.chars().next().unwrap_or('*'),
        ));
    }
    if !level.contains('%') {
        return Ok(Cow::Borrowed(level));
    }
    let mut out = String::with_capacity(level.len());
    let mut rest = level;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let at = level.len() - rest.len() + i;
        let c = rest
            .get(i + 1..i + 3)
            .and_then(hex_byte)
            .map(char::from)
            // `*` and `>` are escaped only as the whole level.
            .filter(|&c| needs_escape(c, at == 0) || (level.len() == 3 && matches!(c, '*' | '>')))
            .ok_or(UnescapeError::BadEscape(at))?;
        out.push(c);
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(Cow::Owned(out))
}
