//! What arrives from the bus for consumers (events and property readings an
//! MQTT client, a WebSocket agent or another sidecar published) is checked
//! here, once, before any consumer gets it: the same reader and the same TD
//! checks a WebSocket publisher meets, plus agreement with the topic it came
//! on. Pure: the dispatcher counts and logs what this refuses.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use crate::directory::affordances;
use crate::lmos::dialect::{self, Dialect};
use crate::lmos::splice::Prepared;
use crate::lmos::{Body, Message};
use crate::telemetry::TraceContext;

mod plain;

/// What the topic says the payload is.
#[derive(Debug, Clone, Copy)]
pub enum Expected<'a> {
    Event { thing: &'a str, event: &'a str },
    Reading { thing: &'a str, name: &'a str },
}

impl Expected<'_> {
    pub fn thing(&self) -> &str {
        match self {
            Expected::Event { thing, .. } | Expected::Reading { thing, .. } => thing,
        }
    }
}

/// Why a publication reaches no consumer; the text goes to the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{0}")]
    Unreadable(String),
    #[error("a `{found}` message on a topic for `{expected}` messages")]
    WrongType {
        found: String,
        expected: &'static str,
    },
    #[error("it is about `{found}`, its topic about `{expected}`")]
    WrongName { found: String, expected: String },
    #[error("its thingID `{found}` is not the topic's Thing `{expected}`")]
    WrongThing { found: String, expected: String },
    #[error("{0}")]
    AgainstTd(String),
}

/// Checks a payload published on an event or property topic and prepares it
/// for fan-out. `td` is the Thing's description when agent data is to be
/// validated against it (`discovery.validate_agent_data`).
pub fn check(
    payload: &[u8],
    expected: Expected<'_>,
    trace: Option<TraceContext>,
    td: Option<&Value>,
) -> Result<Arc<Prepared>, Refused> {
    let plain = match td {
        None => plain::check(payload, expected),
        // The data is to be read against the TD: the full check reads it.
        Some(_) => None,
    };
    let prepared = match plain {
        Some(prepared) => prepared,
        None => full(payload, expected, td)?,
    };
    Ok(Arc::new(with_trace(prepared, trace)))
}

/// The publication's own trace context, else the one it came with (set
/// before any recipient's copy is made).
fn with_trace(mut prepared: Prepared, trace: Option<TraceContext>) -> Prepared {
    if let (None, Some(t)) = (&prepared.traceparent, trace) {
        prepared.traceparent = Some(t.traceparent);
        prepared.tracestate = t.tracestate;
    }
    prepared
}

/// Every publication the plain path leaves: read as a WebSocket publisher's
/// message is read.
fn full(payload: &[u8], expected: Expected<'_>, td: Option<&Value>) -> Result<Prepared, Refused> {
    let map = match serde_json::from_slice::<Value>(payload) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return Err(Refused::Unreadable("not a JSON object".into())),
        Err(e) => return Err(Refused::Unreadable(format!("not JSON: {e}"))),
    };
    let map = if dialect::detect(&map) == Some(Dialect::Kotlin) {
        match dialect::normalize(map, |_| None) {
            Ok(mut n) if n.messages.len() == 1 => n.messages.remove(0),
            _ => {
                return Err(Refused::Unreadable(
                    "a Kotlin-dialect message that is no single event or reading".into(),
                ))
            }
        }
    } else {
        map
    };
    // The fan-out keeps the members as they came; the reader WebSocket
    // publishers meet consumes them, so it comes second.
    let prepared = Prepared::from_members(&map, expected.thing());
    let message =
        Message::from_value(Value::Object(map)).map_err(|r| Refused::Unreadable(r.to_string()))?;
    agrees(&message, expected)?;
    if let Some(td) = td {
        affordances::check_agent_data(td, &message).map_err(|p| Refused::AgainstTd(p.detail))?;
    }
    Ok(prepared)
}

fn agrees(message: &Message, expected: Expected<'_>) -> Result<(), Refused> {
    let (found, wanted) = match (&message.body, expected) {
        (Body::Event { event, .. }, Expected::Event { event: wanted, .. }) => (event, wanted),
        (Body::PropertyReading { name, .. }, Expected::Reading { name: wanted, .. }) => {
            (name, wanted)
        }
        (_, Expected::Event { .. }) => {
            return Err(Refused::WrongType {
                found: message.message_type().as_str().into(),
                expected: "event",
            })
        }
        (_, Expected::Reading { .. }) => {
            return Err(Refused::WrongType {
                found: message.message_type().as_str().into(),
                expected: "propertyReading",
            })
        }
    };
    if found != wanted {
        return Err(Refused::WrongName {
            found: found.clone(),
            expected: wanted.into(),
        });
    }
    if message.thing_id != expected.thing() {
        return Err(Refused::WrongThing {
            found: message.thing_id.clone(),
            expected: expected.thing().into(),
        });
    }
    Ok(())
}

