//! The A2A TCK's scripted agent, as an ordinary LMOS agent behind the
//! sidecar: what a2aproject/a2a-tck (branch `1.0-dev`) expects of the
//! agent behind an A2A server, so the TCK (run by hand,
//! `benches/a2a-tck/run-by-hand.sh`) and our own tests of its requirements
//! (`tests/interop/a2a_tck.rs`) reach `/a2a` with an agent that answers as
//! the TCK's generated agents do. `examples/a2a_tck_agent.rs` runs it.
//!
//! It connects to the WebSocket gateway hosting [`THING_ID`], registers
//! its description (an `lmos:Agent` with one action, [`script::ACTION`],
//! whose input a text part fills) and answers every `invokeAction` by the
//! `a2a.messageId` member the face adds (docs/agent-protocols.md, LMOS ↔
//! A2A conventions): `pending`, then the scenario of the TCK's
//! `scenarios/*.feature` that the id's prefix names ([`script::scenario`]):
//!
//! | `messageId` prefix | `actionStatus`es |
//! |---|---|
//! | `tck-complete-task` | `completed`, `a2a.message` "Hello from TCK" |
//! | `tck-artifact-text` / `-file` / `-file-url` / `-data` | `completed`, `a2a.artifacts`: a text / raw file / file URL / data part |
//! | `tck-message-response` | `completed`, `a2a.state: "message"` (answered with a Message, no task), `a2a.message` "Direct message response" |
//! | `tck-input-required` | `completed`, `a2a.state: "input-required"`, `a2a.message` |
//! | `tck-auth-required` (ours, not the TCK's) | `completed`, `a2a.state: "auth-required"`, `a2a.message` saying where to sign in |
//! | `tck-reject-task` | `failed`, `a2a.state: "rejected"`, `a2a.message` "rejected" |
//! | `tck-stream-001`, `-003`, `-ordering-001`, `-artifact-text`, `-artifact-file` | `running`; `running` with `a2a.artifacts` (one artifact); `completed` |
//! | `tck-stream-002` | `completed` |
//! | `tck-stream-artifact-chunked` | `running`; LMOS `stream` chunks "chunk-1 ", "chunk-2"; `completed` |
//! | `test-resubscribe-message-id` | `running`; after 2 × `TCK_STREAMING_TIMEOUT` (2 s): `completed` |
//! | anything else | `completed`, `a2a.message` "Unhandled messageId prefix: …" |
//!
//! A `cancelAction` stops a running scenario (`cancelled`) and also ends a
//! task left input-required (named by its invocation's correlation ID or
//! the `a2a.taskId` it was given): `cancelled` too, whichever way the face
//! asks; anything else is a 404 `error`.

pub mod script;

use std::collections::{HashMap, VecDeque};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use script::{Step, ACTION};

pub const THING_ID: &str = "urn:lmos:test:a2a-tck-agent";

/// Interrupted tasks remembered for a later `cancelAction` (oldest dropped).
const MAX_INTERRUPTED: usize = 1024;

/// The agent's Thing Description.
pub fn thing_description() -> Value {
    json!({
        "@context": ["https://www.w3.org/2022/wot/td/v1.1", {"lmos": "https://eclipse.dev/lmos/protocol/v1"}],
        "@type": "lmos:Agent",
        "id": THING_ID,
        "title": "A2A TCK Agent",
        "description": "Answers as the A2A TCK's scenarios expect, keyed on the message's messageId prefix.",
        "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}},
        "security": "nosec_sc",
        "actions": {ACTION: {
            "title": "TCK Conformance",
            "description": "Handles TCK conformance test messages.",
            "input": {"type": "string"},
            "output": {"type": "string"},
            "forms": [{"href": "https://tck.example/actions/tck", "op": "invokeaction"}]
        }}
    })
}

/// A sidecar on `config` with the agent connected and its TD registered.
pub async fn start_sidecar(config: lmos_sidecar::Config) -> crate::TestSidecar {
    start_sidecar_as(config, None).await.0
}

/// As [`start_sidecar`], the agent connecting with `authorization` (an
/// `Authorization` header value) when the sidecar asks for credentials,
/// and every `invokeAction` the agent gets passed to the receiver (what
/// reached the agent: its `input`, its `a2a` member).
pub async fn start_sidecar_as(
    config: lmos_sidecar::Config,
    authorization: Option<String>,
) -> (crate::TestSidecar, mpsc::UnboundedReceiver<Value>) {
    let (heard, rx) = mpsc::unbounded_channel();
    let sidecar = crate::TestSidecar::start_with(config).await;
    let url = sidecar.ws_url();
    let auth = authorization.clone();
    tokio::spawn(async move { serve(&url, auth.as_deref(), Some(heard)).await });
    crate::wait_for_stats(&sidecar, |s| s.hosted_things == 1).await;
    // Requests are checked against the description once it is registered
    // (read with the agent's own credentials when the port asks for some).
    let path = format!("/things/{THING_ID}");
    let headers: Vec<(&str, &str)> = authorization
        .as_deref()
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    let deadline = tokio::time::Instant::now() + crate::WAIT;
    while crate::http_with(sidecar.http, "GET", &path, &headers, b"")
        .await
        .status
        != 200
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the TCK agent's TD was never registered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    (sidecar, rx)
}

