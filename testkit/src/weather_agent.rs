//! The LMOS draft's WeatherAgent, as a runnable agent behind lmos-sidecar
//! (`examples/weather_agent.rs` runs it; the tests and benches start it
//! in-process).
//!
//! ```sh
//! cargo run --release --example weather_agent -- --sidecar ws://127.0.0.1:8080/lmos
//! ```
//!
//! It connects to the sidecar's WebSocket gateway declaring that it hosts
//! `urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77` (`?host=...`), registers
//! its Thing Description (`weather_agent.td.json`) on the same socket, and
//! serves:
//! - property `modelConfiguration` (read, write, observe);
//! - action `getWeather`: `pending`, three `running` updates with partial
//!   output over about a second, then `completed` (or `cancelled`); asked
//!   with `"stream": true` on the invokeAction, it also streams the forecast
//!   token by token (`running` statuses with a `stream` chunk each) before
//!   the `completed` that ends the stream and still carries the whole text;
//! - event `userFeedbackReceived`, sent after every completed forecast.
//!
//! Deterministic: no LLM, the forecast is made up from the question.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message as WsMessage;

pub const THING_ID: &str = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";
/// The draft's WeatherAgent description, with `modelConfiguration` writable.
pub const THING_DESCRIPTION: &str = include_str!("../../examples/weather_agent.td.json");
const PROGRESS: [&str; 3] = [
    "Reading the question...",
    "Looking at the sky...",
    "Writing the forecast...",
];
const STEP: Duration = Duration::from_millis(300);
/// Between two streamed tokens, as an LLM would produce them.
const TOKEN_STEP: Duration = Duration::from_millis(20);

fn message(message_type: &str, correlation: Option<&Value>, members: Value) -> Value {
    let mut m = json!({
        "thingID": THING_ID,
        "messageID": uuid::Uuid::new_v4().to_string(),
        "messageType": message_type,
    });
    if let Some(c) = correlation {
        m["correlationID"] = c.clone();
    }
    for (k, v) in members.as_object().expect("members are an object") {
        m[k] = v.clone();
    }
    m
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn error(correlation: Option<&Value>, status: &str, title: &str, detail: String) -> Value {
    message(
        "error",
        correlation,
        json!({
            "type": "https://eclipse.dev/lmos/protocol/v1/errors#weather-agent",
            "title": title,
            "status": status,
            "detail": detail,
            "instance": format!("urn:uuid:{}", uuid::Uuid::new_v4()),
        }),
    )
}

/// A sidecar on the test configuration with the WeatherAgent connected,
/// its TD registered.
pub async fn start_sidecar() -> crate::TestSidecar {
    crate::start_with_agent(crate::test_config(), THING_ID, |url| async move {
        serve(&url).await.map_err(|e| e.to_string())
    })
    .await
}

/// Connects and serves until the sidecar closes the connection.
pub async fn serve(sidecar: &str) -> Result<(), Box<dyn std::error::Error>> {
    // A sidecar with `http.authentication = ["bearer"]` wants the agent's
    // token, as the Kubernetes example sets it.
    serve_with_token(sidecar, std::env::var("LMOS_TOKEN").ok().as_deref()).await
}

/// [`serve`] with the bearer token given rather than read from `LMOS_TOKEN`
/// (the environment is one for all the tests in a test binary).
pub async fn serve_with_token(
    sidecar: &str,
    token: Option<&str>,
) -> Result<(), Box<dyn std::error::Error>> {
    let url = format!("{sidecar}?host={THING_ID}");
    let mut request = url.into_client_request()?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("lmosprotocol"),
    );
    if let Some(token) = token {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))?;
        request.headers_mut().insert("Authorization", value);
    }
    let (socket, _) = tokio_tungstenite::connect_async(request).await?;
    let (mut sink, mut stream) = socket.split();
    let (out, mut outgoing) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        while let Some(m) = outgoing.recv().await {
            if sink
                .send(WsMessage::Text(m.to_string().into()))
                .await
                .is_err()
            {
                return;
            }
        }
    });

    // The description first: the sidecar checks requests against it.
    let _ = out.send(serde_json::from_str(THING_DESCRIPTION)?);
    let mut agent = Agent {
        out,
        model: json!({"modelName": "gpt-4o", "temperature": 0.7, "maxTokens": 1000}),
        running: HashMap::new(),
        trace: Vec::new(),
    };
    agent.publish_model(None);
    println!("Weather agent serving {THING_ID} through {sidecar}.");
    while let Some(frame) = stream.next().await {
        match frame? {
            WsMessage::Text(text) => match serde_json::from_str::<Value>(&text) {
                Ok(m) => agent.handle(m),
                Err(e) => eprintln!("Ignoring a message that is not JSON: {e}."),
            },
            WsMessage::Close(_) => break,
            _ => {}
        }
    }
    for (_, task) in agent.running.drain() {
        task.abort();
    }
    writer.abort();
    Ok(())
}