/// Topics whose refusals were logged: one line per topic, so a publisher
/// repeating a mistake does not flood the log (every refusal is counted in
/// `/metrics`). Bounded; past the bound, refusals are counted only.
#[derive(Debug, Default)]
pub struct LoggedOnce {
    topics: HashSet<String>,
}

impl LoggedOnce {
    const MAX: usize = 1024;

    /// Whether this topic's refusal is the first to be logged.
    pub fn first(&mut self, topic: &str) -> bool {
        if self.topics.len() >= Self::MAX || self.topics.contains(topic) {
            return false;
        }
        self.topics.insert(topic.to_owned());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T: &str = "urn:t";

    fn event(v: Value) -> Result<Arc<Prepared>, Refused> {
        let payload = v.to_string();
        check(
            payload.as_bytes(),
            Expected::Event {
                thing: T,
                event: "e",
            },
            None,
            None,
        )
    }

    fn full_event() -> Value {
        json!({"thingID": T, "messageID": "m1", "messageType": "event", "event": "e",
               "data": 1, "timestamp": "2025-01-20T19:00:00Z"})
    }

    #[test]
    fn a_complete_event_passes_with_its_members() {
        let p = event(full_event()).unwrap();
        let text: Value = serde_json::from_str(&p.with_correlation("\"c\"")).unwrap();
        assert_eq!(text["data"], 1);
        assert_eq!(text["correlationID"], "c");
    }

    #[test]
    fn a_bare_event_is_refused_naming_what_is_missing() {
        let e = event(json!({"messageType": "event"})).unwrap_err();
        assert!(e.to_string().contains("thingID"), "{e}");
        for member in ["messageID", "event", "data", "timestamp"] {
            let mut v = full_event();
            v.as_object_mut().unwrap().remove(member);
            let e = event(v).unwrap_err();
            assert!(e.to_string().contains(member), "{member}: {e}");
        }
    }

    #[test]
    fn the_message_must_agree_with_its_topic() {
        let mut v = full_event();
        v["event"] = json!("other");
        assert!(matches!(event(v), Err(Refused::WrongName { .. })));
        let mut v = full_event();
        v["thingID"] = json!("urn:other");
        assert!(matches!(event(v), Err(Refused::WrongThing { .. })));
        let mut v = full_event();
        v["messageType"] = json!("propertyReading");
        v["name"] = json!("e");
        v["value"] = json!(1);
        assert!(matches!(event(v), Err(Refused::WrongType { .. })));
        assert!(matches!(event(json!([1])), Err(Refused::Unreadable(_))));
    }

    #[test]
    fn data_is_checked_against_the_td_when_asked() {
        let td = json!({"events": {"e": {"data": {"type": "string"}}}});
        let payload = full_event().to_string();
        let expected = Expected::Event {
            thing: T,
            event: "e",
        };
        let e = check(payload.as_bytes(), expected, None, Some(&td)).unwrap_err();
        assert!(matches!(e, Refused::AgainstTd(_)), "{e}");
        assert!(check(payload.as_bytes(), expected, None, None).is_ok());
    }

    #[test]
    fn a_reading_is_checked_alike() {
        let v = json!({"thingID": T, "messageID": "m1", "messageType": "propertyReading",
                       "name": "p", "value": 2, "timestamp": "2025-01-20T19:00:00Z"});
        let payload = v.to_string();
        let ok = check(
            payload.as_bytes(),
            Expected::Reading {
                thing: T,
                name: "p",
            },
            None,
            None,
        );
        assert!(ok.is_ok());
        let wrong = check(
            payload.as_bytes(),
            Expected::Reading {
                thing: T,
                name: "q",
            },
            None,
            None,
        );
        assert!(matches!(wrong, Err(Refused::WrongName { .. })));
    }

    #[test]
    fn each_topic_is_logged_once() {
        let mut logged = LoggedOnce::default();
        assert!(logged.first("a"));
        assert!(!logged.first("a"));
        assert!(logged.first("b"));
    }
}
