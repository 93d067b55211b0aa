//! What the WeatherAgent answers, without I/O: each message from the
//! sidecar becomes [`Step`]s, and an invocation of `getWeather` becomes its
//! whole script of timed messages, so the order a consumer sees is decided
//! here, once, and unit-tested.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Map, Value};

use super::voice;
use crate::lmos::now_timestamp;

pub const THING_ID: &str = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";
/// The draft's WeatherAgent description, with `modelConfiguration` writable.
pub const THING_DESCRIPTION: &str = include_str!("../../examples/weather_agent.td.json");
const PROGRESS: [&str; 3] = [
    "Reading the question...",
    "Looking at the sky...",
    "Writing the forecast...",
];
/// Between two progress statuses.
pub const STEP: Duration = Duration::from_millis(300);
/// Between two streamed tokens, as an LLM would produce them.
pub const TOKEN_STEP: Duration = Duration::from_millis(20);

/// What the agent does about one message.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Send this at once.
    Reply(Value),
    /// Start an invocation named `key`: send each message after its delay.
    Invoke { key: String, script: Script },
    /// Cancel the invocation `key`: `cancelled` if it still runs, else
    /// `unknown`.
    Cancel {
        key: String,
        cancelled: Value,
        unknown: Value,
    },
}

/// An invocation's messages, each after the delay before it.
pub type Script = Vec<(Duration, Value)>;

/// The agent's state: its one property's value.
pub struct Weather {
    model: Value,
}

impl Default for Weather {
    fn default() -> Self {
        Weather {
            model: json!({"modelName": "gpt-4o", "temperature": 0.7, "maxTokens": 1000}),
        }
    }
}

/// A reply's members the request decides: its correlation and trace.
struct Context {
    correlation: Option<Value>,
    trace: Vec<(&'static str, Value)>,
}

impl Context {
    fn of(m: &Value) -> Context {
        Context {
            correlation: m.get("correlationID").or(m.get("correlationId")).cloned(),
            // Replies continue the request's trace.
            trace: ["traceparent", "tracestate"]
                .into_iter()
                .filter_map(|k| m.get(k).map(|v| (k, v.clone())))
                .collect(),
        }
    }

    fn key(&self) -> String {
        self.correlation
            .as_ref()
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    }

    /// A new message of the agent's Thing, correlated and traced.
    fn message(&self, message_type: &str, members: Value) -> Value {
        let mut m = message(message_type, members);
        if let Some(c) = &self.correlation {
            m["correlationID"] = c.clone();
        }
        for (k, v) in &self.trace {
            m[*k] = v.clone();
        }
        m
    }

    fn error(&self, status: &str, title: &str, detail: String) -> Value {
        self.message(
            "error",
            json!({
                "type": "https://eclipse.dev/lmos/protocol/v1/errors#weather-agent",
                "title": title,
                "status": status,
                "detail": detail,
                "instance": format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            }),
        )
    }

    fn status(&self, status: &str, output: Option<Value>) -> Value {
        let mut members = json!({"action": "getWeather", "status": status});
        if let Some(o) = output {
            members["output"] = o;
        }
        self.message("actionStatus", members)
    }
}

/// A message of the agent's Thing with a fresh ID; `members` merged in.
fn message(message_type: &str, members: Value) -> Value {
    let mut m = json!({
        "thingID": THING_ID,
        "messageID": uuid::Uuid::new_v4().to_string(),
        "messageType": message_type,
    });
    if let Value::Object(members) = members {
        for (k, v) in members {
            m[k] = v;
        }
    }
    m
}

impl Weather {
    /// The current value, retained by the sidecar for observers; sent on
    /// connecting and as the answer to a read.
    pub fn reading(&self, correlation: Option<&Value>) -> Value {
        let context = Context {
            correlation: correlation.cloned(),
            trace: Vec::new(),
        };
        self.reading_in(&context)
    }

    fn reading_in(&self, context: &Context) -> Value {
        let members = json!({"name": "modelConfiguration", "value": self.model, "timestamp": now_timestamp()});
        context.message("propertyReading", members)
    }

    /// What to do about `m`, a message from the sidecar; `None` for what
    /// needs no answer (logged by the caller).
    pub fn handle(&mut self, m: &Value) -> Option<Step> {
        let context = Context::of(m);
        let reply = match m["messageType"].as_str().unwrap_or_default() {
            "readProperty" => match m["name"].as_str() {
                Some("modelConfiguration") => self.reading_in(&context),
                other => context.error(
                    "404",
                    "Unknown property",
                    format!("The WeatherAgent has no property {other:?}."),
                ),
            },
            "writeProperty" => {
                let mut data = Map::new();
                let name = m["name"].as_str().unwrap_or_default().to_owned();
                data.insert(name, m["data"].clone());
                self.write(&context, data)
            }
            "writeMultipleProperties" => {
                let data = m["data"].as_object().cloned().unwrap_or_default();
                self.write(&context, data)
            }
            "invokeAction" => return Some(invoke(&context, m)),
            "cancelAction" => {
                return Some(Step::Cancel {
                    key: context.key(),
                    cancelled: context.status("cancelled", None),
                    unknown: context.error(
                        "404",
                        "Unknown invocation",
                        "No getWeather invocation with that correlationID is running.".into(),
                    ),
                })
            }
            _ => return None,
        };
        Some(Step::Reply(reply))
    }

