//! `SendMessage` and `SendStreamingMessage`: a message becomes an
//! `invokeAction` through the router (same authentication, rights and TD
//! checks as the HTTP binding), or continues a task that asked for input.
//! A driver per invocation feeds its statuses to the task store; answers
//! and streams read the store.

use axum::response::Response;
use serde_json::{json, Value};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::errors::{self, CONTENT_TYPE_NOT_SUPPORTED, UNSUPPORTED_OPERATION};
use super::rpc::{answer, status_of, Call};
use super::store::{is_interrupted, is_terminal, state_of, Snapshot, Tasks};
use super::{card, input, tasks};
use crate::gateway::Replies;
use crate::http::jsonrpc::{INTERNAL_ERROR, INVALID_PARAMS};
use crate::http::rpc_io::{self, Offered, SseSender};
use crate::lmos::{Body as Lmos, Message};
use crate::telemetry::metrics;

/// How long a message waits for its invocation's first status before it
/// is answered (streams) or waits on (`SendMessage`): a refusal comes at
/// once, a slow agent does not hold the answer's head back longer.
const FIRST_STATUS: std::time::Duration = std::time::Duration::from_secs(1);

/// What the message asks for, checked.
struct Asked {
    task: String,
    context: String,
    action: String,
    /// The task it continues, if any.
    continues: Option<Snapshot>,
    parts: Vec<Value>,
}

fn history_length(params: &Value) -> Result<Option<u64>, String> {
    match &params["configuration"]["historyLength"] {
        Value::Null => Ok(None),
        v => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| "`configuration.historyLength` must be a non-negative integer".into()),
    }
}

/// The task the message names (or a new one), or the error to answer.
fn asked(call: &Call, message: &Value, params: &Value) -> Result<Asked, Response> {
    let Some(parts) = tasks::parts_v1(message).filter(|p| !p.is_empty()) else {
        return Err(call.error(INVALID_PARAMS, "`message.parts` must be a non-empty array of parts (each one of text, raw, url or data)"));
    };
    if message["messageId"].as_str().is_none_or(str::is_empty) {
        return Err(call.error(INVALID_PARAMS, "`message.messageId` (a string) is required"));
    }
    let Some(td) = super::agent_td(&call.state, &call.principal, &call.thing) else {
        return Err(call.no_agent());
    };
    let given_context = message["contextId"].as_str().filter(|c| !c.is_empty());
    if let Some(task) = message["taskId"].as_str().filter(|t| !t.is_empty()) {
        let Some(snap) = call.state.a2a.tasks.get(&call.owner(), task) else {
            return Err(call.not_found(task));
        };
        let context = snap.task["contextId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if given_context.is_some_and(|c| c != context) {
            let text = format!("`contextId` does not match the context of task `{task}`");
            return Err(call.error_with(INVALID_PARAMS, &text, &[("taskId", task)]));
        }
        let state = state_of(&snap.task);
        if !is_interrupted(state) {
            let text = if is_terminal(state) {
                format!(
                    "Task `{task}` is in a terminal state ({state}) and takes no more messages."
                )
            } else {
                format!(
                    "Task `{task}` is still working ({state}); send again when it asks for input."
                )
            };
            return Err(call.error_with(UNSUPPORTED_OPERATION, &text, &[("taskId", task)]));
        }
        return Ok(Asked {
            task: task.to_owned(),
            context,
            action: snap.action.clone(),
            continues: Some(snap),
            parts,
        });
    }
    let metadata = [&message["metadata"], &params["metadata"]];
    let action = card::chosen_skill(&td, &metadata)
        .map_err(|text| call.error(INVALID_PARAMS, &text))?
        .to_owned();
    Ok(Asked {
        task: Uuid::new_v4().to_string(),
        context: given_context.map_or_else(|| Uuid::new_v4().to_string(), str::to_owned),
        action,
        continues: None,
        parts,
    })
}

/// The `a2a` member the agent gets beside `input` (docs/agent-protocols.md).
fn a2a_member(message: &Value, asked: &Asked) -> Value {
    let mut a2a = json!({"messageId": message["messageId"], "contextId": asked.context,
        "taskId": asked.task, "parts": asked.parts});
    for key in ["referenceTaskIds", "metadata"] {
        if let Some(v) = message.get(key) {
            a2a[key] = v.clone();
        }
    }
    a2a
}

