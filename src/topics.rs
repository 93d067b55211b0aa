//! The mapping between LMOS messages and MQTT topics. Pure functions.
//!
//! Every Thing has its own subtree under a configurable prefix:
//!
//! | what                          | topic                                                  |
//! |-------------------------------|--------------------------------------------------------|
//! | `event`                       | `{prefix}/{thing}/events/{event}`                      |
//! | `propertyReading` (retained)  | `{prefix}/{thing}/properties/{property}`               |
//! | `actionStatus`                | `{prefix}/{thing}/actions/{action}/status/{invocation}`|
//! | a consumer's request          | `{prefix}/{thing}/requests/{messageType}`              |
//! | reply to an MQTT 3.1.1 consumer | `{prefix}/{thing}/replies/{correlationID}`           |
//! | a request for the agent       | `{prefix}/{thing}/agent/requests/{messageType}`        |
//! | the agent's replies           | `{prefix}/{thing}/agent/replies`                       |
//! | the agent's presence (retained) | `{prefix}/{thing}/agent/status`                      |
//! | the Thing Description (retained) | `{prefix}/{thing}/td`                               |
//! | an event's `data` alone       | `{prefix}/{thing}/values/events/{event}`               |
//! | a property's `value` alone (retained) | `{prefix}/{thing}/values/properties/{property}` |
//!
//! The `values/` topics are for W3C WoT consumers (node-wot and the like),
//! whose TD forms promise the affordance's data, not an LMOS envelope; the
//! sidecar derives them from the envelope topics (see `crate::wot`).
//!
//! `{thing}`, `{event}`, `{property}`, `{action}` and `{invocation}` are one
//! topic level each, escaped by [`escape`] so that any thingID URI or name is
//! safe and the mapping is reversible:
//!
//! | character                                   | escaped as       | why |
//! |---------------------------------------------|------------------|-----|
//! | `/`                                         | `%2F`            | MQTT level separator |
//! | `+`                                         | `%2B`            | MQTT wildcard |
//! | `#`                                         | `%23`            | MQTT wildcard |
//! | `%`                                         | `%25`            | the escape character |
//! | `$` as the first character                  | `%24`            | MQTT reserves `$` topics for the broker |
//! | ASCII control characters (NUL, tab, LF, ...) | `%00`...`%1F`, `%7F` | NUL is forbidden in MQTT strings; in NATS, tab, CR and LF break cluster routes, form feed subscriptions |
//! | space                                       | `%20`            | NATS (2.9) refuses topics with spaces |
//! | `.`                                         | `%2E`            | NATS (2.9) refuses topics with dots (its subject separator) |
//! | `@`                                         | `%40`            | NATS (2.9) loses or misaddresses QoS 1 messages with `@` that cross a cluster route |
//! | `*` as the whole level                      | `%2A`            | a NATS wildcard (a subscription would match every level) |
//! | `>` as the whole level                      | `%3E`            | a NATS wildcard |
//!
//! Everything else, `:` and non-ASCII characters included, stays as it is,
//! so `urn:uuid:...` IDs remain readable. The NATS rules are established
//! against a real NATS cluster in `tests/interop/nats_cluster.rs`.

use std::borrow::Cow;
use std::fmt::Write;

pub const EVENTS: &str = "events";
pub const PROPERTIES: &str = "properties";
pub const ACTIONS: &str = "actions";
pub const STATUS: &str = "status";
pub const REQUESTS: &str = "requests";
pub const REPLIES: &str = "replies";
pub const AGENT: &str = "agent";
pub const TD: &str = "td";
pub const VALUES: &str = "values";

/// The longest topic MQTT can carry: its length is written in 16 bits.
/// rumqttd does not check; it writes a longer topic's length wrapped, a
/// malformed packet that breaks the connection of every subscriber it
/// reaches.
pub const MAX_TOPIC_LEN: usize = u16::MAX as usize;

