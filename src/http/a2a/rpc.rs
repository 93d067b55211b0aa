//! `POST /a2a/{thingID}`: A2A's JSON-RPC methods on the router.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use uuid::Uuid;

use super::card;
use super::tasks::{self, Dialect, Method, TASK_NOT_CANCELABLE, TASK_NOT_FOUND};
use crate::auth::Principal;
use crate::gateway::Replies;
use crate::http::auth::Caller;
use crate::http::jsonrpc::{self, Incoming};
use crate::http::rpc_io::{self, Offered, SseSender};
use crate::http::HttpState;
use crate::lmos::{Body as Lmos, Message, Problem};
use crate::telemetry::{metrics, RpcInfo};

/// How long a message waits for its invocation's first status before it
/// is answered as submitted (streams) or waits on (`SendMessage`).
const FIRST_STATUS: std::time::Duration = std::time::Duration::from_secs(1);

/// One JSON-RPC call's context.
struct Call {
    state: HttpState,
    principal: Principal,
    thing: String,
    id: Value,
    dialect: Dialect,
    traceparent: Option<String>,
    tracestate: Option<String>,
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn answer(value: Value) -> Response {
    rpc_io::json(StatusCode::OK, &value)
}

impl Call {
    fn error(&self, code: i64, message: &str) -> Response {
        answer(jsonrpc::error(&self.id, code, message, None))
    }

    fn result(&self, result: Value) -> Value {
        jsonrpc::result(&self.id, result)
    }

    /// An LMOS refusal (or `error` reply) as a JSON-RPC error.
    fn refused(&self, status: u16, text: &str, method: Method) -> Response {
        let code = match (status, method) {
            (404, Method::Get | Method::Cancel) => TASK_NOT_FOUND,
            (400 | 404, _) => jsonrpc::INVALID_PARAMS,
            (401 | 403, _) => jsonrpc::INVALID_REQUEST,
            _ => jsonrpc::INTERNAL_ERROR,
        };
        self.error(code, text)
    }

    fn problem(&self, p: &Problem, method: Method) -> Response {
        self.refused(
            p.kind.status(),
            &format!("{}: {}", p.kind.title(), p.detail),
            method,
        )
    }

