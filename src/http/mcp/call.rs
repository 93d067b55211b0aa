//! `tools/call`: the tool's LMOS request through the router, as the HTTP
//! binding sends it (same authorization, same TD checks: a bad input is the
//! router's `400`, turned into a tool error, and the agent never sees it),
//! and the statuses back as progress and a result.

use std::time::Duration;

use serde_json::{json, Value};
use uuid::Uuid;

use super::logging::{CallLog, Level};
use super::results;
use super::sessions::RunningCall;
use super::tools::{Target, Tool};
use super::Ctx;
use crate::gateway::Replies;
use crate::http::jsonrpc;
use crate::http::rpc_io::{Offered, SseSender};
use crate::lmos::{Body, Message};
use crate::telemetry::{metrics, RpcInfo};

/// An SSE comment this often keeps a long call's stream open through
/// proxies and idle timeouts.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

const GONE: &str = "The MCP client closed the call's stream.";

/// Where progress goes: the call's SSE stream and the client's token,
/// and the log notifications for a client that set a level (a stateless
/// call is streamed without either, so that closing it cancels).
pub struct Progress {
    pub sse: SseSender,
    pub token: Option<Value>,
    pub log: Option<Level>,
}

impl Progress {
    fn log(&self, tool: &Tool) -> Option<CallLog> {
        self.log.map(|threshold| CallLog {
            sse: self.sse.clone(),
            threshold,
            logger: tool.name.clone(),
        })
    }
}

impl Ctx {
    fn message(&self, thing: &str, body: Body, correlation: &str) -> Message {
        let mut m = Message::new(thing, body);
        m.correlation_id = Some(correlation.to_owned());
        m.traceparent = self.traceparent.clone();
        m.tracestate = self.tracestate.clone();
        m
    }

    async fn ask(&self, message: Message) -> Result<Replies, Value> {
        self.state
            .gateway
            .request_via(metrics::MCP, &self.principal, message)
            .await
            .map_err(|p| results::tool_error(&format!("{}: {}", p.kind.title(), p.detail)))
    }
}

/// [`call`] inside the call's SERVER span (OpenTelemetry's MCP
/// conventions), which is the parent of the LMOS request's spans.
pub async fn traced(
    mut ctx: Ctx,
    request: &Value,
    tool: &Tool,
    arguments: &Value,
    progress: Option<Progress>,
) -> Option<Value> {
    let tracer = ctx.state.gateway.tracer().clone();
    let name = format!("tools/call {}", tool.name);
    let span = tracer.begin_rpc(ctx.traceparent.as_deref(), ctx.tracestate.as_deref(), &name);
    if let Some(span) = &span {
        ctx.traceparent = Some(span.context.traceparent.clone());
        ctx.tracestate = span.context.tracestate.clone();
    }
    let result = call(&ctx, request, tool, arguments, progress).await;
    if let Some(span) = &span {
        let request_id = request.to_string();
        let info = RpcInfo {
            protocol: "mcp",
            method: "tools/call",
            target: &tool.name,
            request_id: Some(&request_id),
            session_id: ctx.session.as_deref(),
            protocol_version: Some(&ctx.version),
            client: false,
        };
        let error = match &result {
            Some(r) if r["isError"] == true => Some("tool_error"),
            None => Some("cancelled"),
            _ => None,
        };
        tracer.end_rpc(span, &info, error);
    }
    result
}

/// The result of calling `tool`; `None` when the client cancelled the call
/// (MCP wants no answer then).
pub async fn call(
    ctx: &Ctx,
    request: &Value,
    tool: &Tool,
    arguments: &Value,
    progress: Option<Progress>,
) -> Option<Value> {
    let correlation = Uuid::new_v4().to_string();
    let body = match &tool.target {
        Target::Action(action) => {
            let body = Body::InvokeAction {
                action: action.clone(),
                input: tool.input(arguments),
            };
            return invoke(ctx, request, tool, action, body, correlation, progress).await;
        }
        Target::ReadProperty(name) => Body::ReadProperty { name: name.clone() },
        Target::WriteProperty(name) => Body::WriteProperty {
            name: name.clone(),
            data: tool.input(arguments).unwrap_or(Value::Null),
        },
    };
    let written = matches!(tool.target, Target::WriteProperty(_));
    let mut replies = match ctx.ask(ctx.message(&tool.thing, body, &correlation)).await {
        Ok(r) => r,
        Err(e) => return Some(e),
    };
    let Some(reply) = replies.next().await else {
        return Some(results::tool_error("The sidecar is shutting down."));
    };
    Some(match reply["messageType"].as_str() {
        Some("error") => results::tool_error(&results::error_text(&reply)),
        _ if written => {
            json!({"content": [{"type": "text", "text": "Written."}], "isError": false})
        }
        _ => tool.success(reading(&reply, &tool.target).as_ref()),
    })
}

fn reading(reply: &Value, target: &Target) -> Option<Value> {
    let Target::ReadProperty(name) = target else {
        return None;
    };
    match reply["messageType"].as_str()? {
        "propertyReadings" => reply["data"].get(name).cloned(),
        _ => reply.get("value").or_else(|| reply.get("data")).cloned(),
    }
}

