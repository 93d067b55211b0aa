//! LMOS invocations as A2A tasks, in A2A 1.0's JSON (and 0.3's, for a
//! client that called with 0.3's method names). No I/O.
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
//! The task id is the invocation: `{action}~{uuid}`, the invokeAction's
//! correlation ID, so `GetTask` and `CancelTask` name the action to the
//! router without the sidecar keeping a table of tasks.

use serde_json::{json, Value};

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
    Cancel,
}

pub fn method(name: &str) -> Option<(Method, Dialect)> {
    Some(match name {
        "SendMessage" => (Method::Send, Dialect::V1),
        "SendStreamingMessage" => (Method::Stream, Dialect::V1),
        "GetTask" => (Method::Get, Dialect::V1),
        "CancelTask" => (Method::Cancel, Dialect::V1),
        "message/send" => (Method::Send, Dialect::V03),
        "message/stream" => (Method::Stream, Dialect::V03),
        "tasks/get" => (Method::Get, Dialect::V03),
        "tasks/cancel" => (Method::Cancel, Dialect::V03),
        _ => return None,
    })
}

pub const TASK_NOT_FOUND: i64 = -32001;
pub const TASK_NOT_CANCELABLE: i64 = -32002;

/// A new task id for `action`.
pub fn task_id(action: &str) -> String {
    format!("{action}~{}", uuid::Uuid::new_v4())
}

/// The action a task id names.
pub fn action_of(task: &str) -> Option<&str> {
    task.rsplit_once('~')
        .map(|(action, _)| action)
        .filter(|a| !a.is_empty())
}

fn state(status: &str, d: Dialect) -> &'static str {
    let (v1, v03) = match status {
        "pending" => ("TASK_STATE_SUBMITTED", "submitted"),
        "completed" => ("TASK_STATE_COMPLETED", "completed"),
        "failed" | "error" => ("TASK_STATE_FAILED", "failed"),
        "cancelled" | "canceled" => ("TASK_STATE_CANCELED", "canceled"),
        _ => ("TASK_STATE_WORKING", "working"),
    };
    if d == Dialect::V1 {
        v1
    } else {
        v03
    }
}

/// One part: text for a string, data for any other JSON.
pub fn part(value: &Value, d: Dialect) -> Value {
    match (value, d) {
        (Value::String(s), Dialect::V1) => json!({"text": s}),
        (Value::String(s), Dialect::V03) => json!({"kind": "text", "text": s}),
        (v, Dialect::V1) => json!({"data": v}),
        (v, Dialect::V03) => json!({"kind": "data", "data": v}),
    }
}

/// A message from the agent.
fn agent_message(value: &Value, task: &str, context: &str, d: Dialect) -> Value {
    let mut m = json!({
        "messageId": uuid::Uuid::new_v4().to_string(),
        "taskId": task,
        "contextId": context,
        "role": if d == Dialect::V1 { "ROLE_AGENT" } else { "agent" },
        "parts": [part(value, d)],
    });
    if d == Dialect::V03 {
        m["kind"] = "message".into();
    }
    m
}

/// What a status (or an LMOS `error`) says, as its task status.
pub fn status(reply: &Value, task: &str, context: &str, d: Dialect) -> Value {
    let lmos = if reply["messageType"] == "error" {
        "error"
    } else {
        reply["status"].as_str().unwrap_or("running")
    };
    let mut s = json!({"state": state(lmos, d), "timestamp": crate::lmos::now_timestamp()});
    let said = match lmos {
        "error" => Some(Value::String(error_text(reply))),
        "completed" => None,
        _ => reply.get("output").cloned(),
    };
    if let Some(said) = said {
        s["message"] = agent_message(&said, task, context, d);
    }
    s
}

pub fn error_text(error: &Value) -> String {
    let title = error["title"].as_str().unwrap_or("Error");
    match error["detail"].as_str() {
        Some(detail) => format!("{title}: {detail}"),
        None => title.to_owned(),
    }
}

/// The completed output as the task's artifact.
pub fn output_artifact(output: &Value, action: &str, d: Dialect) -> Value {
    json!({"artifactId": "output", "name": action, "parts": [part(output, d)]})
}

/// The task as it stands after `reply`.
pub fn task(reply: &Value, task_id: &str, context: &str, d: Dialect) -> Value {
    let mut t = json!({
        "id": task_id,
        "contextId": context,
        "status": status(reply, task_id, context, d),
    });
    if reply["status"] == "completed" {
        if let Some(output) = reply.get("output") {
            let action = action_of(task_id).unwrap_or("output");
            t["artifacts"] = json!([output_artifact(output, action, d)]);
        }
    }
    if d == Dialect::V03 {
        t["kind"] = "task".into();
    }
    t
}

