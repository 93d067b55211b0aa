//! What an A2A agent answers to a call, as our [`Update`]s and
//! [`Outcome`] (pure; `super` reads the bytes, `super::message` asks).
//!
//! Answers are read in either wire shape, whatever was asked: 1.0 (results
//! wrapped as `{"task"|"message"|"statusUpdate"|"artifactUpdate": …}`, a
//! bare Task from `GetTask`/`CancelTask`, `TASK_STATE_WORKING`) and 0.3
//! (results told apart by `kind`, `working`), so an agent that mixes them
//! is still understood.
//!
//! The mapping:
//! - a status update `submitted`/`working` (or an unknown state) →
//!   `Update::Progress({"state", "message"})` (a Task snapshot of a running
//!   task → nothing); each artifact part → `Update::Chunk`;
//! - `completed` → `Completed(`the artifacts' text, a lone data
//!   artifact's value, or `{"artifacts": […]}`; without artifacts the
//!   status message's`)`; a `Message` answer → `Completed(`its text/data`)`;
//! - `failed`/`rejected` → `Failed({"error": message text, "state"})`;
//!   `canceled` → `Cancelled`;
//! - `input-required`/`auth-required` → `Completed({"state", "message",
//!   "taskId", "contextId"})`: the consumer answers by invoking the action
//!   again with `{"taskId", "contextId", "input"}`.

use serde_json::{json, Map, Value};

use super::parts::{self, parts_of, Part};
use crate::imports::upstream::{Outcome, Update, UpstreamError};

/// One result read: what it brings.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Updates(Vec<Update>),
    Done(Outcome),
}

/// The task as the answers tell it, across one call's events.
#[derive(Debug)]
pub struct Tracker {
    task_id: Option<String>,
    context_id: Option<String>,
    /// `(artifactId, name, parts)`, appended chunks joined.
    artifacts: Vec<(String, Option<String>, Vec<Value>)>,
    kept: usize,
    max_bytes: usize,
}

impl Tracker {
    /// `max_bytes` bounds the artifacts kept for the final output.
    pub fn new(max_bytes: usize) -> Tracker {
        Tracker {
            task_id: None,
            context_id: None,
            artifacts: Vec::new(),
            kept: 0,
            max_bytes,
        }
    }

    /// The agent's task, once an answer named it.
    pub fn task_id(&self) -> Option<&str> {
        self.task_id.as_deref()
    }

    /// Reads one result (a stream event, a send's or a `GetTask`'s answer).
    pub fn on_result(&mut self, result: &Value) -> Result<Step, UpstreamError> {
        match kind(result)? {
            Kind::Task(task) => {
                self.learn(task, "id");
                if let Some(artifacts) = task.get("artifacts").and_then(Value::as_array) {
                    self.artifacts.clear();
                    self.kept = 0;
                    for artifact in artifacts {
                        self.keep(artifact, false)?;
                    }
                }
                // A snapshot (the stream's first event, a poll's answer)
                // is no news while the task runs: only its end is.
                match self.on_status(task.get("status"))? {
                    Step::Updates(_) => Ok(Step::Updates(Vec::new())),
                    done => Ok(done),
                }
            }
            Kind::Status(update) => {
                self.learn(update, "taskId");
                self.on_status(update.get("status"))
            }
            Kind::Artifact(update) => {
                self.learn(update, "taskId");
                let append = update
                    .get("append")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let artifact = update.get("artifact");
                self.keep(artifact.unwrap_or(&Value::Null), append)?;
                let chunks = parts_of(artifact).iter().filter_map(parts::chunk).collect();
                Ok(Step::Updates(chunks))
            }
            Kind::Message(message) => {
                let parts = parts_of(Some(message));
                if self.task_id.is_some() {
                    // A message within a task is news of it, not the answer.
                    let text = parts::text_of(&parts, "\n");
                    return Ok(Step::Updates(vec![progress("working", text)]));
                }
                Ok(Step::Done(Outcome::Completed(parts::message_value(&parts))))
            }
        }
    }

    fn learn(&mut self, holder: &Value, id_key: &str) {
        if let Some(id) = holder.get(id_key).and_then(Value::as_str) {
            self.task_id = Some(id.to_owned());
        }
        if let Some(id) = holder.get("contextId").and_then(Value::as_str) {
            self.context_id = Some(id.to_owned());
        }
    }