/// Connects to `sidecar` (`ws://…/lmos`), with `authorization` as the
/// `Authorization` header when given (`Bearer …`, `Basic …`), and serves
/// until the sidecar closes the connection.
pub async fn serve(
    sidecar: &str,
    authorization: Option<&str>,
    heard: Option<mpsc::UnboundedSender<Value>>,
) -> Result<(), String> {
    let url = format!("{sidecar}?host={}", crate::urlencode(THING_ID));
    let mut request = url.into_client_request().map_err(|e| e.to_string())?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("lmosprotocol"),
    );
    if let Some(authorization) = authorization {
        let value = HeaderValue::from_str(authorization).map_err(|e| e.to_string())?;
        request.headers_mut().insert("Authorization", value);
    }
    let (socket, _) = tokio_tungstenite::connect_async(request)
        .await
        .map_err(|e| e.to_string())?;
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
    let _ = out.send(thing_description());
    let mut agent = Agent {
        out,
        heard,
        running: HashMap::new(),
        interrupted: VecDeque::new(),
    };
    while let Some(frame) = stream.next().await {
        match frame.map_err(|e| e.to_string())? {
            WsMessage::Text(text) => match serde_json::from_str::<Value>(&text) {
                Ok(m) => agent.handle(&m),
                Err(e) => eprintln!("TCK agent: ignoring a message that is not JSON: {e}."),
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

struct Agent {
    out: mpsc::UnboundedSender<Value>,
    heard: Option<mpsc::UnboundedSender<Value>>,
    /// Scenarios still playing, by their invocation's correlation ID.
    running: HashMap<String, JoinHandle<()>>,
    /// Correlation IDs and A2A task ids of tasks left input-required.
    interrupted: VecDeque<String>,
}

/// An LMOS message from the agent: `members` merged in, the request's
/// correlation and trace context carried over.
fn reply(request: &Value, message_type: &str, members: &Value) -> Value {
    let mut m = json!({
        "thingID": THING_ID,
        "messageID": uuid::Uuid::new_v4().to_string(),
        "messageType": message_type,
    });
    for key in ["correlationID", "traceparent", "tracestate"] {
        if let Some(v) = request.get(key) {
            m[key] = v.clone();
        }
    }
    if let Some(v) = request
        .get("correlationId")
        .filter(|_| m.get("correlationID").is_none())
    {
        m["correlationID"] = v.clone();
    }
    if let Value::Object(members) = members {
        for (k, v) in members {
            m[k] = v.clone();
        }
    }
    m
}

fn not_found(request: &Value, title: &str, detail: String) -> Value {
    reply(
        request,
        "error",
        &json!({
            "type": "https://eclipse.dev/lmos/protocol/v1/errors#tck-agent",
            "title": title,
            "status": "404",
            "detail": detail,
            "instance": format!("urn:uuid:{}", uuid::Uuid::new_v4()),
        }),
    )
}

fn correlation(m: &Value) -> String {
    m.get("correlationID")
        .or(m.get("correlationId"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl Agent {
    fn handle(&mut self, m: &Value) {
        match m["messageType"].as_str().unwrap_or_default() {
            "invokeAction" => self.invoke(m),
            "cancelAction" => self.cancel(m),
            "error" => eprintln!("TCK agent: the sidecar refused something: {}", m["detail"]),
            other => eprintln!("TCK agent: ignoring a `{other}` message."),
        }
    }

    fn invoke(&mut self, m: &Value) {
        if m["action"] != ACTION {
            let detail = format!("The TCK agent has no action {}.", m["action"]);
            let _ = self.out.send(not_found(m, "Unknown action", detail));
            return;
        }
        if let Some(heard) = &self.heard {
            let _ = heard.send(m.clone());
        }
        let message_id = m["a2a"]["messageId"].as_str().unwrap_or_default();
        let steps = script::scenario(message_id, script::streaming_timeout());
        if script::interrupts(&steps) {
            self.remember(correlation(m));
            if let Some(task) = m["a2a"]["taskId"].as_str() {
                self.remember(task.to_owned());
            }
        }
        let (out, request) = (self.out.clone(), m.clone());
        let task = tokio::spawn(async move {
            let status = |members: &Value| {
                let mut s = reply(&request, "actionStatus", members);
                s["action"] = ACTION.into();
                s
            };
            let _ = out.send(status(&json!({"status": "pending"})));
            for step in steps {
                match step {
                    Step::Status(members) => {
                        let _ = out.send(status(&members));
                    }
                    Step::Sleep(d) => tokio::time::sleep(d).await,
                }
            }
        });
        self.running.retain(|_, t| !t.is_finished());
        self.running.insert(correlation(m), task);
    }

    fn remember(&mut self, key: String) {
        if key.is_empty() {
            return;
        }
        if self.interrupted.len() >= MAX_INTERRUPTED {
            self.interrupted.pop_front();
        }
        self.interrupted.push_back(key);
    }

    fn cancel(&mut self, m: &Value) {
        let key = correlation(m);
        let cancelled = json!({"action": ACTION, "status": "cancelled"});
        if let Some(task) = self.running.remove(&key).filter(|t| !t.is_finished()) {
            task.abort();
            let _ = self.out.send(reply(m, "actionStatus", &cancelled));
            return;
        }
        let a2a_task = m["a2a"]["taskId"].as_str().unwrap_or_default();
        let before = self.interrupted.len();
        self.interrupted.retain(|k| *k != key && k != a2a_task);
        if self.interrupted.len() < before {
            let _ = self.out.send(reply(m, "actionStatus", &cancelled));
        } else {
            let detail =
                "No TCK invocation with that correlationID is running or waiting for input."
                    .to_owned();
            let _ = self.out.send(not_found(m, "Unknown invocation", detail));
        }
    }
}
