//! What the scripted agent says for a message, as data: the A2A TCK's
//! scenarios (`scenarios/core_operations.feature`, `scenarios/streaming.feature`
//! of a2aproject/a2a-tck, branch `1.0-dev`) keyed on the message's
//! `messageId` prefix, each turned into LMOS `actionStatus` members with the
//! `a2a` member the face maps (see the module above). No I/O.

use std::time::Duration;

use serde_json::{json, Value};

/// The action every message invokes (the agent's only skill).
pub const ACTION: &str = "tck";

/// One thing the agent does for an invocation.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// An `actionStatus` with these members (besides `action`).
    Status(Value),
    /// Waits before the next step (the long-running scenario).
    Sleep(Duration),
}

/// Between two statuses of a streamed scenario: the statuses arrive as
/// separate events, as an agent working would send them (not asserted on).
const STREAM_STEP: Duration = Duration::from_millis(50);

/// The TCK's `TCK_STREAMING_TIMEOUT` default (seconds): the long-running
/// scenario lasts twice this (docs/SUT_REQUIREMENTS.md).
const DEFAULT_STREAMING_TIMEOUT_S: f64 = 2.0;

fn agent_message(text: &str) -> Value {
    json!({
        "messageId": uuid::Uuid::new_v4().to_string(),
        "role": "ROLE_AGENT",
        "parts": [{"text": text}],
    })
}

fn text_artifact(id: &str, text: &str) -> Value {
    json!({"artifactId": id, "name": id, "parts": [{"text": text}]})
}

/// The file the file scenarios produce: `output.txt`, `text/plain`, the
/// bytes "tck" (base64 `dGNr`, as the TCK's generated agent sends them).
fn file_artifact(id: &str) -> Value {
    json!({"artifactId": id, "name": id, "parts": [
        {"raw": "dGNr", "mediaType": "text/plain", "filename": "output.txt"}
    ]})
}

fn status(status: &str, members: Value) -> Step {
    let mut s = json!({"status": status});
    if let Value::Object(m) = members {
        for (k, v) in m {
            s[k] = v;
        }
    }
    Step::Status(s)
}

/// `completed`, the message as the task status's message.
fn complete_with_message(text: &str) -> Vec<Step> {
    vec![status(
        "completed",
        json!({"a2a": {"message": agent_message(text)}}),
    )]
}

/// `completed` with one artifact; `output` as well, so a face that knows
/// nothing of the `a2a` member still shows the content.
fn complete_with_artifact(artifact: Value, output: Option<Value>) -> Vec<Step> {
    let mut members = json!({"a2a": {"artifacts": [artifact]}});
    if let Some(o) = output {
        members["output"] = o;
    }
    vec![status("completed", members)]
}

/// working, the artifact (on a working status), completed.
fn streamed(artifact: Value) -> Vec<Step> {
    vec![
        status("running", json!({})),
        Step::Sleep(STREAM_STEP),
        status("running", json!({"a2a": {"artifacts": [artifact]}})),
        Step::Sleep(STREAM_STEP),
        status("completed", json!({})),
    ]
}

/// Two chunks of one artifact (LMOS `stream` chunks: the second appends,
/// the `completed` ends the stream), then completed.
fn chunked() -> Vec<Step> {
    let chunk = |seq: u64, data: &str| {
        status(
            "running",
            json!({"stream": {"seq": seq, "data": data, "contentType": "text/plain"}}),
        )
    };
    vec![
        status("running", json!({})),
        chunk(0, "chunk-1 "),
        Step::Sleep(STREAM_STEP),
        chunk(1, "chunk-2"),
        Step::Sleep(STREAM_STEP),
        status(
            "completed",
            json!({"output": "chunk-1 chunk-2", "stream": {"seq": 2, "end": true}}),
        ),
    ]
}

/// A scenario's steps, made when a message starts it.
type Scenario = fn() -> Vec<Step>;

