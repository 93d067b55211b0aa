//! MQTT topics as NATS subjects and back. Pure functions.
//!
//! Each MQTT topic level becomes one NATS token: `lmos/urn:x/events/tick`
//! is `lmos.urn:x.events.tick`. The sidecar's own topic mapping already
//! escapes what NATS cannot carry in a token (`.`, space, controls, a
//! whole-level `*` or `>`; see `crate::topics`), so its topics cross as
//! they read. Any other level (an MQTT client may publish on a bridged
//! filter with a topic of its own making) is escaped reversibly:
//!
//! | level                                                    | token                     |
//! |----------------------------------------------------------|---------------------------|
//! | no `.`, no ASCII space or control, not `*`/`>`, not empty, not starting with `~` | itself |
//! | anything else                                            | `~` + the level with `%`, `.`, `*`, `>`, space and ASCII controls written `%XX` |
//!
//! So `a.b` is `~a%2Eb`, an empty level `~`, `*` is `~%2A` and `~x` is
//! `~~x`; a token starting with `~` is always one of these. MQTT filters map
//! the same way with `+` as `*` and `#` as `>`.

use std::fmt::Write;

/// Marks a token that [`token`] escaped.
const MARK: char = '~';

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    #[error("`{0}` is not a subject this sidecar writes: bad escape in token `{1}`")]
    BadEscape(String, String),
    #[error("`{subject}` does not start with `{root}.`")]
    Foreign { subject: String, root: String },
}

/// Characters a NATS token cannot hold, or that would make it a wildcard.
fn unsafe_in_token(c: char) -> bool {
    matches!(c, '.' | '*' | '>' | '%' | ' ') || c.is_ascii_control()
}

/// Whether the level can stand as a token as it is.
fn clean(level: &str) -> bool {
    !level.is_empty()
        && !level.starts_with(MARK)
        && level != "*"
        && level != ">"
        && !level
            .chars()
            .any(|c| c == '.' || c == ' ' || c.is_ascii_control())
}

/// Appends the token for one MQTT topic level.
fn push_token(out: &mut String, level: &str) {
    if clean(level) {
        out.push_str(level);
        return;
    }
    out.push(MARK);
    for c in level.chars() {
        if unsafe_in_token(c) {
            write!(out, "%{:02X}", c as u32).expect("writing to a String cannot fail");
        } else {
            out.push(c);
        }
    }
}

/// The NATS subject for an MQTT topic (see the module documentation).
pub fn subject(topic: &str) -> String {
    let mut out = String::with_capacity(topic.len() + 8);
    for (i, level) in topic.split('/').enumerate() {
        if i > 0 {
            out.push('.');
        }
        push_token(&mut out, level);
    }
    out
}

/// The NATS subject filter for an MQTT filter: `+` is `*`, `#` is `>`.
pub fn subject_filter(filter: &str) -> String {
    let mut out = String::with_capacity(filter.len() + 8);
    for (i, level) in filter.split('/').enumerate() {
        if i > 0 {
            out.push('.');
        }
        match level {
            "+" => out.push('*'),
            "#" => out.push('>'),
            level => push_token(&mut out, level),
        }
    }
    out
}

fn hex_byte(code: &str) -> Option<u8> {
    // Exactly two upper-case hex digits, as `push_token` writes them.
    let upper_hex = |b: u8| b.is_ascii_digit() || (b'A'..=b'F').contains(&b);
    (code.len() == 2 && code.bytes().all(upper_hex))
        .then(|| u8::from_str_radix(code, 16).ok())
        .flatten()
}