/// `SendMessage`'s result: the task (wrapped in 1.0, bare in 0.3).
pub fn send_result(task: Value, d: Dialect) -> Value {
    match d {
        Dialect::V1 => json!({"task": task}),
        Dialect::V03 => task,
    }
}

/// A stream event: a status update.
pub fn status_update(reply: &Value, task: &str, context: &str, d: Dialect) -> Value {
    let s = status(reply, task, context, d);
    let final_ = crate::lmos::is_terminal(reply["status"].as_str().unwrap_or_default())
        || reply["messageType"] == "error";
    match d {
        Dialect::V1 => json!({"statusUpdate": {"taskId": task, "contextId": context, "status": s}}),
        Dialect::V03 => {
            json!({"kind": "status-update", "taskId": task, "contextId": context, "status": s, "final": final_})
        }
    }
}

/// A stream event: an artifact update.
pub fn artifact_update(
    artifact: Value,
    append: bool,
    last: bool,
    task: &str,
    context: &str,
    d: Dialect,
) -> Value {
    let event = json!({"taskId": task, "contextId": context, "artifact": artifact, "append": append, "lastChunk": last});
    match d {
        Dialect::V1 => json!({"artifactUpdate": event}),
        Dialect::V03 => {
            let mut e = event;
            e["kind"] = "artifact-update".into();
            e
        }
    }
}

/// A streamed chunk as a piece of the `stream` artifact.
pub fn chunk_artifact(chunk: &Value, action: &str, d: Dialect) -> Value {
    json!({"artifactId": "stream", "name": format!("{action} (streamed)"), "parts": [part(&chunk["data"], d)]})
}

/// The LMOS input a message's parts carry: its data part (an object is
/// the input, or is merged with the text), and its text part in the
/// member `text_member` names, or as the whole input for a string input.
pub fn input(
    message: &Value,
    input_schema: Option<&Value>,
    text_member: Option<&str>,
) -> Option<Value> {
    let parts = message["parts"].as_array()?;
    let data = parts
        .iter()
        .find_map(|p| p.get("data").filter(|_| p["kind"] != "text"));
    let text: Option<String> = {
        let texts: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
        (!texts.is_empty()).then(|| texts.join("\n"))
    };
    match (data, text, input_schema) {
        (_, Some(t), Some(s)) if s["type"] == "string" => Some(Value::String(t)),
        (Some(Value::Object(d)), Some(t), _) => {
            let mut d = d.clone();
            if let Some(member) = text_member {
                d.entry(member.to_owned()).or_insert(Value::String(t));
            }
            Some(Value::Object(d))
        }
        (Some(d), _, _) => Some(d.clone()),
        (None, Some(t), _) => match text_member {
            Some(member) => Some(json!({member: t})),
            None => Some(Value::String(t)),
        },
        (None, None, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_become_task_states_in_either_dialect() {
        let done = json!({"status": "completed", "output": "Sunny."});
        let t = task(&done, "getWeather~1", "c", Dialect::V1);
        assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED");
        assert_eq!(t["artifacts"][0]["parts"][0]["text"], "Sunny.");
        let t = task(&done, "getWeather~1", "c", Dialect::V03);
        assert_eq!(
            (t["kind"].clone(), t["status"]["state"].clone()),
            (json!("task"), json!("completed"))
        );
        let working = json!({"status": "running", "output": {"progress": "..."}});
        let u = status_update(&working, "t", "c", Dialect::V1);
        assert_eq!(u["statusUpdate"]["status"]["state"], "TASK_STATE_WORKING");
        assert_eq!(
            u["statusUpdate"]["status"]["message"]["parts"][0]["data"]["progress"],
            "..."
        );
        let error = json!({"messageType": "error", "title": "Bad", "detail": "no"});
        assert_eq!(status(&error, "t", "c", Dialect::V03)["state"], "failed");
        assert_eq!(action_of("get~Weather~0f"), Some("get~Weather"));
        assert_eq!(method("tasks/cancel"), Some((Method::Cancel, Dialect::V03)));
    }

    #[test]
    fn parts_become_the_action_s_input() {
        let schema = json!({"type": "object", "properties": {"question": {"type": "string"}}});
        let text = json!({"parts": [{"text": "Rain in Oslo?"}]});
        assert_eq!(
            input(&text, Some(&schema), Some("question")),
            Some(json!({"question": "Rain in Oslo?"}))
        );
        let both = json!({"parts": [{"kind": "text", "text": "q"}, {"kind": "data", "data": {"interactionMode": "text"}}]});
        assert_eq!(
            input(&both, Some(&schema), Some("question")),
            Some(json!({"interactionMode": "text", "question": "q"}))
        );
        assert_eq!(input(&json!({"parts": []}), None, None), None);
        let string = json!({"type": "string"});
        assert_eq!(
            input(&text, Some(&string), None),
            Some(json!("Rain in Oslo?"))
        );
    }
}