/// First wait before connecting again, doubled after each failed attempt
/// up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A connection that lasted this long was a good one: the next wait starts
/// from [`FIRST_BACKOFF`] again.
const STABLE: Duration = Duration::from_secs(2);

/// [`serve`] for as long as the process runs: an agent beside a sidecar
/// that restarts (an upgrade, a crash, a pod's sidecar container) must come
/// back by itself, with its description, and not hammer a sidecar that is
/// still starting. `report` hears why each connection ended.
pub async fn serve_reconnecting(sidecar: &str, report: impl Fn(String)) {
    let mut delay = FIRST_BACKOFF;
    loop {
        let started = tokio::time::Instant::now();
        let why = match serve(sidecar).await {
            Ok(()) => "the sidecar closed the connection".to_owned(),
            Err(e) => format!("cannot reach the sidecar at {sidecar}: {e}"),
        };
        if started.elapsed() >= STABLE {
            delay = FIRST_BACKOFF;
        }
        report(format!("{why}; connecting again in {delay:?}."));
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_BACKOFF);
    }
}

struct Agent {
    out: mpsc::UnboundedSender<Value>,
    model: Value,
    /// Running getWeather invocations by their correlation ID.
    running: HashMap<String, JoinHandle<()>>,
    /// Trace context of the request being answered.
    trace: Vec<(&'static str, Value)>,
}

fn with_trace(mut m: Value, trace: &[(&'static str, Value)]) -> Value {
    for (k, v) in trace {
        m[*k] = v.clone();
    }
    m
}

impl Agent {
    fn send(&self, m: Value) {
        let _ = self.out.send(with_trace(m, &self.trace));
    }

    /// The current value, retained by the sidecar for observers.
    fn publish_model(&self, correlation: Option<&Value>) {
        let reading =
            json!({"name": "modelConfiguration", "value": self.model, "timestamp": now()});
        self.send(message("propertyReading", correlation, reading));
    }

    fn handle(&mut self, m: Value) {
        let correlation = m.get("correlationID").or(m.get("correlationId")).cloned();
        let c = correlation.as_ref();
        // Replies continue the request's trace.
        self.trace = ["traceparent", "tracestate"]
            .into_iter()
            .filter_map(|k| m.get(k).map(|v| (k, v.clone())))
            .collect();
        match m["messageType"].as_str().unwrap_or_default() {
            "readProperty" => match m["name"].as_str() {
                Some("modelConfiguration") => self.publish_model(c),
                other => self.send(error(
                    c,
                    "404",
                    "Unknown property",
                    format!("The WeatherAgent has no property {other:?}."),
                )),
            },
            "writeProperty" => {
                let mut data = Map::new();
                data.insert(
                    m["name"].as_str().unwrap_or_default().to_owned(),
                    m["data"].clone(),
                );
                self.write(c, data);
            }
            "writeMultipleProperties" => {
                let data = m["data"].as_object().cloned().unwrap_or_default();
                self.write(c, data);
            }
            "invokeAction" => self.invoke(c, &m),
            "cancelAction" => {
                let key = c.and_then(Value::as_str).unwrap_or_default().to_owned();
                if let Some(task) = self.running.remove(&key).filter(|t| !t.is_finished()) {
                    task.abort();
                    self.send(message(
                        "actionStatus",
                        c,
                        json!({"action": "getWeather", "status": "cancelled"}),
                    ));
                } else {
                    self.send(error(
                        c,
                        "404",
                        "Unknown invocation",
                        "No getWeather invocation with that correlationID is running.".into(),
                    ));
                }
            }
            "error" => eprintln!("The sidecar refused something: {}", m["detail"]),
            other => eprintln!("Ignoring a `{other}` message."),
        }
    }

    fn write(&mut self, c: Option<&Value>, data: Map<String, Value>) {
        if let Some((name, _)) = data.iter().find(|(name, _)| *name != "modelConfiguration") {
            self.send(error(
                c,
                "404",
                "Unknown property",
                format!("The WeatherAgent has no property `{name}`."),
            ));
            return;
        }
        if let Some(model) = data.get("modelConfiguration") {
            self.model = model.clone();
        }
        // The sidecar passes the confirmation to observers as well.
        self.send(message(
            "propertyReadings",
            c,
            json!({"data": data, "timestamp": now()}),
        ));
    }

    fn invoke(&mut self, c: Option<&Value>, m: &Value) {
        if m["action"] != "getWeather" {
            self.send(error(
                c,
                "404",
                "Unknown action",
                format!("The WeatherAgent has no action {}.", m["action"]),
            ));
            return;
        }
        let Some(question) = m["input"]["question"].as_str().map(str::to_owned) else {
            let output = json!({"error": "input.question (a string) is required"});
            self.send(message(
                "actionStatus",
                c,
                json!({"action": "getWeather", "status": "failed", "output": output}),
            ));
            return;
        };
        let key = c.and_then(Value::as_str).unwrap_or_default().to_owned();
        let out = self.out.clone();
        let correlation = c.cloned();
        let trace = self.trace.clone();
        let streamed = m["stream"] == true;
        let task = tokio::spawn(async move {
            let c = correlation.as_ref();
            let status = |status: &str, output: Option<Value>| {
                let mut members = json!({"action": "getWeather", "status": status});
                if let Some(o) = output {
                    members["output"] = o;
                }
                with_trace(message("actionStatus", c, members), &trace)
            };
            let _ = out.send(status("pending", None));
            for step in PROGRESS {
                tokio::time::sleep(STEP).await;
                let _ = out.send(status("running", Some(json!({"progress": step}))));
            }
            let city = question
                .split(" in ")
                .nth(1)
                .map(|s| s.trim_end_matches('?').trim().to_owned())
                .unwrap_or_else(|| "your city".into());
            let forecast = format!("The weather in {city} is sunny with a temperature of 25°C.");
            let mut done = status("completed", Some(json!(forecast)));
            if streamed {
                let mut seq = 0;
                for token in forecast.split_inclusive(' ') {
                    let mut chunk = status("running", None);
                    chunk["stream"] =
                        json!({"seq": seq, "data": token, "contentType": "text/plain"});
                    let _ = out.send(chunk);
                    seq += 1;
                    tokio::time::sleep(TOKEN_STEP).await;
                }
                done["stream"] = json!({"seq": seq, "end": true});
            }
            let _ = out.send(done);
            let feedback = json!({
                "event": "userFeedbackReceived",
                "data": {"rating": 4, "comment": format!("Thanks for the forecast for {city}.")},
                "timestamp": now(),
            });
            let _ = out.send(message("event", None, feedback));
        });
        self.running.retain(|_, t| !t.is_finished());
        self.running.insert(key, task);
    }
}