/// The scenario a message starts, by its `messageId`'s prefix (the longest
/// prefix that matches, as the TCK's generated agents test them);
/// `streaming_timeout` is the TCK's `TCK_STREAMING_TIMEOUT`.
pub fn scenario(message_id: &str, streaming_timeout: Duration) -> Vec<Step> {
    let table: [(&str, Scenario); 17] = [
        ("tck-complete-task", || {
            complete_with_message("Hello from TCK")
        }),
        ("tck-artifact-text", || {
            let text = "Generated text content";
            complete_with_artifact(text_artifact("text-artifact", text), Some(json!(text)))
        }),
        ("tck-artifact-file", || {
            complete_with_artifact(file_artifact("file-artifact"), None)
        }),
        ("tck-artifact-file-url", || {
            let artifact = json!({"artifactId": "file-url-artifact", "name": "file-url-artifact", "parts": [
                {"url": "https://example.com/output.txt", "mediaType": "text/plain", "filename": "output.txt"}
            ]});
            complete_with_artifact(artifact, None)
        }),
        ("tck-artifact-data", || {
            let data = json!({"key": "value", "count": 42});
            let artifact = json!({"artifactId": "data-artifact", "name": "data-artifact", "parts": [{"data": data}]});
            complete_with_artifact(artifact, Some(data))
        }),
        ("tck-message-response", || {
            // Answered with a Message, not a Task: `a2a.state: "message"`
            // on the `completed` that follows `pending`.
            vec![status(
                "completed",
                json!({"a2a": {"state": "message", "message": agent_message("Direct message response")}}),
            )]
        }),
        ("tck-input-required", || {
            let ask = "More input is required: send a follow-up message with this taskId.";
            vec![status(
                "completed",
                json!({"a2a": {"state": "input-required", "message": agent_message(ask)}}),
            )]
        }),
        ("tck-auth-required", || {
            // Ours, not the TCK's: in-task authorization (AUTH-INTASK-*).
            let ask = "Authorization required: sign in at https://tck.example/auth, then send a follow-up message with this taskId.";
            vec![status(
                "completed",
                json!({"a2a": {"state": "auth-required", "message": agent_message(ask)}}),
            )]
        }),
        ("tck-reject-task", || {
            vec![status(
                "failed",
                json!({"a2a": {"state": "rejected", "message": agent_message("rejected")}}),
            )]
        }),
        ("tck-stream-001", || {
            streamed(text_artifact("stream-001", "Stream hello from TCK"))
        }),
        ("tck-stream-002", || vec![status("completed", json!({}))]),
        ("tck-stream-003", || {
            streamed(text_artifact("stream-003", "Stream task lifecycle"))
        }),
        ("tck-stream-ordering-001", || {
            streamed(text_artifact("ordered", "Ordered output"))
        }),
        ("tck-stream-artifact-text", || {
            streamed(text_artifact("streamed-text", "Streamed text content"))
        }),
        ("tck-stream-artifact-file", || {
            streamed(file_artifact("streamed-file"))
        }),
        ("tck-stream-artifact-chunked", chunked),
        ("test-resubscribe-message-id", Vec::new),
    ];
    let matched = table
        .iter()
        .filter(|(prefix, _)| message_id.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len());
    match matched {
        Some(("test-resubscribe-message-id", _)) => vec![
            status("running", json!({})),
            Step::Sleep(streaming_timeout * 2),
            status("completed", json!({})),
        ],
        Some((_, steps)) => steps(),
        None => complete_with_message(&format!("Unhandled messageId prefix: {message_id}")),
    }
}

/// `TCK_STREAMING_TIMEOUT` from the environment (seconds), as the TCK and
/// its generated agents read it; 2 s without it.
pub fn streaming_timeout() -> Duration {
    let seconds = std::env::var("TCK_STREAMING_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 600.0)
        .unwrap_or(DEFAULT_STREAMING_TIMEOUT_S);
    Duration::from_secs_f64(seconds)
}

/// Whether the scenario leaves its task interrupted (input- or
/// auth-required): a later `cancelAction` for it is answered `cancelled`.
pub fn interrupts(steps: &[Step]) -> bool {
    steps.iter().any(|s| match s {
        Step::Status(v) => matches!(
            v["a2a"]["state"].as_str(),
            Some("input-required" | "auth-required")
        ),
        Step::Sleep(_) => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(2);

    fn statuses(steps: &[Step]) -> Vec<Value> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Status(v) => Some(v.clone()),
                Step::Sleep(_) => None,
            })
            .collect()
    }

    #[test]
    fn prefixes_choose_the_tck_s_scenarios_longest_first() {
        let done = statuses(&scenario("tck-complete-task-1a2b-jsonrpc", T));
        assert_eq!(done.len(), 1);
        assert_eq!(done[0]["status"], "completed");
        assert_eq!(
            done[0]["a2a"]["message"]["parts"][0]["text"],
            "Hello from TCK"
        );
        let url = statuses(&scenario("tck-artifact-file-url-x", T));
        assert_eq!(
            url[0]["a2a"]["artifacts"][0]["parts"][0]["url"],
            "https://example.com/output.txt"
        );
        let file = statuses(&scenario("tck-artifact-file-x", T));
        assert_eq!(file[0]["a2a"]["artifacts"][0]["parts"][0]["raw"], "dGNr");
        let data = statuses(&scenario("tck-artifact-data-x", T));
        assert_eq!(data[0]["output"], json!({"key": "value", "count": 42}));
        let chunks = statuses(&scenario("tck-stream-artifact-chunked-x", T));
        assert_eq!(chunks[1]["stream"]["data"], "chunk-1 ");
        assert_eq!(chunks[2]["stream"]["seq"], 1);
        let text = statuses(&scenario("tck-stream-artifact-text-x", T));
        assert_eq!(
            text.iter().map(|s| s["status"].clone()).collect::<Vec<_>>(),
            vec![json!("running"), json!("running"), json!("completed")]
        );
    }

    #[test]
    fn interrupted_rejected_and_unknown_messages() {
        let ask = scenario("tck-input-required-9", T);
        assert!(interrupts(&ask));
        assert_eq!(statuses(&ask)[0]["status"], "completed");
        let reject = statuses(&scenario("tck-reject-task-9", T));
        assert_eq!(
            (
                reject[0]["status"].clone(),
                reject[0]["a2a"]["state"].clone()
            ),
            (json!("failed"), json!("rejected"))
        );
        let other = statuses(&scenario("tck-infer-ctx-9", T));
        assert_eq!(
            other[0]["a2a"]["message"]["parts"][0]["text"],
            "Unhandled messageId prefix: tck-infer-ctx-9"
        );
        assert!(!interrupts(&scenario("", T)));
    }

    #[test]
    fn the_resubscribe_task_runs_twice_the_streaming_timeout() {
        let steps = scenario("test-resubscribe-message-id-1", T);
        assert_eq!(steps[1], Step::Sleep(Duration::from_secs(4)));
        assert_eq!(statuses(&steps).last().unwrap()["status"], "completed");
    }
}