async fn invoke(
    ctx: &Ctx,
    request: &Value,
    tool: &Tool,
    action: &str,
    body: Body,
    invocation: String,
    progress: Option<Progress>,
) -> Option<Value> {
    let mut message = ctx.message(&tool.thing, body, &invocation);
    if progress.as_ref().is_some_and(|p| p.token.is_some()) {
        // A client that follows progress gets the output as it is made,
        // from agents that stream; the others answer as before.
        message.extra.insert("stream".into(), true.into());
    }
    let mut replies = match ctx.ask(message).await {
        Ok(r) => r,
        Err(e) => return Some(e),
    };
    let key = request.to_string();
    let running = RunningCall {
        thing: tool.thing.clone(),
        action: action.to_owned(),
        invocation,
        cancelled: Default::default(),
    };
    let cancelled = running.cancelled.clone();
    let closed = progress
        .as_ref()
        .filter(|_| ctx.stateless())
        .map(|p| p.sse.clone());
    let at_agent = running.clone();
    if let Some(session) = &ctx.session {
        ctx.sessions().begin_call(session, &key, running);
    }
    let log = progress.as_ref().and_then(|p| p.log(tool));
    if let Some(log) = &log {
        log.log(
            Level::Debug,
            &format!("invokeAction `{action}` sent to {}.", tool.thing),
        );
    }
    let mut sent = 0u64;
    let mut media = ctx.state.mcp.media.collector();
    let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
    keep_alive.reset();
    let answer = loop {
        let reply = tokio::select! {
            reply = replies.next() => reply,
            _ = cancelled.cancelled() => break None,
            // Stateless (2026-07-28): the client closing the stream is the cancel.
            _ = client_gone(closed.as_ref()) => {
                cancel_at_agent(ctx, at_agent.clone(), GONE).await;
                break None;
            }
            _ = keep_alive.tick() => {
                if let Some(p) = &progress {
                    p.sse.keep_alive();
                }
                continue;
            }
        };
        let Some(status) = reply else {
            break Some(results::tool_error("The sidecar is shutting down."));
        };
        if status["messageType"] == "error" {
            let text = results::error_text(&status);
            log_error(log.as_ref(), &text);
            break Some(results::tool_error(&text));
        }
        match status["status"].as_str().unwrap_or_default() {
            "completed" => {
                break Some(with_media(
                    tool.success(status.get("output")),
                    &media,
                    &tool.thing,
                    action,
                ))
            }
            s if crate::lmos::is_terminal(s) => {
                let text = results::ended_text(&status);
                log_error(log.as_ref(), &text);
                break Some(results::tool_error(&text));
            }
            "pending" => {}
            // Audio and images are the result's content, not progress.
            _ if media.take(&status) => {}
            _ => {
                let (Some(p), Some(text)) = (&progress, results::progress_message(&status)) else {
                    continue;
                };
                if let Some(log) = &log {
                    if !log.log(Level::Info, &text) {
                        if closed.is_some() {
                            cancel_at_agent(ctx, at_agent.clone(), GONE).await;
                        }
                        break None;
                    }
                }
                let Some(token) = &p.token else {
                    continue;
                };
                sent += 1;
                let params = json!({"progressToken": token, "progress": sent, "message": text});
                let note = jsonrpc::notification("notifications/progress", params);
                match p.sse.offer(&note) {
                    Offered::Queued => {}
                    Offered::OverBudget => ctx
                        .state
                        .metrics
                        .limit_hit(metrics::MCP, "max_stream_queue_bytes"),
                    // Gone: MCP up to 2025-11-25 does not take a closed
                    // stream for a cancel (the invocation goes on, nobody
                    // waits for its answer); 2026-07-28 does.
                    Offered::Gone => {
                        if closed.is_some() {
                            cancel_at_agent(ctx, at_agent.clone(), GONE).await;
                        }
                        break None;
                    }
                }
            }
        }
    };
    if let Some(session) = &ctx.session {
        ctx.sessions().end_call(session, &key);
    }
    answer
}

/// Resolves when the stream's client has gone; never without a stream.
async fn client_gone(sse: Option<&SseSender>) {
    match sse {
        Some(sse) => sse.closed().await,
        None => std::future::pending().await,
    }
}

fn log_error(log: Option<&CallLog>, text: &str) {
    if let Some(log) = log {
        log.log(Level::Error, text);
    }
}

/// `notifications/cancelled`: the call's invocation is cancelled at its
/// agent (`cancelAction`), and its stream ends without an answer.
pub async fn cancel(ctx: &Ctx, params: &Value) {
    let Some(request) = params.get("requestId") else {
        return;
    };
    let Some(session) = &ctx.session else {
        return;
    };
    let Some(call) = ctx.sessions().take_call(session, &request.to_string()) else {
        return;
    };
    call.cancelled.cancel();
    let reason = params["reason"]
        .as_str()
        .unwrap_or("Cancelled by the MCP client.");
    cancel_at_agent(ctx, call, reason).await;
}

/// The call's invocation cancelled at its agent (`cancelAction`) through
/// the router, with the caller's rights.
async fn cancel_at_agent(ctx: &Ctx, call: RunningCall, reason: &str) {
    let body = Body::CancelAction {
        action: call.action,
        reason: Some(reason.to_owned()),
    };
    // Answered (`cancelled`, or too late) to no one: MCP's cancel has no
    // answer; the invocation's own end is what the router remembers.
    let _ = ctx
        .ask(ctx.message(&call.thing, body, &call.invocation))
        .await;
}

/// A successful result with the media the agent streamed after the
/// output's own content.
fn with_media(mut result: Value, media: &super::media::Media, thing: &str, action: &str) -> Value {
    let uri = super::resources::affordance_uri(thing, "actions", action);
    if let Some(content) = result["content"].as_array_mut() {
        content.extend(media.blocks(&uri));
    }
    result
}