/// What a message is checked for before anything happens: the task it
/// names or starts, and the input its parts make.
fn checked(call: &Call, params: &Value) -> Result<(Asked, Option<Value>), Response> {
    let message = &params["message"];
    if !message.is_object() {
        return Err(call.error(INVALID_PARAMS, "`message` (an object) is required"));
    }
    let configuration = &params["configuration"];
    if configuration.get("taskPushNotificationConfig").is_some()
        || configuration.get("pushNotificationConfig").is_some()
    {
        return Err(call.error(errors::PUSH_NOT_SUPPORTED, "Push notifications are not supported by this agent (capabilities.pushNotifications: false)."));
    }
    let asked = asked(call, message, params)?;
    let action = super::agent_td(&call.state, &call.principal, &call.thing)
        .map(|td| td["actions"][&asked.action].clone())
        .unwrap_or_default();
    if let Err(why) = input::check_media_types(&asked.parts, &card::input_modes(&action)) {
        return Err(call.error(CONTENT_TYPE_NOT_SUPPORTED, &why.to_string()));
    }
    match input::input(&asked.parts, action.get("input")) {
        Ok(input) => Ok((asked, input)),
        Err(why) => Err(call.error(CONTENT_TYPE_NOT_SUPPORTED, &why.to_string())),
    }
}

/// Keeps the new task (or records the continued one's message) before the
/// agent is asked, so a full store refuses before the agent does anything.
/// The task as it stands, and its events from now on.
fn keep(
    call: &Call,
    asked: &Asked,
    message: &Value,
    invocation: &str,
) -> Result<(Value, broadcast::Receiver<Value>), Response> {
    let store = &call.state.a2a.tasks;
    let user = tasks::user_message(message, asked.parts.clone(), &asked.task, &asked.context);
    if asked.continues.is_none() {
        let task = tasks::new_task(&asked.task, &asked.context, user);
        return match store.insert(call.owner(), &asked.action, invocation, task.clone()) {
            Ok(rx) => Ok((task, rx)),
            Err(full) => Err(call.error(INTERNAL_ERROR, &full.to_string())),
        };
    }
    store.set_invocation(&asked.task, invocation);
    store.update(&asked.task, |t| tasks::continued(t, user));
    match store.subscribe(&call.owner(), &asked.task) {
        Some((s, rx)) => Ok((s.task, rx)),
        None => Err(call.not_found(&asked.task)),
    }
}

/// The invokeAction, sent; its replies and the first of them (a refusal
/// is answered as the protocol's error, not as a task).
async fn invoke(call: &Call, asked: &Asked, m: Message) -> Result<(Replies, Value), Response> {
    let store = &call.state.a2a.tasks;
    let asking = call
        .state
        .gateway
        .request_via(metrics::A2A, &call.principal, m);
    let mut replies = match asking.await {
        Ok(r) => r,
        Err(p) => {
            forget_new(store, asked);
            return Err(call.problem(&p));
        }
    };
    // The first status that says more than `pending`, so an agent that
    // answers with a Message is seen before the answer starts.
    let deadline = tokio::time::Instant::now() + FIRST_STATUS;
    let first = loop {
        match tokio::time::timeout_at(deadline, replies.next()).await {
            Ok(Some(r)) if r["status"] == "pending" => continue,
            Ok(Some(first)) => break first,
            Ok(None) => return Err(call.error(INTERNAL_ERROR, "The sidecar is shutting down.")),
            Err(_) => break json!({"status": "pending"}),
        }
    };
    // Refused before the agent saw it (a bad input, no agent, a quota).
    if first["messageType"] == "error" {
        forget_new(store, asked);
        return Err(call.refused(status_of(&first), &tasks::error_text(&first)));
    }
    Ok((replies, first))
}

