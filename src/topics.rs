//! The mapping between LMOS messages and MQTT topics. Pure functions.
//!
//! Every Thing has its own subtree under a configurable prefix:
//!
//! | what                          | topic                                                  |
//! |-------------------------------|--------------------------------------------------------|
//! | `event`                       | `{prefix}/{thing}/events/{event}`                      |
//! | `propertyReading` (retained)  | `{prefix}/{thing}/properties/{property}`               |
//! | `actionStatus`                | `{prefix}/{thing}/actions/{action}/status/{invocation}`|
//! | a binary stream chunk, raw    | `{prefix}/{thing}/actions/{action}/stream/{invocation}`|
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

mod escape;
pub use escape::{escape, unescape, UnescapeError};

pub const EVENTS: &str = "events";
pub const PROPERTIES: &str = "properties";
pub const ACTIONS: &str = "actions";
pub const STATUS: &str = "status";
pub const STREAM: &str = "stream";
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

    /// An invocation's binary stream chunks, raw (MQTT 5 properties say
    /// their content type and `seq`).
    pub fn action_stream(&self, thing: &str, action: &str, invocation: &str) -> String {
        self.join(&[
            &escape(thing),
            ACTIONS,
            &escape(action),
            STREAM,
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
#[path = "topics_tests.rs"]
mod tests;
