//! LMOS invocations as A2A tasks, in A2A 1.0's JSON (`v03.rs` converts
//! for a client that called with 0.3's method names). No I/O.
//!
//! | LMOS | A2A |
//! |---|---|
//! | `pending` | SUBMITTED |
//! | `running` (its `output` as the status message) | WORKING |
//! | a streamed chunk | an artifact update (`stream`), appended in order |
//! | `completed` | COMPLETED, the output as the artifact `output` |
//! | `failed`, an `error` | FAILED, why as the status message |
//! | `cancelled` | CANCELED |
//!
//! An agent's status may carry an `a2a` member (docs/agent-protocols.md):
//! its `state` makes a `completed` INPUT_REQUIRED or AUTH_REQUIRED and a
//! `failed` REJECTED, its `message` is the status message, its
//! `artifacts` the task's artifacts.

use serde_json::{json, Map, Value};

use super::store::{is_interrupted, is_terminal, state_of};

/// Which spelling the client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    V1,
    V03,
}

/// What a method name asks for, in either version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Send,
    Stream,
    Get,
    List,
    Cancel,
    Subscribe,
    PushConfig,
    ExtendedCard,
}

pub fn method(name: &str) -> Option<(Method, Dialect)> {
    use Dialect::{V03, V1};
    Some(match name {
        "SendMessage" => (Method::Send, V1),
        "SendStreamingMessage" => (Method::Stream, V1),
        "GetTask" => (Method::Get, V1),
        "ListTasks" => (Method::List, V1),
        "CancelTask" => (Method::Cancel, V1),
        "SubscribeToTask" => (Method::Subscribe, V1),
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => (Method::PushConfig, V1),
        "GetExtendedAgentCard" => (Method::ExtendedCard, V1),
        "message/send" => (Method::Send, V03),
        "message/stream" => (Method::Stream, V03),
        "tasks/get" => (Method::Get, V03),
        "tasks/cancel" => (Method::Cancel, V03),
        "tasks/resubscribe" => (Method::Subscribe, V03),
        "tasks/pushNotificationConfig/set"
        | "tasks/pushNotificationConfig/get"
        | "tasks/pushNotificationConfig/list"
        | "tasks/pushNotificationConfig/delete" => (Method::PushConfig, V03),
        "agent/getAuthenticatedExtendedCard" => (Method::ExtendedCard, V03),
        _ => return None,
    })
}

/// Messages a task keeps in its history; older ones are dropped.
const MAX_HISTORY: usize = 64;
/// Artifacts an agent's `a2a.artifacts` may give one task.
const MAX_ARTIFACTS: usize = 32;

pub fn now() -> String {
    crate::lmos::now_timestamp()
}

/// A part in 1.0's shape, from either version's (0.3: `kind`, `file`).
pub fn part_v1(part: &Value) -> Option<Value> {
    let mut p = part.as_object()?.clone();
    match p.remove("kind").as_ref().and_then(Value::as_str) {
        Some("file") => {
            let file = p.remove("file")?;
            if let Some(bytes) = file.get("bytes") {
                p.insert("raw".into(), bytes.clone());
            } else {
                p.insert("url".into(), file.get("uri")?.clone());
            }
            if let Some(m) = file.get("mimeType") {
                p.insert("mediaType".into(), m.clone());
            }
            if let Some(n) = file.get("name") {
                p.insert("filename".into(), n.clone());
            }
        }
        Some("text" | "data") | None => {}
        Some(_) => return None,
    }
    let content = ["text", "raw", "url", "data"]
        .iter()
        .filter(|k| p.contains_key(**k))
        .count();
    (content == 1).then_some(Value::Object(p))
}

/// A message's parts in 1.0's shape; `None` when one is not a part.
pub fn parts_v1(message: &Value) -> Option<Vec<Value>> {
    message["parts"].as_array()?.iter().map(part_v1).collect()
}

/// The client's message as the task keeps it.
pub fn user_message(message: &Value, parts: Vec<Value>, task: &str, context: &str) -> Value {
    let mut m = json!({
        "messageId": message["messageId"],
        "contextId": context,
        "taskId": task,
        "role": "ROLE_USER",
        "parts": parts,
    });
    for key in ["metadata", "referenceTaskIds", "extensions"] {
        if let Some(v) = message.get(key) {
            m[key] = v.clone();
        }
    }
    m
}

/// A new task, submitted, with the client's message as its history.
pub fn new_task(id: &str, context: &str, message: Value) -> Value {
    json!({
        "id": id,
        "contextId": context,
        "status": {"state": "TASK_STATE_SUBMITTED", "timestamp": now()},
        "history": [message],
    })
}

/// One part: text for a string, data for any other JSON.
pub fn part(value: &Value) -> Value {
    match value {
        Value::String(s) => json!({"text": s}),
        v => json!({"data": v}),
    }
}