/// Whether MQTT can carry this topic or filter (see [`MAX_TOPIC_LEN`]).
pub fn fits(topic: &str) -> bool {
    topic.len() <= MAX_TOPIC_LEN
}

/// Characters with a meaning in MQTT topics, `%` itself (the escape
/// character), ASCII control characters (NUL is forbidden in MQTT strings)
/// and what NATS, as a clustered MQTT broker, cannot carry (see the module
/// documentation).
/// Whether some topic matches both MQTT filters (`$share/group/` already
/// taken off).
pub fn filters_overlap(a: &str, b: &str) -> bool {
    let a: Vec<&str> = a.split('/').collect();
    let b: Vec<&str> = b.split('/').collect();
    // A wildcard at the first level never matches a topic starting with `$`.
    let wild = |l: &str| l == "+" || l == "#";
    if let (Some(x), Some(y)) = (a.first(), b.first()) {
        if (wild(x) && y.starts_with('$')) || (wild(y) && x.starts_with('$')) {
            return false;
        }
    }
    for i in 0.. {
        match (a.get(i), b.get(i)) {
            // `#` matches the rest, none included (`a/#` matches `a`).
            (Some(&"#"), _) | (_, Some(&"#")) | (None, None) => return true,
            (None, Some(_)) | (Some(_), None) => return false,
            (Some(&x), Some(&y)) if x != "+" && y != "+" && x != y => return false,
            _ => {}
        }
    }
    unreachable!("the levels run out")
}

fn needs_escape(c: char, first: bool) -> bool {
    matches!(c, '/' | '+' | '#' | '%' | ' ' | '.' | '@')
        || c.is_ascii_control()
        || (first && c == '$')
}

/// A whole level that is a NATS wildcard.
fn is_nats_wildcard(level: &str) -> bool {
    matches!(level, "*" | ">")
}

/// Makes one topic level of an arbitrary string: see the module
/// documentation for the escapes (`/` becomes `%2F`, `.` becomes `%2E`, ...).
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

/// What a topic under the prefix addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Event {
        thing: String,
        event: String,
    },
    Property {
        thing: String,
        name: String,
    },
    ActionStatus {
        thing: String,
        action: String,
        invocation: String,
    },
    /// A consumer's request, for the sidecar to route to the agent.
    Request {
        thing: String,
        message_type: String,
    },
    /// A reply to an MQTT 3.1.1 consumer without a reply topic of its own.
    Reply {
        thing: String,
        correlation: String,
    },
    /// A request routed to the agent hosting the Thing.
    AgentRequest {
        thing: String,
        message_type: String,
    },
    /// Replies of the agent hosting the Thing.
    AgentReplies {
        thing: String,
    },
    /// Presence of the agent hosting the Thing.
    AgentStatus {
        thing: String,
    },
    /// The Thing's description, retained.
    Td {
        thing: String,
    },
}