pub(super) async fn send(call: Call, params: &Value, streaming: bool) -> Response {
    let history = match history_length(params) {
        Ok(h) => h,
        Err(text) => return call.error(INVALID_PARAMS, &text),
    };
    let (asked, input) = match checked(&call, params) {
        Ok(c) => c,
        Err(response) => return response,
    };
    let message = &params["message"];
    let invocation = match &asked.continues {
        Some(_) => format!("{}~{}", asked.task, Uuid::new_v4()),
        None => asked.task.clone(),
    };
    let (snapshot, events) = match keep(&call, &asked, message, &invocation) {
        Ok(k) => k,
        Err(response) => return response,
    };
    let action = asked.action.clone();
    let mut m = Message::new(call.thing.clone(), Lmos::InvokeAction { action, input });
    m.correlation_id = Some(invocation);
    m.traceparent = call.traceparent.clone();
    m.tracestate = call.tracestate.clone();
    m.extra.insert("a2a".into(), a2a_member(message, &asked));
    if streaming {
        m.extra.insert("stream".into(), true.into());
    }
    let (replies, first) = match invoke(&call, &asked, m).await {
        Ok(r) => r,
        Err(response) => return response,
    };
    if let Some(direct) = tasks::direct_message(&first, &asked.context) {
        forget_new(&call.state.a2a.tasks, &asked);
        return message_answer(call, direct, streaming);
    }
    let a2a = call.state.a2a.clone();
    let (task_id, action) = (asked.task.clone(), asked.action.clone());
    tokio::spawn(async move { drive(&a2a.tasks, &task_id, &action, first, replies).await });
    if streaming {
        let (sse, response) = rpc_io::sse(call.state.mcp.streams());
        let start = json!({"task": snapshot});
        tokio::spawn(async move { stream(call, start, events, sse).await });
        return response;
    }
    let configuration = &params["configuration"];
    let at_once = configuration["returnImmediately"] == true || configuration["blocking"] == false;
    let deadline = tokio::time::Instant::now() + call.state.request_timeout;
    wait(events, at_once, deadline).await;
    let task = call
        .state
        .a2a
        .tasks
        .get(&call.owner(), &asked.task)
        .map_or(snapshot, |s| s.task);
    let task = call.task_out(tasks::view(&task, history, true));
    let result = match call.dialect {
        tasks::Dialect::V1 => json!({"task": task}),
        tasks::Dialect::V03 => task,
    };
    answer(call.result(result))
}

/// The agent's direct Message: the result, or a stream of that one event.
fn message_answer(call: Call, message: Value, streaming: bool) -> Response {
    let out = match call.dialect {
        tasks::Dialect::V1 => json!({"message": message}),
        tasks::Dialect::V03 => super::v03::message(&message),
    };
    if !streaming {
        return answer(call.result(out));
    }
    let (sse, response) = rpc_io::sse(call.state.mcp.streams());
    sse.send(&call.result(out));
    response
}

/// Undoes what a refused message did to the store: a new task is
/// forgotten, a continued one waits for its client again.
fn forget_new(store: &Tasks, asked: &Asked) {
    match &asked.continues {
        None => store.remove(&asked.task),
        Some(before) => {
            let status = before.task["status"].clone();
            store.update(&asked.task, |t| {
                t["status"] = status;
                Vec::new()
            });
        }
    }
}

/// Until the task ends or waits for its client, or the deadline.
async fn wait(
    mut events: broadcast::Receiver<Value>,
    at_once: bool,
    deadline: tokio::time::Instant,
) {
    if at_once {
        return;
    }
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(event)) if tasks::settles(&event) => return,
            Ok(Ok(_) | Err(broadcast::error::RecvError::Lagged(_))) => {}
            // The driver ended, or longer than requests.timeout_ms: the
            // task as it stands; GetTask follows it.
            Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => return,
        }
    }
}

/// Feeds the invocation's statuses to the store until it ends.
async fn drive(store: &Tasks, task: &str, action: &str, first: Value, mut replies: Replies) {
    let mut next = Some(first);
    loop {
        let reply = match next.take() {
            Some(r) => r,
            None => match replies.next().await {
                Some(r) => r,
                None => return,
            },
        };
        if !store.update(task, |t| tasks::apply(t, &reply, action)) {
            return;
        }
        let ended = reply["messageType"] == "error"
            || crate::lmos::is_terminal(reply["status"].as_str().unwrap_or_default());
        if ended {
            return;
        }
    }
}

/// The task, then its events until it ends or waits for its client. A
/// client that falls `mcp.max_stream_queue_bytes` behind loses `WORKING`
/// updates; one that loses a chunk loses the stream (it ends; `GetTask`
/// still answers), never a chunk silently.
pub(super) async fn stream(
    call: Call,
    start: Value,
    mut events: broadcast::Receiver<Value>,
    sse: SseSender,
) {
    if !sse.send(&call.result(call.event_out(&start))) {
        return;
    }
    if is_terminal(state_of(&start["task"])) {
        return;
    }
    loop {
        let event = match events.recv().await {
            Ok(e) => e,
            Err(broadcast::error::RecvError::Lagged(_)) => {
                call.state
                    .metrics
                    .limit_hit(metrics::A2A, "max_stream_queue_bytes");
                return;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let out = call.result(call.event_out(&event));
        if tasks::ends_stream(&event) {
            sse.send(&out);
            return;
        }
        let lossy = event.get("statusUpdate").is_some();
        match sse.offer(&out) {
            Offered::Queued => {}
            Offered::Gone => return,
            Offered::OverBudget => {
                call.state
                    .metrics
                    .limit_hit(metrics::A2A, "max_stream_queue_bytes");
                if !lossy {
                    return;
                }
            }
        }
    }
}