/// A stream chunk as a part: binary data (audio, images) a file part of
/// its bytes and media type (0.3 clients read it as `kind: "file"`), the
/// rest as [`part`].
fn chunk_part(chunk: &Value) -> Value {
    if chunk["contentEncoding"] != "base64" {
        return part(&chunk["data"]);
    }
    let mut p = json!({"raw": chunk["data"]});
    if let Some(media) = chunk["contentType"].as_str() {
        p["mediaType"] = media.into();
    }
    p
}

/// A message from the agent: its own `a2a.message` or a value said.
fn agent_message(said: Said, task: &Value) -> Value {
    let mut m = match said {
        Said::Message(m) => m,
        Said::Value(v) => json!({"parts": [part(&v)]}),
    };
    if !m["messageId"].is_string() {
        m["messageId"] = uuid::Uuid::new_v4().to_string().into();
    }
    m["taskId"] = task["id"].clone();
    m["contextId"] = task["contextId"].clone();
    m["role"] = "ROLE_AGENT".into();
    m
}

enum Said {
    Message(Value),
    Value(Value),
}

pub fn error_text(error: &Value) -> String {
    let title = error["title"].as_str().unwrap_or("Error");
    match error["detail"].as_str() {
        Some(detail) => format!("{title}: {detail}"),
        None => title.to_owned(),
    }
}

/// The agent's `a2a.message`, if it is one (parts that are parts).
fn own_message(a2a: &Value) -> Option<Value> {
    let m = a2a.get("message")?.as_object()?;
    let parts = parts_v1(&Value::Object(m.clone()))?;
    let mut kept = Map::new();
    if let Some(id) = m.get("messageId").filter(|v| v.is_string()) {
        kept.insert("messageId".into(), id.clone());
    }
    if let Some(meta) = m.get("metadata").filter(|v| v.is_object()) {
        kept.insert("metadata".into(), meta.clone());
    }
    kept.insert("parts".into(), Value::Array(parts));
    Some(Value::Object(kept))
}

/// The agent's `a2a.artifacts`, those that are artifacts, at most
/// `MAX_ARTIFACTS`.
fn own_artifacts(a2a: &Value) -> Option<Vec<Value>> {
    let given = a2a.get("artifacts")?.as_array()?;
    let artifacts = given
        .iter()
        .take(MAX_ARTIFACTS)
        .enumerate()
        .filter_map(|(i, a)| {
            let parts = parts_v1(a)?;
            let id = a["artifactId"]
                .as_str()
                .map_or_else(|| format!("artifact-{i}"), str::to_owned);
            let mut out = json!({"artifactId": id, "parts": parts});
            for key in ["name", "description", "metadata"] {
                if let Some(v) = a.get(key) {
                    out[key] = v.clone();
                }
            }
            Some(out)
        })
        .collect();
    Some(artifacts)
}

/// The A2A state an LMOS status (or `error`) gives the task.
fn new_state(reply: &Value) -> Option<&'static str> {
    let asked = reply["a2a"]["state"].as_str();
    if reply["messageType"] == "error" {
        return Some("TASK_STATE_FAILED");
    }
    Some(match (reply["status"].as_str()?, asked) {
        ("pending", _) => return None,
        ("completed", Some("input-required")) => "TASK_STATE_INPUT_REQUIRED",
        ("completed", Some("auth-required")) => "TASK_STATE_AUTH_REQUIRED",
        ("completed", _) => "TASK_STATE_COMPLETED",
        ("failed", Some("rejected")) => "TASK_STATE_REJECTED",
        ("failed", _) => "TASK_STATE_FAILED",
        ("cancelled" | "canceled", _) => "TASK_STATE_CANCELED",
        _ => "TASK_STATE_WORKING",
    })
}

fn said(reply: &Value, state: &str) -> Option<Said> {
    if let Some(m) = own_message(&reply["a2a"]) {
        return Some(Said::Message(m));
    }
    if reply["messageType"] == "error" {
        return Some(Said::Value(error_text(reply).into()));
    }
    if state == "TASK_STATE_COMPLETED" || state == "TASK_STATE_CANCELED" {
        return None;
    }
    if let Some(e) = reply.get("error").filter(|e| e.is_object()) {
        return Some(Said::Value(error_text(e).into()));
    }
    reply.get("output").cloned().map(Said::Value)
}

/// A direct answer instead of a task: a `completed` status whose `a2a`
/// says `"state": "message"` with a `message` (A2A lets an agent answer a
/// simple message with a Message; the task is then not kept).
pub fn direct_message(reply: &Value, context: &str) -> Option<Value> {
    let a2a = &reply["a2a"];
    if reply["status"] != "completed" || a2a["state"] != "message" {
        return None;
    }
    let mut m = own_message(a2a)?;
    if !m["messageId"].is_string() {
        m["messageId"] = uuid::Uuid::new_v4().to_string().into();
    }
    m["contextId"] = context.into();
    m["role"] = "ROLE_AGENT".into();
    Some(m)
}

/// The completed output as the task's artifact.
pub fn output_artifact(output: &Value, action: &str) -> Value {
    json!({"artifactId": "output", "name": action, "parts": [part(output)]})
}