impl Route {
    pub fn thing(&self) -> &str {
        match self {
            Route::Event { thing, .. }
            | Route::Property { thing, .. }
            | Route::ActionStatus { thing, .. }
            | Route::Request { thing, .. }
            | Route::Reply { thing, .. }
            | Route::AgentRequest { thing, .. }
            | Route::AgentReplies { thing }
            | Route::AgentStatus { thing }
            | Route::Td { thing } => thing,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    #[error("the topic prefix must not be empty")]
    Empty,
    #[error("the topic prefix must not start or end with `/` or contain empty levels")]
    EmptyLevel,
    #[error("the topic prefix must not contain `+`, `#` or NUL")]
    Wildcard,
    #[error("the topic prefix must not start with `$` (reserved for broker topics)")]
    Dollar,
}

/// The topic layout for one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    prefix: String,
}

impl Topics {
    pub fn new(prefix: &str) -> Result<Topics, PrefixError> {
        if prefix.is_empty() {
            return Err(PrefixError::Empty);
        }
        if prefix.split('/').any(str::is_empty) {
            return Err(PrefixError::EmptyLevel);
        }
        if prefix.contains(['+', '#', '\0']) {
            return Err(PrefixError::Wildcard);
        }
        if prefix.starts_with('$') {
            return Err(PrefixError::Dollar);
        }
        Ok(Topics {
            prefix: prefix.to_owned(),
        })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn join(&self, levels: &[&str]) -> String {
        let mut t = String::with_capacity(
            self.prefix.len() + levels.iter().map(|l| l.len() + 1).sum::<usize>(),
        );
        t.push_str(&self.prefix);
        for l in levels {
            t.push('/');
            t.push_str(l);
        }
        t
    }

    pub fn event(&self, thing: &str, event: &str) -> String {
        self.join(&[&escape(thing), EVENTS, &escape(event)])
    }

    pub fn property(&self, thing: &str, name: &str) -> String {
        self.join(&[&escape(thing), PROPERTIES, &escape(name)])
    }

    pub fn action_status(&self, thing: &str, action: &str, invocation: &str) -> String {
        self.join(&[
            &escape(thing),
            ACTIONS,
            &escape(action),
            STATUS,
            &escape(invocation),
        ])
    }

    /// An event's `data` alone, for WoT consumers.
    pub fn event_value(&self, thing: &str, event: &str) -> String {
        self.join(&[&escape(thing), VALUES, EVENTS, &escape(event)])
    }

    /// A property's `value` alone (retained), for WoT consumers.
    pub fn property_value(&self, thing: &str, name: &str) -> String {
        self.join(&[&escape(thing), VALUES, PROPERTIES, &escape(name)])
    }

    /// Every value-only topic of every Thing.
    pub fn all_values_filter(&self) -> String {
        self.join(&["+", VALUES, "+", "+"])
    }

    /// Every event of every Thing.
    pub fn all_events_filter(&self) -> String {
        self.join(&["+", EVENTS, "+"])
    }

    /// Every property of every Thing.
    pub fn all_properties_filter(&self) -> String {
        self.join(&["+", PROPERTIES, "+"])
    }

    /// All events of one Thing.
    pub fn thing_events_filter(&self, thing: &str) -> String {
        self.join(&[&escape(thing), EVENTS, "+"])
    }

    /// All properties of one Thing.
    pub fn thing_properties_filter(&self, thing: &str) -> String {
        self.join(&[&escape(thing), PROPERTIES, "+"])
    }

    /// One event of every Thing.
    pub fn event_of_all_things_filter(&self, event: &str) -> String {
        self.join(&["+", EVENTS, &escape(event)])
    }

    /// Every invocation of one action of one Thing.
    pub fn action_invocations_filter(&self, thing: &str, action: &str) -> String {
        self.join(&[&escape(thing), ACTIONS, &escape(action), STATUS, "+"])
    }

    pub fn request(&self, thing: &str, message_type: &str) -> String {
        self.join(&[&escape(thing), REQUESTS, &escape(message_type)])
    }

    pub fn reply(&self, thing: &str, correlation: &str) -> String {
        self.join(&[&escape(thing), REPLIES, &escape(correlation)])
    }

    pub fn agent_request(&self, thing: &str, message_type: &str) -> String {
        self.join(&[&escape(thing), AGENT, REQUESTS, &escape(message_type)])
    }

    pub fn agent_replies(&self, thing: &str) -> String {
        self.join(&[&escape(thing), AGENT, REPLIES])
    }

    /// The Thing's description, retained.
    pub fn td(&self, thing: &str) -> String {
        self.join(&[&escape(thing), TD])
    }

    pub fn agent_status(&self, thing: &str) -> String {
        self.join(&[&escape(thing), AGENT, STATUS])
    }

    /// Consumers' requests to every Thing (the sidecar routes them).
    pub fn all_requests_filter(&self) -> String {
        self.join(&["+", REQUESTS, "+"])
    }

    /// Every agent's replies (the sidecar routes them back).
    pub fn all_agent_replies_filter(&self) -> String {
        self.join(&["+", AGENT, REPLIES])
    }

    /// Every agent's presence.
    pub fn all_agent_status_filter(&self) -> String {
        self.join(&["+", AGENT, STATUS])
    }

    /// Every Thing's description.
    pub fn all_td_filter(&self) -> String {
        self.join(&["+", TD])
    }

    /// What an agent hosting the Thing subscribes to.
    pub fn agent_requests_filter(&self, thing: &str) -> String {
        self.join(&[&escape(thing), AGENT, REQUESTS, "+"])
    }

    /// Everything of one Thing.
    pub fn thing_filter(&self, thing: &str) -> String {
        self.join(&[&escape(thing), "#"])
    }

    /// Reads a topic back. `None` for topics outside the layout or with escapes
    /// the sidecar would not have written.
    pub fn parse(&self, topic: &str) -> Option<Route> {
        let rest = topic.strip_prefix(&self.prefix)?.strip_prefix('/')?;
        let levels: Vec<&str> = rest.split('/').collect();
        let un = |l: &str| unescape(l).ok().map(Cow::into_owned);
        match levels.as_slice() {
            [thing, EVENTS, event] => Some(Route::Event {
                thing: un(thing)?,
                event: un(event)?,
            }),
            [thing, PROPERTIES, name] => Some(Route::Property {
                thing: un(thing)?,
                name: un(name)?,
            }),
            [thing, ACTIONS, action, STATUS, invocation] => Some(Route::ActionStatus {
                thing: un(thing)?,
                action: un(action)?,
                invocation: un(invocation)?,
            }),
            [thing, REQUESTS, message_type] => Some(Route::Request {
                thing: un(thing)?,
                message_type: un(message_type)?,
            }),
            [thing, REPLIES, correlation] => Some(Route::Reply {
                thing: un(thing)?,
                correlation: un(correlation)?,
            }),
            [thing, AGENT, REQUESTS, message_type] => Some(Route::AgentRequest {
                thing: un(thing)?,
                message_type: un(message_type)?,
            }),
            [thing, AGENT, REPLIES] => Some(Route::AgentReplies { thing: un(thing)? }),
            [thing, AGENT, STATUS] => Some(Route::AgentStatus { thing: un(thing)? }),
            [thing, TD] => Some(Route::Td { thing: un(thing)? }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn filters_overlap_when_one_topic_could_match_both() {
        let values = "lmos/+/values/+/+";
        for f in [
            "#",
            "lmos/#",
            "+/+/values/events/e",
            "lmos/urn:a/values/#",
            "lmos/+/+/+/+",
        ] {
            assert!(filters_overlap(f, values), "{f}");
        }
        for f in [
            "lmos/+/events/+",
            "lmos/+/+/+",
            "lmos/a/values",
            "other/#",
            "$SYS/#",
        ] {
            assert!(!filters_overlap(f, values), "{f}");
        }
        assert!(!filters_overlap("#", "$SYS/a"));
        assert!(filters_overlap("$SYS/#", "$SYS/a"));
        assert!(filters_overlap("a/+", "a/b") && !filters_overlap("a/b/c", "a/b"));
    }
    use super::*;
    use proptest::prelude::*;

    fn topics() -> Topics {
        Topics::new("lmos").unwrap()
    }

    #[test]
    fn urn_uuid_thing_ids_stay_readable() {
        let t = "urn:uuid:3f1d3a7a-4f97-2e6b-c45f-f3c2e1c84c77";
        assert_eq!(
            topics().event(t, "userFeedbackReceived"),
            "lmos/urn:uuid:3f1d3a7a-4f97-2e6b-c45f-f3c2e1c84c77/events/userFeedbackReceived"
        );
    }

    #[test]
    fn special_characters_are_escaped() {
        assert_eq!(
            escape("https://x.org/a+b#c%d"),
            "https:%2F%2Fx%2Eorg%2Fa%2Bb%23c%25d"
        );
        assert_eq!(escape("$SYS"), "%24SYS");
        assert_eq!(escape("a$b"), "a$b");
        assert_eq!(escape("nul\0"), "nul%00");
    }

    #[test]
    fn what_nats_cannot_carry_is_escaped() {
        assert_eq!(escape("a b"), "a%20b");
        assert_eq!(escape("v1.2"), "v1%2E2");
        assert_eq!(escape("mailto:lamp@example"), "mailto:lamp%40example");
        assert_eq!(
            escape("tab\tcr\rlf\nff\x0cdel\x7f"),
            "tab%09cr%0Dlf%0Aff%0Cdel%7F"
        );
        assert_eq!(escape("\x01\x1f"), "%01%1F");
        // `*` and `>` are NATS wildcards only as a whole level.
        assert_eq!(escape("*"), "%2A");
        assert_eq!(escape(">"), "%3E");
        assert_eq!(escape("a*"), "a*");
        assert_eq!(escape("**"), "**");
        assert_eq!(escape("->"), "->");
        assert_eq!(escape("%2A"), "%252A");
        // Non-ASCII, `:`, `-`, `_`, `~`, `!`, ... stay as they are.
        for s in [
            "über",
            "😀",
            "a\u{a0}b",
            "\u{2028}",
            "urn:x:a-b_c~d!e(f)g'h,i;j=k&l",
        ] {
            assert_eq!(escape(s), s);
        }
    }

    #[test]
    fn ids_without_the_new_characters_map_as_before() {
        for s in [
            "urn:uuid:3f1d3a7a-4f97-2e6b-c45f-f3c2e1c84c77",
            "getWeather",
            "temp",
            "c1",
            "a$b",
            "",
        ] {
            assert!(matches!(escape(s), Cow::Borrowed(_)), "{s:?}");
        }
        assert_eq!(escape("lamp+1#main/x"), "lamp%2B1%23main%2Fx");
    }

    #[test]
    fn unescape_refuses_what_escape_never_writes() {
        for bad in [
            "a b", "a.b", "a@b", "a\tb", "*", ">", "%2a", "%2A*", "*%2A", "a%2A", "%3Ea", "%2e",
            "%41", "%7E", "%80", "%C3%BC", "%+1", "%-1", "%2", "a%24",
        ] {
            assert!(unescape(bad).is_err(), "{bad:?}");
        }
        assert_eq!(unescape("%2A").unwrap(), "*");
        assert_eq!(unescape("%3E").unwrap(), ">");
        assert_eq!(unescape("a%2Eb%20c%40d%09%7F").unwrap(), "a.b c@d\t\x7f");
        assert_eq!(unescape("**").unwrap(), "**");
    }

    #[test]
    fn the_layout_of_each_route() {
        let t = topics();
        assert_eq!(t.property("urn:a", "temp"), "lmos/urn:a/properties/temp");
        assert_eq!(
            t.action_status("urn:a", "getWeather", "c1"),
            "lmos/urn:a/actions/getWeather/status/c1"
        );
        assert_eq!(t.thing_events_filter("urn:a"), "lmos/urn:a/events/+");
        assert_eq!(t.event_of_all_things_filter("alarm"), "lmos/+/events/alarm");
        assert_eq!(
            t.action_invocations_filter("urn:a", "go"),
            "lmos/urn:a/actions/go/status/+"
        );
        assert_eq!(t.thing_filter("a/b"), "lmos/a%2Fb/#");
    }

    #[test]
    fn foreign_topics_and_bad_escapes_do_not_parse() {
        let t = topics();
        assert_eq!(t.parse("other/urn:a/events/e"), None);
        assert_eq!(t.parse("lmosx/urn:a/events/e"), None);
        assert_eq!(t.parse("lmos/urn:a/events"), None);
        assert_eq!(t.parse("lmos/urn:a/events/e/extra"), None);
        assert_eq!(t.parse("lmos/urn%41/events/e"), None);
        assert_eq!(t.parse("lmos/urn%2/events/e"), None);
        assert_eq!(t.parse("lmos/a$%24/events/e"), None);
        assert_eq!(t.parse("lmos/example.com/events/e"), None);
        assert_eq!(t.parse("lmos/*/events/e"), None);
    }

    #[test]
    fn multi_level_prefixes_work_and_bad_ones_are_refused() {
        let t = Topics::new("org/lmos").unwrap();
        assert_eq!(
            t.parse(&t.event("x", "y")),
            Some(Route::Event {
                thing: "x".into(),
                event: "y".into()
            })
        );
        for bad in ["", "/lmos", "lmos/", "a//b", "lm+os", "#", "$lmos"] {
            assert!(Topics::new(bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn any_string_round_trips(s in any::<String>()) {
            let e = escape(&s);
            prop_assert!(!e.contains(['/', '+', '#', '\0', ' ', '.', '@']));
            prop_assert!(!e.contains(|c: char| c.is_ascii_control()));
            prop_assert!(!e.starts_with('$'));
            prop_assert!(e != "*" && e != ">");
            prop_assert_eq!(unescape(&e).unwrap().into_owned(), s.clone());
        }

        #[test]
        fn nats_special_strings_round_trip(s in "[*>.@ %$/a\t\r\n\x0c\x7f\x01]{0,6}") {
            let e = escape(&s);
            prop_assert!(!e.contains(['.', ' ', '@', '\t', '\r', '\n']));
            prop_assert!(e != "*" && e != ">");
            prop_assert_eq!(unescape(&e).unwrap().into_owned(), s.clone());
        }

        #[test]
        fn nats_special_strings_escape_injectively(a in "[*>%2AE3]{0,4}", b in "[*>%2AE3]{0,4}") {
            prop_assume!(a != b);
            prop_assert_ne!(escape(&a), escape(&b));
        }

        #[test]
        fn unescape_accepts_only_what_escape_writes(l in "[*>%2AE34.@ a]{0,6}") {
            // Strictness: a level that unescapes is the escape of what it unescapes to.
            if let Ok(u) = unescape(&l) {
                prop_assert_eq!(escape(&u).into_owned(), l.clone());
            }
        }

        #[test]
        fn uri_like_strings_round_trip(s in "[a-z]{1,6}:[/+#%$@ a-zA-Z0-9:._~*>-]{0,40}") {
            let e = escape(&s);
            prop_assert_eq!(unescape(&e).unwrap().into_owned(), s.clone());
        }

        #[test]
        fn every_route_round_trips(thing in any::<String>(), name in any::<String>(), inv in any::<String>()) {
            let t = topics();
            prop_assert_eq!(t.parse(&t.event(&thing, &name)), Some(Route::Event { thing: thing.clone(), event: name.clone() }));
            prop_assert_eq!(t.parse(&t.property(&thing, &name)), Some(Route::Property { thing: thing.clone(), name: name.clone() }));
            prop_assert_eq!(
                t.parse(&t.action_status(&thing, &name, &inv)),
                Some(Route::ActionStatus { thing: thing.clone(), action: name.clone(), invocation: inv.clone() })
            );
            prop_assert_eq!(t.parse(&t.request(&thing, &name)), Some(Route::Request { thing: thing.clone(), message_type: name.clone() }));
            prop_assert_eq!(t.parse(&t.reply(&thing, &inv)), Some(Route::Reply { thing: thing.clone(), correlation: inv.clone() }));
            prop_assert_eq!(t.parse(&t.agent_request(&thing, &name)), Some(Route::AgentRequest { thing: thing.clone(), message_type: name }));
            prop_assert_eq!(t.parse(&t.agent_replies(&thing)), Some(Route::AgentReplies { thing: thing.clone() }));
            prop_assert_eq!(t.parse(&t.agent_status(&thing)), Some(Route::AgentStatus { thing }));
        }

        #[test]
        fn escaping_is_injective(a in any::<String>(), b in any::<String>()) {
            prop_assume!(a != b);
            prop_assert_ne!(escape(&a), escape(&b));
        }
    }
}
