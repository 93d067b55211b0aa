//! The A2A TCK's requirements on the server face, ours: one test per MUST
//! and SHOULD requirement of a2aproject/a2a-tck (branch `1.0-dev`) that
//! concerns the JSON-RPC face at `/a2a/{thingID}`, named after its
//! requirement ID (`core_send_001_…`); the table requirement → test, and why
//! the others do not concern the face, is in docs/agent-protocols.md ("A2A
//! TCK requirements"). The TCK is not in a registry; these run in CI in its
//! stead (`benches/a2a-tck/run-by-hand.sh` runs the TCK itself).
//!
//! Raw JSON-RPC over HTTP (as the TCK's own client sends it: `A2A-Version:
//! 1.0`, ProtoJSON) against a real sidecar with the TCK's scripted agent
//! (`lmos_testkit::tck_agent`), which answers by the message's `messageId`
//! prefix. Where a requirement is about the agent behind the face, the
//! scripted agent plays it.

mod agent_card;
mod core_ops;
mod data_model;
mod errors;
mod history;
mod multi_turn;
mod security;
mod streaming;
mod versioning;

use std::net::SocketAddr;
use std::time::Duration;

use lmos_testkit::tck_agent::{self, THING_ID};
use lmos_testkit::{self as common, test_config, urlencode, HttpResponse, TestSidecar, WAIT};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// The task states a stream ends on (the TCK's `TERMINAL_STATES`).
const TERMINAL: [&str; 4] = [
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
];

/// A sidecar with the TCK's agent, and the agent's interface.
struct Face {
    sidecar: TestSidecar,
    /// `/a2a/{thingID}`, the card's interface URL's path.
    path: String,
    /// What reached the agent (its `invokeAction`s).
    heard: mpsc::UnboundedReceiver<Value>,
    /// Sent as `Authorization` with every call, when set.
    authorization: Option<String>,
}

impl Face {
    async fn start() -> Face {
        Face::start_with(test_config(), None).await
    }

    async fn start_with(config: lmos_sidecar::Config, agent_auth: Option<String>) -> Face {
        let (sidecar, heard) = tck_agent::start_sidecar_as(config, agent_auth).await;
        Face {
            sidecar,
            path: format!("/a2a/{}", urlencode(THING_ID)),
            heard,
            authorization: None,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.sidecar.http
    }

    /// A POST of `body` to the interface with `headers` (besides the
    /// caller's `Authorization`).
    async fn post(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpResponse {
        let mut all: Vec<(&str, &str)> = headers.to_vec();
        if let Some(a) = &self.authorization {
            all.push(("Authorization", a));
        }
        common::http_with(self.addr(), "POST", path, &all, body).await
    }

    /// A JSON-RPC call as the TCK makes it; the whole response body.
    async fn call(&self, method: &str, params: Value) -> Value {
        let r = self
            .call_raw(method, params, &[("A2A-Version", "1.0")])
            .await;
        r.json()
    }

    async fn call_raw(
        &self,
        method: &str,
        params: Value,
        headers: &[(&str, &str)],
    ) -> HttpResponse {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut h = vec![("Content-Type", "application/json")];
        h.extend_from_slice(headers);
        self.post(&self.path, &h, body.to_string().as_bytes()).await
    }

    /// `SendMessage` of a user message with this `messageId` prefix and
    /// any further message members; `configuration` when given.
    async fn send(&self, prefix: &str, extra: Value, configuration: Option<Value>) -> Value {
        let mut params = json!({"message": message(prefix, extra)});
        if let Some(c) = configuration {
            params["configuration"] = c;
        }
        self.call("SendMessage", params).await
    }

    /// The task of a `SendMessage` with this prefix (asserted a task).
    async fn task(&self, prefix: &str) -> Value {
        let r = self.send(prefix, json!({}), None).await;
        let task = r["result"]["task"].clone();
        assert!(task["id"].is_string(), "no task: {r}");
        task
    }

    /// A streaming call (`SendStreamingMessage`, `SubscribeToTask`).
    async fn stream(&self, method: &str, params: Value) -> Sse {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        Sse::open(
            self.addr(),
            &self.path,
            self.authorization.as_deref(),
            &body,
        )
        .await
    }

    /// The next `invokeAction` the agent got.
    async fn heard(&mut self) -> Value {
        tokio::time::timeout(WAIT, self.heard.recv())
            .await
            .expect("the agent is invoked in time")
            .expect("the agent runs")
    }

    async fn stop(self) {
        self.sidecar.stop().await;
    }
}

/// A user message whose `messageId` starts with `prefix` (made unique as
/// the TCK makes it), with `extra` members.
fn message(prefix: &str, extra: Value) -> Value {
    let mut m = json!({
        "role": "ROLE_USER",
        "parts": [{"text": "Hello from our TCK tests"}],
        "messageId": format!("{prefix}-{}", uuid::Uuid::new_v4()),
    });
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            m[k] = v;
        }
    }
    m
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

/// The error code of a JSON-RPC response (`None`: no error).
fn code(response: &Value) -> Option<i64> {
    response["error"]["code"].as_i64()
}

/// The `google.rpc.ErrorInfo` of an error response's `data`.
fn error_info(response: &Value) -> Option<&Value> {
    response["error"]["data"]
        .as_array()?
        .iter()
        .find(|d| d["@type"] == "type.googleapis.com/google.rpc.ErrorInfo")
}

/// A2A 1.0's JSON Schema (a2aproject/A2A `v1.0.0` at 1736957, as the TCK
/// bundles it in `specification/a2a.json`), which the TCK validates
/// answers with.
const SCHEMA: &str = include_str!("a2a_tck/a2a.json");

/// The schema with its file-like `$ref`s (`lf.a2a.v1.Task.jsonschema.json`)
/// pointing into its own `definitions`, as the TCK resolves them.
fn local_refs(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("$schema");
            if let Some(Value::String(r)) = m.get_mut("$ref") {
                let name = r
                    .trim_start_matches("lf.")
                    .trim_start_matches("a2a.v1.")
                    .trim_start_matches("google.protobuf.")
                    .trim_end_matches(".jsonschema.json")
                    .to_owned();
                *r = format!("#/definitions/{name}");
            }
            m.values_mut().for_each(local_refs);
        }
        Value::Array(a) => a.iter_mut().for_each(local_refs),
        _ => {}
    }
}

