//! Joining the answers to a Kotlin read of several properties: the state
//! kept per connection while its one-`readProperty`-each answers come back
//! (see [`super`] for the dialect's translation, which holds no state).

use std::collections::HashMap;

use serde_json::{Map, Value};
use uuid::Uuid;

/// Joins the answers to a Kotlin `readMultipleProperties` /
/// `readAllProperties` (one `readProperty` each) into one `propertyReadings`.
/// The first `error` among them goes through instead, and the rest of them
/// are swallowed: the Kotlin sender waits for one answer.
#[derive(Debug, Default)]
pub struct Gatherer {
    pending: HashMap<String, Gathering>,
}

#[derive(Debug)]
struct Gathering {
    thing: String,
    outstanding: usize,
    data: Map<String, Value>,
    timestamp: Option<Value>,
    failed: bool,
}

impl Gatherer {
    /// Readings of `names` with `correlation` answer one read; with no names
    /// the answer is ready at once.
    pub fn gather(&mut self, thing: &str, correlation: &str, names: &[String]) -> Option<Value> {
        if names.is_empty() {
            return Some(readings(thing, correlation, Map::new(), None));
        }
        self.pending.insert(
            correlation.to_owned(),
            Gathering {
                thing: thing.to_owned(),
                outstanding: names.len(),
                data: Map::new(),
                timestamp: None,
                failed: false,
            },
        );
        None
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// A canonical message on its way out: itself, the joined
    /// `propertyReadings` it completes, or nothing while it is held.
    pub fn offer(&mut self, value: Value) -> Option<Value> {
        if self.pending.is_empty() {
            return Some(value);
        }
        let t = value.get("messageType").and_then(Value::as_str);
        let correlation = value.get("correlationID").and_then(Value::as_str);
        let (Some(t @ ("propertyReading" | "error")), Some(correlation)) = (t, correlation) else {
            return Some(value);
        };
        let correlation = correlation.to_owned();
        let Some(g) = self.pending.get_mut(&correlation) else {
            return Some(value);
        };
        g.outstanding -= 1;
        let out = if g.failed {
            None
        } else if t == "error" {
            g.failed = true;
            Some(value)
        } else {
            if let Some(name) = value.get("name").and_then(Value::as_str) {
                g.data.insert(
                    name.to_owned(),
                    value.get("value").cloned().unwrap_or(Value::Null),
                );
            }
            if let Some(ts) = value.get("timestamp") {
                g.timestamp = Some(ts.clone());
            }
            None
        };
        if g.outstanding > 0 {
            return out;
        }
        let g = self.pending.remove(&correlation).expect("present");
        if g.failed {
            return out;
        }
        Some(readings(&g.thing, &correlation, g.data, g.timestamp))
    }
}

fn readings(
    thing: &str,
    correlation: &str,
    data: Map<String, Value>,
    timestamp: Option<Value>,
) -> Value {
    let mut map = Map::with_capacity(6);
    map.insert("thingID".into(), thing.into());
    map.insert("messageID".into(), Uuid::new_v4().to_string().into());
    map.insert("messageType".into(), "propertyReadings".into());
    map.insert("correlationID".into(), correlation.into());
    map.insert("data".into(), Value::Object(data));
    map.insert(
        "timestamp".into(),
        timestamp.unwrap_or_else(|| crate::lmos::now_timestamp().into()),
    );
    Value::Object(map)
}