    fn keep(&mut self, artifact: &Value, append: bool) -> Result<(), UpstreamError> {
        let id = artifact
            .get("artifactId")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let new_parts = artifact
            .get("parts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // What the final output will hold: bounded like any one message.
        self.kept += new_parts.iter().map(|p| p.to_string().len()).sum::<usize>();
        if self.kept > self.max_bytes {
            return Err(UpstreamError::TooLarge(self.max_bytes));
        }
        match self.artifacts.iter_mut().find(|(known, _, _)| known == id) {
            Some((_, _, parts)) if append => parts.extend(new_parts),
            Some((_, _, parts)) => *parts = new_parts,
            None => {
                let name = artifact
                    .get("name")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                self.artifacts.push((id.to_owned(), name, new_parts));
            }
        }
        Ok(())
    }

    fn on_status(&self, status: Option<&Value>) -> Result<Step, UpstreamError> {
        let Some(status) = status else {
            return Err(UpstreamError::Malformed(
                "a task or status update without a status".into(),
            ));
        };
        let state = state_name(
            status
                .get("state")
                .and_then(Value::as_str)
                .unwrap_or("unknown"),
        );
        let message = status.get("message");
        let parts = parts_of(message);
        let text = parts::text_of(&parts, "\n");
        let outcome = match state.as_str() {
            "completed" => Outcome::Completed(self.output(&parts)),
            "failed" | "rejected" => {
                let default = format!("the agent's task ended {state}");
                Outcome::Failed(json!({ "error": text.unwrap_or(default), "state": state }))
            }
            "canceled" | "cancelled" => Outcome::Cancelled,
            "input-required" | "auth-required" => Outcome::Completed(json!({
                "state": state,
                "message": text,
                "taskId": self.task_id,
                "contextId": self.context_id,
            })),
            _ => return Ok(Step::Updates(vec![progress(&state, text)])),
        };
        Ok(Step::Done(outcome))
    }

    /// The completed task's output: its artifacts, else its last message.
    fn output(&self, status_parts: &[Part<'_>]) -> Value {
        let all: Vec<Part<'_>> = self
            .artifacts
            .iter()
            .flat_map(|(_, _, ps)| ps.iter().map(parts::part))
            .collect();
        if all.is_empty() {
            return parts::message_value(status_parts);
        }
        if all
            .iter()
            .all(|p| matches!(p.content, parts::Content::Text(_)))
        {
            // Chunks of one artifact are pieces of one text: joined as
            // they came; artifacts apart by a newline.
            let texts: Vec<String> = self
                .artifacts
                .iter()
                .filter(|(_, _, ps)| !ps.is_empty())
                .map(|(_, _, ps)| {
                    parts::text_of(&ps.iter().map(parts::part).collect::<Vec<_>>(), "")
                        .unwrap_or_default()
                })
                .collect();
            return json!(texts.join("\n"));
        }
        if let [Part {
            content: parts::Content::Data(d),
            ..
        }] = all.as_slice()
        {
            return (*d).clone();
        }
        let artifacts: Vec<Value> = self
            .artifacts
            .iter()
            .map(|(id, name, ps)| {
                let parts: Vec<Value> = ps
                    .iter()
                    .map(|p| parts::normalized(&parts::part(p)))
                    .collect();
                json!({ "artifactId": id, "name": name, "parts": parts })
            })
            .collect();
        json!({ "artifacts": artifacts })
    }
}

fn progress(state: &str, message: Option<String>) -> Update {
    let mut out = Map::new();
    out.insert("state".into(), json!(state));
    if let Some(message) = message {
        out.insert("message".into(), json!(message));
    }
    Update::Progress(Value::Object(out))
}

/// `TASK_STATE_INPUT_REQUIRED` (1.0) and `input-required` (0.3) alike.
pub fn state_name(state: &str) -> String {
    let bare = state.strip_prefix("TASK_STATE_").unwrap_or(state);
    bare.to_ascii_lowercase().replace('_', "-")
}

enum Kind<'a> {
    Task(&'a Value),
    Message(&'a Value),
    Status(&'a Value),
    Artifact(&'a Value),
}

/// What a result is: by `kind` (0.3), by its one wrapper member (1.0), or
/// by its members (1.0 `GetTask` and `CancelTask` answer a bare Task).
fn kind(result: &Value) -> Result<Kind<'_>, UpstreamError> {
    let malformed =
        || UpstreamError::Malformed(format!("an A2A result of no known kind: {}", brief(result)));
    if !result.is_object() {
        return Err(malformed());
    }
    match result.get("kind").and_then(Value::as_str) {
        Some("task") => return Ok(Kind::Task(result)),
        Some("message") => return Ok(Kind::Message(result)),
        Some("status-update") => return Ok(Kind::Status(result)),
        Some("artifact-update") => return Ok(Kind::Artifact(result)),
        _ => {}
    }
    let inner = |key: &str| result.get(key).filter(|v| v.is_object());
    if let Some(task) = inner("task") {
        return Ok(Kind::Task(task));
    }
    if let Some(message) = inner("message") {
        return Ok(Kind::Message(message));
    }
    if let Some(update) = inner("statusUpdate") {
        return Ok(Kind::Status(update));
    }
    if let Some(update) = inner("artifactUpdate") {
        return Ok(Kind::Artifact(update));
    }
    if result.get("id").is_some() && result.get("status").is_some() {
        return Ok(Kind::Task(result));
    }
    Err(malformed())
}

/// The start of a value, for an error message.
fn brief(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(120) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