/// The MQTT topic level of one token.
fn level(token: &str) -> Option<String> {
    let Some(escaped) = token.strip_prefix(MARK) else {
        return Some(token.to_owned());
    };
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let c = char::from(rest.get(i + 1..i + 3).and_then(hex_byte)?);
        if !unsafe_in_token(c) {
            return None;
        }
        out.push(c);
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// The MQTT topic of a subject [`subject`] wrote.
pub fn topic(subject: &str) -> Result<String, SubjectError> {
    let mut out = String::with_capacity(subject.len());
    for (i, token) in subject.split('.').enumerate() {
        if i > 0 {
            out.push('/');
        }
        let level = level(token)
            .ok_or_else(|| SubjectError::BadEscape(subject.to_owned(), token.to_owned()))?;
        out.push_str(&level);
    }
    Ok(out)
}

/// The MQTT topic of a subject under `root` (e.g. a reply inbox).
pub fn topic_under(root: &str, subject: &str) -> Result<String, SubjectError> {
    let rest = subject
        .strip_prefix(root)
        .and_then(|r| r.strip_prefix('.'))
        .ok_or_else(|| SubjectError::Foreign {
            subject: subject.to_owned(),
            root: root.to_owned(),
        })?;
    topic(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topics::Topics;
    use proptest::prelude::*;

    #[test]
    fn the_sidecars_own_topics_cross_as_they_read() {
        let t = Topics::new("lmos").unwrap();
        let thing = "https://example.com/things/lamp+1#main";
        assert_eq!(
            subject(&t.event(thing, "on/off")),
            "lmos.https:%2F%2Fexample%2Ecom%2Fthings%2Flamp%2B1%23main.events.on%2Foff"
        );
        assert_eq!(
            subject(&t.agent_request("urn:a", "invokeAction")),
            "lmos.urn:a.agent.requests.invokeAction"
        );
        assert_eq!(
            subject_filter("lmos/+/actions/+/status/+"),
            "lmos.*.actions.*.status.*"
        );
        assert_eq!(subject_filter("acme/lmos/#"), "acme.lmos.>");
    }

    #[test]
    fn other_levels_are_escaped_reversibly() {
        assert_eq!(subject("lmos/a.b/events/*"), "lmos.~a%2Eb.events.~%2A");
        assert_eq!(subject("/lmos//x"), "~.lmos.~.x");
        assert_eq!(subject("lmos/~x/a b/>"), "lmos.~~x.~a%20b.~%3E");
        assert_eq!(subject("lmos/a\tb"), "lmos.~a%09b");
        assert_eq!(
            subject("lmos/a*b"),
            "lmos.a*b",
            "a wildcard only as a whole token"
        );
        for s in [
            "lmos.~a%2Eb.events.~%2A",
            "~.lmos.~.x",
            "lmos.~~x.~a%20b.~%3E",
        ] {
            assert_eq!(subject(&topic(s).unwrap()), s);
        }
    }

    #[test]
    fn subjects_no_sidecar_writes_are_refused() {
        for bad in [
            "lmos.~%2",
            "lmos.~%41",
            "lmos.~%2e",
            "lmos.~%zz",
            "lmos.~%+1",
        ] {
            assert!(topic(bad).is_err(), "{bad}");
        }
        assert_eq!(
            topic_under("_INBOX.abc", "_INBOX.abc.lmos.x.agent.replies").unwrap(),
            "lmos/x/agent/replies"
        );
        assert!(topic_under("_INBOX.abc", "_INBOX.abcd.lmos").is_err());
    }

    proptest! {
        #[test]
        fn any_topic_round_trips_through_a_valid_subject(levels in proptest::collection::vec(".{0,12}", 1..5)) {
            let topic_in = levels.join("/");
            let s = subject(&topic_in);
            for token in s.split('.') {
                prop_assert!(!token.is_empty(), "{s}");
                prop_assert!(token != "*" && token != ">", "{s}");
                prop_assert!(!token.chars().any(|c| c == ' ' || c.is_ascii_control()), "{s}");
            }
            prop_assert_eq!(topic(&s).unwrap(), topic_in);
        }

        #[test]
        fn a_filter_matches_in_nats_what_it_matches_in_mqtt(thing in ".{0,12}", event in ".{0,12}") {
            let t = Topics::new("lmos").unwrap();
            let s = subject(&t.event(&thing, &event));
            let f = subject_filter("lmos/+/events/+");
            let tokens: Vec<&str> = s.split('.').collect();
            let pattern: Vec<&str> = f.split('.').collect();
            prop_assert_eq!(tokens.len(), pattern.len());
            for (t, p) in tokens.iter().zip(&pattern) {
                prop_assert!(*p == "*" || p == t);
            }
        }
    }
}