    async fn ask(&self, body: Lmos, correlation: &str, stream: bool) -> Result<Replies, Problem> {
        let mut m = Message::new(self.thing.clone(), body);
        m.correlation_id = Some(correlation.to_owned());
        m.traceparent = self.traceparent.clone();
        m.tracestate = self.tracestate.clone();
        if stream {
            m.extra.insert("stream".into(), true.into());
        }
        self.state
            .gateway
            .request_via(metrics::A2A, &self.principal, m)
            .await
    }
}

fn status_of(error: &Value) -> u16 {
    match &error["status"] {
        Value::String(s) => s.parse().unwrap_or(502),
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .unwrap_or(502),
        _ => 502,
    }
}

pub async fn rpc(
    State(state): State<HttpState>,
    caller: Caller,
    Path(thing): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let bytes = match rpc_io::read_body(&headers, body, state.mcp.body_limit).await {
        Ok(b) => b,
        Err(refused) => {
            state.metrics.limit_hit(metrics::A2A, "max_message_size");
            return refused;
        }
    };
    let (id, name, params) = match jsonrpc::parse(&bytes) {
        Ok(Incoming::Request { id, method, params }) => (id, method, params),
        Ok(_) => return StatusCode::NO_CONTENT.into_response(),
        Err(malformed) => {
            state.metrics.error("a2a_malformed");
            return answer(malformed.to_value());
        }
    };
    let Some((method, dialect)) = tasks::method(&name) else {
        let text = format!("Method not found: `{name}`");
        return answer(jsonrpc::error(&id, jsonrpc::METHOD_NOT_FOUND, &text, None));
    };
    // The call's SERVER span, parent of the invocation's; it lasts until
    // the answer (for a stream: until the stream starts).
    let tracer = state.gateway.tracer().clone();
    let (incoming, incoming_state) = (
        header(&headers, "traceparent"),
        header(&headers, "tracestate"),
    );
    let span = tracer.begin_rpc(
        incoming.as_deref(),
        incoming_state.as_deref(),
        &format!("{name} {thing}"),
    );
    let (traceparent, tracestate) = match &span {
        Some(s) => (
            Some(s.context.traceparent.clone()),
            s.context.tracestate.clone(),
        ),
        None => (incoming, incoming_state),
    };
    let request_id = id.to_string();
    let call = Call {
        state,
        principal: caller.principal,
        thing: thing.clone(),
        id,
        dialect,
        traceparent,
        tracestate,
    };
    let response = match method {
        Method::Send | Method::Stream => send(call, &params, method).await,
        Method::Get => get(call, &params).await,
        Method::Cancel => cancel(call, &params).await,
    };
    if let Some(span) = &span {
        let info = RpcInfo {
            protocol: "a2a",
            method: &name,
            target: &thing,
            request_id: Some(&request_id),
            session_id: None,
            protocol_version: Some(if dialect == Dialect::V1 { "1.0" } else { "0.3" }),
            client: false,
        };
        tracer.end_rpc(span, &info, None);
    }
    response
}

/// The task the params name, and its action.
fn named_task(params: &Value) -> Option<(String, String)> {
    let id = params["id"]
        .as_str()
        .or_else(|| params["name"].as_str()?.rsplit('/').next())?;
    let action = tasks::action_of(id)?;
    Some((id.to_owned(), action.to_owned()))
}

async fn send(call: Call, params: &Value, method: Method) -> Response {
    let message = &params["message"];
    if !message.is_object() {
        return call.error(jsonrpc::INVALID_PARAMS, "`message` (an object) is required");
    }
    // Unknown and not permitted read alike.
    let Some(td) = super::agent_td(&call.state, &call.principal, &call.thing) else {
        let text = format!(
            "No agent `{}` is registered here for this caller.",
            call.thing
        );
        return call.error(jsonrpc::INVALID_PARAMS, &text);
    };
    let skill = match card::chosen_skill(&td, &[&message["metadata"], &params["metadata"]]) {
        Ok(s) => s.to_owned(),
        Err(text) => return call.error(jsonrpc::INVALID_PARAMS, &text),
    };
    let schema = td["actions"][&skill].get("input");
    let text_member = schema.and_then(card::text_member);
    let input = tasks::input(message, schema, text_member);
    let context = message["contextId"]
        .as_str()
        .map_or_else(|| Uuid::new_v4().to_string(), str::to_owned);
    let task = tasks::task_id(&skill);
    let streaming = method == Method::Stream;
    let body = Lmos::InvokeAction {
        action: skill.clone(),
        input,
    };
    let mut replies = match call.ask(body, &task, streaming).await {
        Ok(r) => r,
        Err(p) => return call.problem(&p, method),
    };
    // A refusal comes at once; an agent slow to say `pending` does not
    // hold the answer's head back longer than this.
    let first = match tokio::time::timeout(FIRST_STATUS, replies.next()).await {
        Ok(Some(first)) => first,
        Ok(None) => return call.error(jsonrpc::INTERNAL_ERROR, "The sidecar is shutting down."),
        Err(_) => json!({"status": "pending"}),
    };
    // Refused before the agent saw it (a bad input, no agent, a quota):
    // the protocol's error, not a task.
    if first["messageType"] == "error" {
        return call.refused(status_of(&first), &tasks::error_text(&first), method);
    }
    if streaming {
        let (sse, response) = rpc_io::sse(call.state.mcp.streams());
        tokio::spawn(async move { stream(call, replies, first, sse, task, context, skill).await });
        return response;
    }
    let configuration = &params["configuration"];
    let at_once = configuration["returnImmediately"] == true || configuration["blocking"] == false;
    let deadline = tokio::time::Instant::now() + call.state.request_timeout;
    let mut latest = first;
    while !at_once && !ended(&latest) {
        match tokio::time::timeout_at(deadline, replies.next()).await {
            Ok(Some(next)) => latest = next,
            Ok(None) => {
                return call.error(jsonrpc::INTERNAL_ERROR, "The sidecar is shutting down.")
            }
            // Longer than requests.timeout_ms: the task as it stands;
            // GetTask follows it.
            Err(_) => break,
        }
    }
    let t = tasks::task(&latest, &task, &context, call.dialect);
    answer(call.result(tasks::send_result(t, call.dialect)))
}

fn ended(reply: &Value) -> bool {
    reply["messageType"] == "error"
        || crate::lmos::is_terminal(reply["status"].as_str().unwrap_or_default())
}

/// `SendStreamingMessage`: the task, then its status and artifact updates
/// as they happen, until it ends. A client that falls `mcp.max_stream_queue_bytes`
/// behind loses `WORKING` updates; one that loses a chunk loses the stream
/// (it ends; `GetTask` still answers), never a chunk silently.
async fn stream(
    call: Call,
    mut replies: Replies,
    first: Value,
    sse: SseSender,
    task: String,
    context: String,
    action: String,
) {
    let d = call.dialect;
    let submitted = tasks::task(&json!({"status": "pending"}), &task, &context, d);
    if !sse.send(&call.result(tasks::send_result(submitted, d))) {
        return;
    }
    let mut next = Some(first);
    loop {
        let reply = match next.take() {
            Some(r) => r,
            None => match replies.next().await {
                Some(r) => r,
                None => return,
            },
        };
        if reply["status"] == "pending" {
            continue;
        }
        if ended(&reply) {
            if let (Some("completed"), Some(output)) =
                (reply["status"].as_str(), reply.get("output"))
            {
                let artifact = tasks::output_artifact(output, &action, d);
                sse.send(&call.result(tasks::artifact_update(
                    artifact, false, true, &task, &context, d,
                )));
            }
            sse.send(&call.result(tasks::status_update(&reply, &task, &context, d)));
            return;
        }
        let (event, lossy) = match reply.get("stream").filter(|s| s.get("data").is_some()) {
            Some(chunk) => {
                let append = chunk["seq"].as_u64().is_some_and(|s| s > 0);
                let piece = tasks::chunk_artifact(chunk, &action, d);
                (
                    tasks::artifact_update(piece, append, false, &task, &context, d),
                    false,
                )
            }
            None => (tasks::status_update(&reply, &task, &context, d), true),
        };
        match sse.offer(&call.result(event)) {
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

async fn get(call: Call, params: &Value) -> Response {
    let Some((task, action)) = named_task(params) else {
        return call.error(
            TASK_NOT_FOUND,
            "Task not found: `id` names no task of this sidecar.",
        );
    };
    let body = Lmos::QueryAction { action };
    let mut replies = match call.ask(body, &task, false).await {
        Ok(r) => r,
        Err(p) => return call.problem(&p, Method::Get),
    };
    match replies.next().await {
        Some(reply) if reply["messageType"] == "error" => {
            call.refused(status_of(&reply), &tasks::error_text(&reply), Method::Get)
        }
        Some(reply) => {
            // The context is the client's; the sidecar does not keep it.
            let t = tasks::task(&reply, &task, &task, call.dialect);
            answer(call.result(t))
        }
        None => call.error(jsonrpc::INTERNAL_ERROR, "The sidecar is shutting down."),
    }
}

async fn cancel(call: Call, params: &Value) -> Response {
    let Some((task, action)) = named_task(params) else {
        return call.error(
            TASK_NOT_FOUND,
            "Task not found: `id` names no task of this sidecar.",
        );
    };
    let body = Lmos::CancelAction {
        action,
        reason: Some("Cancelled by an A2A client (CancelTask).".into()),
    };
    let mut replies = match call.ask(body, &task, false).await {
        Ok(r) => r,
        Err(p) => return call.problem(&p, Method::Cancel),
    };
    match replies.next().await {
        Some(reply) if reply["messageType"] == "error" => {
            let status = status_of(&reply);
            let text = tasks::error_text(&reply);
            match status {
                404 => call.error(TASK_NOT_FOUND, &text),
                _ => call.error(TASK_NOT_CANCELABLE, &text),
            }
        }
        Some(reply) if matches!(reply["status"].as_str(), Some("cancelled" | "canceled")) => {
            answer(call.result(tasks::task(&reply, &task, &task, call.dialect)))
        }
        Some(reply) => {
            let ended = reply["status"].as_str().unwrap_or("unknown");
            call.error(
                TASK_NOT_CANCELABLE,
                &format!("Task cannot be canceled: it already ended `{ended}`."),
            )
        }
        None => call.error(jsonrpc::INTERNAL_ERROR, "The sidecar is shutting down."),
    }
}