/// What `value` breaks of the schema's `definition` ("Send Message
/// Response", "Task", "Stream Response", "Agent Card", …).
fn schema_errors(definition: &str, value: &Value) -> Vec<String> {
    let mut full: Value = serde_json::from_str(SCHEMA).expect("the schema is JSON");
    let defs = full["definitions"].as_object_mut().expect("definitions");
    // The file-like names are the definitions' names without spaces.
    let renamed: serde_json::Map<String, Value> = std::mem::take(defs)
        .into_iter()
        .map(|(k, v)| (k.replace(' ', ""), v))
        .collect();
    let mut definitions = Value::Object(renamed);
    local_refs(&mut definitions);
    let root = json!({
        "definitions": definitions,
        "$ref": format!("#/definitions/{}", definition.replace(' ', "")),
    });
    let validator = jsonschema::draft202012::new(&root).expect("the schema compiles");
    validator
        .iter_errors(value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

/// Asserts `value` is a valid `definition`.
fn assert_schema(definition: &str, value: &Value) {
    let errors = schema_errors(definition, value);
    assert!(
        errors.is_empty(),
        "not a valid {definition}: {errors:#?}\n{value}"
    );
}

/// The state a stream event carries (a task's or a status update's).
/// A stream's remaining events end with the task completed.
fn assert_ends_completed(rest: &[Value]) {
    assert_eq!(
        rest.last().and_then(event_state),
        Some("TASK_STATE_COMPLETED"),
        "{rest:#?}"
    );
}

fn event_state(event: &Value) -> Option<&str> {
    let r = &event["result"];
    r["statusUpdate"]["status"]["state"]
        .as_str()
        .or(r["task"]["status"]["state"].as_str())
}

/// An SSE response read event by event, over HTTP/1.0 so the body is the
/// stream itself (no chunked framing) and ends when the server closes it.
struct Sse {
    status: u16,
    headers: Vec<(String, String)>,
    /// The body when the answer is not a stream (an immediate error).
    body: Option<Value>,
    lines: Option<tokio::io::Lines<BufReader<TcpStream>>>,
}

impl Sse {
    async fn open(addr: SocketAddr, path: &str, auth: Option<&str>, body: &Value) -> Sse {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let body = body.to_string();
        let auth = auth
            .map(|a| format!("Authorization: {a}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nA2A-Version: 1.0\r\n{auth}Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut lines = BufReader::new(stream).lines();
        let status_line = head_line(&mut lines).await.unwrap_or_default();
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut headers = Vec::new();
        while let Some(line) = head_line(&mut lines).await.filter(|l| !l.is_empty()) {
            if let Some((k, v)) = line.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
        let mut sse = Sse {
            status,
            headers,
            body: None,
            lines: Some(lines),
        };
        if !sse.content_type().starts_with("text/event-stream") {
            let mut text = String::new();
            while let Some(Some(l)) = sse.next_line(WAIT).await {
                text.push_str(&l);
            }
            sse.body = serde_json::from_str(&text).ok();
            sse.lines = None;
        }
        sse
    }

    fn content_type(&self) -> &str {
        self.headers
            .iter()
            .find(|(k, _)| k == "content-type")
            .map_or("", |(_, v)| v.as_str())
    }

    /// `Some(None)`: the stream ended; `None`: nothing within `wait`.
    async fn next_line(&mut self, wait: Duration) -> Option<Option<String>> {
        let lines = self.lines.as_mut()?;
        match tokio::time::timeout(wait, lines.next_line()).await {
            Ok(Ok(line)) => Some(line),
            Ok(Err(_)) => Some(None),
            Err(_) => None,
        }
    }

    /// The next event's JSON: `Some(None)` when the stream ended,
    /// `None` when nothing came within `wait`.
    async fn next_within(&mut self, wait: Duration) -> Option<Option<Value>> {
        let mut data = String::new();
        loop {
            match self.next_line(wait).await? {
                None if data.is_empty() => return Some(None),
                None => break,
                Some(line) if line.is_empty() && !data.is_empty() => break,
                Some(line) => {
                    if let Some(d) = line.strip_prefix("data:") {
                        data.push_str(d.trim_start());
                    }
                }
            }
        }
        Some(Some(serde_json::from_str(&data).unwrap_or_else(|e| {
            panic!("an SSE event that is not JSON ({e}): {data}")
        })))
    }

    /// The next event (the test fails when none comes in time); `None`:
    /// the stream ended.
    async fn next(&mut self) -> Option<Value> {
        assert!(
            self.lines.is_some(),
            "not a stream (HTTP {}): {:?}",
            self.status,
            self.body
        );
        self.next_within(WAIT)
            .await
            .expect("an event or the end of the stream in time")
    }

    /// Every event until the stream ends (asserted to end in time).
    async fn rest(&mut self) -> Vec<Value> {
        let mut events = Vec::new();
        while let Some(e) = self.next().await {
            events.push(e);
        }
        events
    }
}

async fn head_line(lines: &mut tokio::io::Lines<BufReader<TcpStream>>) -> Option<String> {
    tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("the response's head in time")
        .unwrap_or(None)
}