fn status_update(task: &Value) -> Value {
    json!({"statusUpdate": {"taskId": task["id"], "contextId": task["contextId"], "status": task["status"]}})
}

pub fn artifact_update(task: &Value, artifact: Value, append: bool, last: bool) -> Value {
    json!({"artifactUpdate": {"taskId": task["id"], "contextId": task["contextId"],
        "artifact": artifact, "append": append, "lastChunk": last}})
}

/// Appends to the history, dropping the oldest past `MAX_HISTORY`.
pub fn remember(task: &mut Value, message: Value) {
    if !task["history"].is_array() {
        task["history"] = json!([]);
    }
    if let Some(h) = task["history"].as_array_mut() {
        h.push(message);
        let over = h.len().saturating_sub(MAX_HISTORY);
        h.drain(..over);
    }
}

fn set_status(task: &mut Value, state: &str, message: Option<Value>) {
    let mut status = json!({"state": state, "timestamp": now()});
    if let Some(m) = message {
        status["message"] = m.clone();
        remember(task, m);
    }
    task["status"] = status;
}

/// The task after `reply`, and the stream events that say so (1.0's
/// `StreamResponse`s).
pub fn apply(task: &mut Value, reply: &Value, action: &str) -> Vec<Value> {
    if is_terminal(state_of(task)) {
        return Vec::new();
    }
    if let Some(chunk) = reply.get("stream").filter(|s| s.get("data").is_some()) {
        let append = chunk["seq"].as_u64().is_some_and(|s| s > 0);
        let piece = json!({"artifactId": "stream", "name": format!("{action} (streamed)"),
            "parts": [chunk_part(chunk)]});
        return vec![artifact_update(task, piece, append, false)];
    }
    let Some(state) = new_state(reply) else {
        return Vec::new();
    };
    let message = said(reply, state).map(|s| agent_message(s, task));
    let mut events = Vec::new();
    // The agent's own artifacts on any status (a working agent may give
    // some before it ends); the output as the artifact when it completes.
    let artifacts = match (own_artifacts(&reply["a2a"]), reply.get("output")) {
        (Some(own), _) => own,
        (None, Some(output)) if state == "TASK_STATE_COMPLETED" => {
            vec![output_artifact(output, action)]
        }
        _ => Vec::new(),
    };
    let last = is_terminal(state) || is_interrupted(state);
    for artifact in artifacts {
        events.push(artifact_update(task, artifact.clone(), false, last));
        keep_artifact(task, artifact);
    }
    set_status(task, state, message);
    events.push(status_update(task));
    events
}

/// A continued task's next message: back to SUBMITTED.
pub fn continued(task: &mut Value, message: Value) -> Vec<Value> {
    remember(task, message);
    set_status(task, "TASK_STATE_SUBMITTED", None);
    vec![status_update(task)]
}

/// Cancelled here (an interrupted task has no invocation running).
pub fn cancelled(task: &mut Value) -> Vec<Value> {
    set_status(task, "TASK_STATE_CANCELED", None);
    vec![status_update(task)]
}

fn keep_artifact(task: &mut Value, artifact: Value) {
    if !task["artifacts"].is_array() {
        task["artifacts"] = json!([]);
    }
    if let Some(all) = task["artifacts"].as_array_mut() {
        all.retain(|a| a["artifactId"] != artifact["artifactId"]);
        all.push(artifact);
    }
}

/// Whether a stream event ends its stream: the task is final or waits for
/// its client's input. A task waiting for authentication keeps the stream
/// (A2A 1.0 AUTH-INTASK-005: credentials come out of band and the task
/// goes on); the task store's expiry (`a2a.task_ttl_ms`) bounds the wait.
pub fn ends_stream(event: &Value) -> bool {
    let state = event["statusUpdate"]["status"]["state"]
        .as_str()
        .unwrap_or_default();
    is_terminal(state) || state == "TASK_STATE_INPUT_REQUIRED"
}

/// Whether a blocking `SendMessage` answers at this event: the task is
/// final or waits for its client (input or authentication).
pub fn settles(event: &Value) -> bool {
    let state = event["statusUpdate"]["status"]["state"]
        .as_str()
        .unwrap_or_default();
    is_terminal(state) || is_interrupted(state)
}

/// The task as a caller asked to see it: at most `history` messages (all
/// when unset, none and no member for 0), artifacts only if `artifacts`.
pub fn view(task: &Value, history: Option<u64>, artifacts: bool) -> Value {
    let mut t = task.clone();
    if let Some(o) = t.as_object_mut() {
        if !artifacts {
            o.remove("artifacts");
        }
        match (history, o.get_mut("history").and_then(Value::as_array_mut)) {
            (Some(0), _) => {
                o.remove("history");
            }
            (Some(n), Some(h)) => {
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                let over = h.len().saturating_sub(n);
                h.drain(..over);
            }
            _ => {}
        }
    }
    t
}

#[cfg(test)]
#[path = "tasks_tests.rs"]
mod tests;
