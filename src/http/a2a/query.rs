//! `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask` and
//! `GetExtendedAgentCard`: read from the task store, which holds only
//! the caller's own tasks on Things it may see.

use axum::response::Response;
use base64::Engine;
use serde_json::{json, Value};

use super::errors::{TASK_NOT_CANCELABLE, UNSUPPORTED_OPERATION};
use super::rpc::{answer, status_of, Call};
use super::store::{is_interrupted, is_terminal, state_of, Snapshot};
use super::{send, tasks};
use crate::http::jsonrpc::{INTERNAL_ERROR, INVALID_PARAMS};
use crate::http::rpc_io;
use crate::lmos::{Body as Lmos, Message};
use crate::telemetry::metrics;

const DEFAULT_PAGE: u64 = 50;
const MAX_PAGE: u64 = 100;

/// The task id the params name (1.0 `id`, or a resource `name`).
fn task_id(params: &Value) -> Option<&str> {
    params["id"]
        .as_str()
        .or_else(|| params["name"].as_str()?.rsplit('/').next())
        .filter(|id| !id.is_empty())
}

fn optional_u64(params: &Value, name: &str) -> Result<Option<u64>, String> {
    match &params[name] {
        Value::Null => Ok(None),
        v => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{name}` must be a non-negative integer")),
    }
}

/// The caller's task the params name, or the answer to give.
fn named(call: &Call, params: &Value) -> Result<Snapshot, Response> {
    let Some(id) = task_id(params) else {
        return Err(call.error(INVALID_PARAMS, "`id` (the task's id) is required"));
    };
    // A Thing the caller may not see has no tasks for it.
    if super::agent_td(&call.state, &call.principal, &call.thing).is_none() {
        return Err(call.not_found(id));
    }
    call.state
        .a2a
        .tasks
        .get(&call.owner(), id)
        .ok_or_else(|| call.not_found(id))
}

pub(super) async fn get(call: Call, params: &Value) -> Response {
    let history = match optional_u64(params, "historyLength") {
        Ok(h) => h,
        Err(text) => return call.error(INVALID_PARAMS, &text),
    };
    let task = match named(&call, params) {
        Ok(snap) => snap.task,
        // Forgotten here (a restart): the invocation records may know it.
        Err(response) => match task_id(params) {
            Some(id) => match super::recover::recovered(&call, id).await {
                Some(task) => task,
                None => return response,
            },
            None => return response,
        },
    };
    answer(call.result(call.task_out(tasks::view(&task, history, true))))
}

fn page_token(seq: u64) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(seq.to_string())
}

fn read_token(token: &str) -> Option<u64> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()?;
    String::from_utf8(bytes).ok()?.parse().ok()
}

const STATES: [&str; 8] = [
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
];

/// ListTasks' filters, checked.
struct Filter {
    context: Option<String>,
    status: Option<String>,
    after: Option<chrono::DateTime<chrono::FixedOffset>>,
    size: u64,
    before_seq: Option<u64>,
    history: Option<u64>,
    artifacts: bool,
}

fn filter(params: &Value) -> Result<Filter, String> {
    let size = optional_u64(params, "pageSize")?.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&size) {
        return Err(format!("`pageSize` must be between 1 and {MAX_PAGE}"));
    }
    let status = match &params["status"] {
        Value::Null => None,
        Value::String(s) if s == "TASK_STATE_UNSPECIFIED" || s.is_empty() => None,
        Value::String(s) if STATES.contains(&s.as_str()) => Some(s.clone()),
        other => return Err(format!("`status` {other} is not a TaskState")),
    };
    let before_seq = match params["pageToken"].as_str().filter(|t| !t.is_empty()) {
        None => None,
        Some(t) => Some(read_token(t).ok_or("`pageToken` is not one this server gave")?),
    };
    let after = match params["statusTimestampAfter"].as_str() {
        None => None,
        Some(t) => Some(
            chrono::DateTime::parse_from_rfc3339(t)
                .map_err(|_| "`statusTimestampAfter` must be an ISO 8601 timestamp")?,
        ),
    };
    Ok(Filter {
        context: params["contextId"]
            .as_str()
            .filter(|c| !c.is_empty())
            .map(str::to_owned),
        status,
        after,
        size,
        before_seq,
        history: optional_u64(params, "historyLength")?,
        artifacts: params["includeArtifacts"] == true,
    })
}

fn matches(f: &Filter, task: &Value) -> bool {
    let context_ok = f.context.as_ref().is_none_or(|c| task["contextId"] == **c);
    let status_ok = f.status.as_ref().is_none_or(|s| state_of(task) == s);
    let after_ok = f.after.is_none_or(|after| {
        task["status"]["timestamp"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .is_some_and(|t| t >= after)
    });
    context_ok && status_ok && after_ok
}

/// `ListTasks`: the caller's tasks on this agent, newest update first,
/// by pages (the token is the position after the last one given).
pub(super) fn list(call: Call, params: &Value) -> Response {
    let f = match filter(params) {
        Ok(f) => f,
        Err(text) => return call.error(INVALID_PARAMS, &text),
    };
    if super::agent_td(&call.state, &call.principal, &call.thing).is_none() {
        return call.no_agent();
    }
    let all: Vec<Snapshot> = call
        .state
        .a2a
        .tasks
        .list(&call.owner())
        .into_iter()
        .filter(|s| matches(&f, &s.task))
        .collect();
    let total = all.len();
    let rest: Vec<&Snapshot> = all
        .iter()
        .filter(|s| f.before_seq.is_none_or(|b| s.seq < b))
        .collect();
    let size = usize::try_from(f.size).unwrap_or(usize::MAX);
    let page = &rest[..rest.len().min(size)];
    let next = match (rest.len() > size, page.last()) {
        (true, Some(last)) => page_token(last.seq),
        _ => String::new(),
    };
    let tasks: Vec<Value> = page
        .iter()
        .map(|s| call.task_out(tasks::view(&s.task, f.history, f.artifacts)))
        .collect();
    answer(call.result(json!({"tasks": tasks, "nextPageToken": next,
        "pageSize": f.size, "totalSize": total})))
}

pub(super) async fn cancel(call: Call, params: &Value) -> Response {
    let snap = match named(&call, params) {
        Ok(s) => s,
        Err(response) => return response,
    };
    let id = snap.task["id"].as_str().unwrap_or_default().to_owned();
    let store = &call.state.a2a.tasks;
    let state = state_of(&snap.task);
    if is_terminal(state) {
        let text = format!("Task cannot be canceled: it already ended ({state}).");
        return call.error_with(TASK_NOT_CANCELABLE, &text, &[("taskId", &id)]);
    }
    // An interrupted task has no invocation running: cancelled here.
    if !is_interrupted(state) {
        if let Err(response) = cancel_invocation(&call, &snap, &id).await {
            return response;
        }
    } else {
        store.update(&id, tasks::cancelled);
    }
    match store.get(&call.owner(), &id) {
        Some(s) if state_of(&s.task) == "TASK_STATE_CANCELED" => {
            answer(call.result(call.task_out(s.task)))
        }
        Some(s) => {
            let text = format!(
                "Task cannot be canceled: it already ended ({}).",
                state_of(&s.task)
            );
            call.error_with(TASK_NOT_CANCELABLE, &text, &[("taskId", &id)])
        }
        None => call.not_found(&id),
    }
}

/// Asks the agent to cancel the running invocation; its `cancelled`
/// status is applied to the task (the driver may apply it too: a final
/// task takes no further status).
async fn cancel_invocation(call: &Call, snap: &Snapshot, id: &str) -> Result<(), Response> {
    let body = Lmos::CancelAction {
        action: snap.action.clone(),
        reason: Some("Cancelled by an A2A client (CancelTask).".into()),
    };
    let mut m = Message::new(call.thing.clone(), body);
    m.correlation_id = Some(snap.invocation.clone());
    m.traceparent = call.traceparent.clone();
    m.tracestate = call.tracestate.clone();
    let asked = call
        .state
        .gateway
        .request_via(metrics::A2A, &call.principal, m)
        .await;
    let mut replies = asked.map_err(|p| call.problem(&p))?;
    match replies.next().await {
        Some(reply) if reply["messageType"] == "error" => {
            if status_of(&reply) == 404 {
                // Ended meanwhile: the store says how.
                return Ok(());
            }
            let text = tasks::error_text(&reply);
            Err(call.error_with(TASK_NOT_CANCELABLE, &text, &[("taskId", id)]))
        }
        Some(reply) => {
            call.state
                .a2a
                .tasks
                .update(id, |t| tasks::apply(t, &reply, &snap.action));
            Ok(())
        }
        None => Err(call.error(INTERNAL_ERROR, "The sidecar is shutting down.")),
    }
}

/// `SubscribeToTask`: the task as it stands, then its events until it
/// ends; a task already final has nothing to stream.
pub(super) fn subscribe(call: Call, params: &Value) -> Response {
    let Some(id) = task_id(params).map(str::to_owned) else {
        return call.error(INVALID_PARAMS, "`id` (the task's id) is required");
    };
    if super::agent_td(&call.state, &call.principal, &call.thing).is_none() {
        return call.not_found(&id);
    }
    let Some((snap, events)) = call.state.a2a.tasks.subscribe(&call.owner(), &id) else {
        return call.not_found(&id);
    };
    let state = state_of(&snap.task);
    if is_terminal(state) {
        let text = format!("Task `{id}` is in a terminal state ({state}): there is nothing to subscribe to; GetTask reads it.");
        return call.error_with(UNSUPPORTED_OPERATION, &text, &[("taskId", &id)]);
    }
    let (sse, response) = rpc_io::sse(call.state.mcp.streams());
    let start = json!({"task": snap.task});
    tokio::spawn(async move { send::stream(call, start, events, sse).await });
    response
}

/// `GetExtendedAgentCard`: with authentication on the port, the card as
/// the authenticated caller may use it; without, not supported.
pub(super) fn extended_card(call: Call) -> Response {
    if call.state.auth.schemes.is_empty() {
        return call.error(UNSUPPORTED_OPERATION, "This agent has no extended Agent Card: the sidecar's HTTP port asks no authentication (capabilities.extendedAgentCard is false).");
    }
    let Some(td) = super::agent_td(&call.state, &call.principal, &call.thing) else {
        return call.no_agent();
    };
    let http = call.state.directory.directory().endpoints().http.clone();
    let card = super::card::card(&call.thing, &td, &http, &call.state.auth.schemes);
    answer(call.result(card))
}