    /// The draft's `writeProperty`: `data` is the property's new value,
    /// replacing the old one whole (an object is not merged).
    fn write(&mut self, context: &Context, data: Map<String, Value>) -> Value {
        if let Some((name, _)) = data.iter().find(|(name, _)| *name != "modelConfiguration") {
            return context.error(
                "404",
                "Unknown property",
                format!("The WeatherAgent has no property `{name}`."),
            );
        }
        if let Some(model) = data.get("modelConfiguration") {
            self.model = model.clone();
        }
        // The sidecar passes the confirmation to observers as well.
        context.message(
            "propertyReadings",
            json!({"data": data, "timestamp": now_timestamp()}),
        )
    }
}

/// `getWeather`: `pending`, three `running` with progress, [`STEP`] apart;
/// with `"stream": true` the forecast token by token; `completed` with the
/// forecast; then, [`STEP`] later, the `userFeedbackReceived` event (the
/// user's feedback on the answer). The pause keeps the order a consumer
/// sees: `completed` goes straight to the consumer while the event makes a
/// round trip through the broker, so sent back to back either may arrive
/// first.
fn invoke(context: &Context, m: &Value) -> Step {
    let key = context.key();
    if m["action"] != "getWeather" {
        let detail = format!("The WeatherAgent has no action {}.", m["action"]);
        return Step::Reply(context.error("404", "Unknown action", detail));
    }
    let Some(question) = m["input"]["question"].as_str() else {
        let output = json!({"error": "input.question (a string) is required"});
        return Step::Reply(context.status("failed", Some(output)));
    };
    let mut script = vec![(Duration::ZERO, context.status("pending", None))];
    for step in PROGRESS {
        let progress = json!({"progress": step});
        script.push((STEP, context.status("running", Some(progress))));
    }
    let city = city(question);
    let forecast = format!("The weather in {city} is sunny with a temperature of 25°C.");
    let mut done = context.status("completed", Some(json!(forecast)));
    // Spoken, the answer is audio, which only a stream carries; written,
    // it is streamed when asked for (`"stream": true` or an object).
    let chunks = if m["input"]["interactionMode"] == "voice" {
        voice::speak(&forecast)
            .iter()
            .map(|audio| json!({"data": BASE64.encode(audio), "contentType": voice::CONTENT_TYPE, "contentEncoding": "base64"}))
            .collect()
    } else if m["stream"] == true || m["stream"].is_object() {
        forecast
            .split_inclusive(' ')
            .map(|token| json!({"data": token, "contentType": "text/plain"}))
            .collect()
    } else {
        Vec::new()
    };
    if !chunks.is_empty() {
        let mut seq = 0;
        for mut stream in chunks {
            stream["seq"] = seq.into();
            let mut chunk = context.status("running", None);
            chunk["stream"] = stream;
            let delay = if seq == 0 { Duration::ZERO } else { TOKEN_STEP };
            script.push((delay, chunk));
            seq += 1;
        }
        done["stream"] = json!({"seq": seq, "end": true});
    }
    script.push((Duration::ZERO, done));
    let feedback = json!({
        "event": "userFeedbackReceived",
        "data": {"rating": 4, "comment": format!("Thanks for the forecast for {city}.")},
        "timestamp": now_timestamp(),
    });
    // Not correlated (an event answers no request), but traced: the
    // invocation caused it, so its trace shows it.
    let mut event = message("event", feedback);
    for (k, v) in &context.trace {
        event[*k] = v.clone();
    }
    script.push((STEP, event));
    Step::Invoke { key, script }
}

/// The answer to an invocation beyond what the agent runs at once.
pub fn busy(m: &Value) -> Value {
    Context::of(m).error(
        "503",
        "Busy",
        "The WeatherAgent runs as many forecasts as it takes; try again later.".into(),
    )
}

/// The city a question names after " in ", or "your city".
fn city(question: &str) -> String {
    question
        .split(" in ")
        .nth(1)
        .map(|s| s.trim_end_matches('?').trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "your city".into())
}

#[cfg(test)]
#[path = "weather_tests.rs"]
mod tests;
