//! What an invocation's statuses and LMOS errors read as for an MCP
//! client: tool errors and progress messages. No I/O.

use serde_json::{json, Value};

/// A `tools/call` result that is a tool error: the model sees `text`.
pub fn tool_error(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// What an LMOS `error` says, for a tool error.
pub fn error_text(error: &Value) -> String {
    let title = error["title"].as_str().unwrap_or("Error");
    match error["detail"].as_str() {
        Some(detail) => format!("{title}: {detail}"),
        None => title.to_owned(),
    }
}

/// How a finished invocation that did not complete reads, for a tool error.
pub fn ended_text(status: &Value) -> String {
    let ended = status["status"].as_str().unwrap_or("failed");
    let why = match &status["output"] {
        Value::Null => String::new(),
        Value::String(s) => format!(": {s}"),
        Value::Object(o) if o.get("error").is_some_and(Value::is_string) => {
            format!(": {}", o["error"].as_str().unwrap_or_default())
        }
        other => format!(": {other}"),
    };
    format!("The action ended `{ended}`{why}")
}

/// The progress message a `running` status carries: a streamed chunk's
/// text, or its partial output (`output.progress` when that is a string,
/// `output.message` as an imported MCP server's or A2A agent's progress
/// gives it).
pub fn progress_message(status: &Value) -> Option<String> {
    if let Some(stream) = status.get("stream") {
        return match &stream["data"] {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        };
    }
    match status.get("output")? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) if o.get("progress").is_some_and(Value::is_string) => {
            o["progress"].as_str().map(str::to_owned)
        }
        Value::Object(o) if o.get("message").is_some_and(Value::is_string) => {
            o["message"].as_str().map(str::to_owned)
        }
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_progress_and_errors() {
        let running = json!({"status": "running", "output": {"progress": "Looking at the sky..."}});
        assert_eq!(
            progress_message(&running).as_deref(),
            Some("Looking at the sky...")
        );
        let imported = json!({"status": "running", "output": {"progress": 1, "total": 3, "message": "step 1"}});
        assert_eq!(progress_message(&imported).as_deref(), Some("step 1"));
        let chunk = json!({"status": "running", "stream": {"seq": 0, "data": "The "}});
        assert_eq!(progress_message(&chunk).as_deref(), Some("The "));
        let failed = json!({"status": "failed", "output": {"error": "no sky"}});
        assert_eq!(ended_text(&failed), "The action ended `failed`: no sky");
    }
}
