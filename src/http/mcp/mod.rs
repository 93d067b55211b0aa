//! MCP (Model Context Protocol) at `/mcp`, Streamable HTTP transport: every
//! hosted Thing's actions (and property reads and writes) are tools, called
//! through the sidecar's router as the HTTP binding calls them.
//!
//! - `POST /mcp`: one JSON-RPC message. `initialize` opens a session
//!   (`Mcp-Session-Id`); `tools/list`, `tools/call`, `ping` need it. A
//!   `tools/call` with a progress token is answered on an SSE stream
//!   (progress, then the result); everything else as JSON.
//! - `GET /mcp`: the session's server stream: `notifications/tools/list_changed`
//!   when the caller's tools change (agents come and go).
//! - `DELETE /mcp`: ends the session.
//!
//! Revision 2026-07-28 (stateless) is served on the same `POST /mcp`,
//! chosen per request (`headers::era`): no session, the revision and the
//! client in every request's `_meta`, `server/discover`,
//! `subscriptions/listen` for news; see `stateless.rs`. GET and DELETE are
//! 405 for it.
//!
//! Same authentication as every handler on the port, same per-Thing rights
//! (tools are only what the caller may use).

mod call;
pub mod completion;
pub mod content;
mod discover;
pub mod headers;
mod listen;
pub mod logging;
mod media;
mod methods;
pub mod observe;
pub mod resources;
pub mod results;
pub mod sessions;
mod stateless;
pub mod tools;
mod watch;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tracing::{info, warn};

use super::auth::Caller;
use super::jsonrpc::{self, Incoming};
use super::oauth;
use super::rpc_io::{self, accepts_sse};
use super::HttpState;
use crate::auth::Principal;
use crate::config::McpConfig;
use crate::telemetry::metrics;
use sessions::{SessionLimits, Sessions};

/// Protocol versions the initialize handshake negotiates, newest first:
/// those the official TypeScript and Python SDKs offer.
pub const VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

const SESSION_HEADER: &str = "mcp-session-id";

/// What `/mcp` keeps: the sessions, the limits, the watch on the agents.
pub struct Mcp {
    sessions: Sessions,
    streams: rpc_io::SseBudget,
    /// Binary stream chunks tool calls hold until they answer.
    media: media::MediaBudget,
    /// Largest request body (`gateway.max_message_size`), for A2A too.
    pub body_limit: usize,
    watch: watch::HostWatch,
    listens: listen::Listens,
    observations: observe::Observations,
}

impl Mcp {
    /// `mcp.max_stream_queue_bytes` and `mcp.max_total_stream_bytes`,
    /// which bound A2A's streams too.
    pub fn streams(&self) -> &rpc_io::SseBudget {
        &self.streams
    }

    pub fn new(config: &McpConfig, body_limit: usize) -> Arc<Mcp> {
        Arc::new(Mcp {
            sessions: Sessions::new(SessionLimits {
                max: config.max_sessions,
                per_principal: config.max_sessions_per_principal,
                idle: std::time::Duration::from_millis(config.session_idle_ms),
            }),
            streams: rpc_io::SseBudget::new(
                config.max_stream_queue_bytes,
                config.max_total_stream_bytes,
            ),
            media: media::MediaBudget::new(config.max_media_bytes, config.max_total_media_bytes),
            body_limit,
            watch: watch::HostWatch::default(),
            listens: listen::Listens::new(listen::ListenLimits {
                max: config.max_listens,
                per_principal: config.max_listens_per_principal,
                resources: config.max_listen_resources,
            }),
            observations: observe::Observations::default(),
        })
    }
}

/// One request's context: who, in which session, continuing which trace.
pub struct Ctx {
    state: HttpState,
    principal: Principal,
    /// The handshake revisions' session; `None` for a stateless request.
    session: Option<String>,
    /// The protocol version the session negotiated, or the request's.
    version: String,
    /// The session's `logging/setLevel`.
    log_level: Option<logging::Level>,
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl Ctx {
    fn sessions(&self) -> &Sessions {
        &self.state.mcp.sessions
    }

    /// Served by the stateless revision (2026-07-28).
    fn stateless(&self) -> bool {
        self.session.is_none()
    }

    /// A JSON-RPC answer to `method` as this request's revision shapes it:
    /// the stateless one adds `resultType` and cache hints, and answers an
    /// unknown method with 404.
    fn finish(&self, method: &str, mut answer: Value) -> (StatusCode, Value) {
        if !self.stateless() {
            return (StatusCode::OK, answer);
        }
        if let Some(result) = answer.get_mut("result") {
            headers::shape(method, result);
        }
        match answer["error"]["code"].as_i64() {
            Some(jsonrpc::METHOD_NOT_FOUND) => (StatusCode::NOT_FOUND, answer),
            _ => (StatusCode::OK, answer),
        }
    }

    fn reply(&self, method: &str, answer: Value) -> Response {
        let (status, answer) = self.finish(method, answer);
        rpc_io::json(status, &answer)
    }
}

/// What the server offers, for `initialize` and `server/discover` alike.
fn capabilities() -> Value {
    json!({
        "tools": {"listChanged": true},
        "resources": {"subscribe": true, "listChanged": true},
        "logging": {},
        "completions": {},
    })
}

fn server_info() -> Value {
    json!({"name": "lmos-sidecar", "title": "LMOS sidecar", "version": env!("CARGO_PKG_VERSION")})
}

const INSTRUCTIONS: &str = "Each tool is an action (or a property read or write) of an LMOS agent behind this sidecar; calls go to the agent as LMOS invokeAction, and progress follows its statuses.";

/// The id an error about `message` answers to (null for a notification).
fn id_of(message: &Incoming) -> Value {
    match message {
        Incoming::Request { id, .. } => id.clone(),
        _ => Value::Null,
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The caller's tools now: hosted Things' TDs, what the caller may use.
pub async fn tools_for(state: &HttpState, principal: &Principal) -> Vec<tools::Tool> {
    tools_where(state, &|access, thing| principal.may(access, thing)).await
}

/// The tools `may` allows of the hosted Things.
pub async fn tools_where(
    state: &HttpState,
    may: &(dyn Fn(crate::auth::Access, &str) -> bool + Sync),
) -> Vec<tools::Tool> {
    let hosts = watch::hosted(&state.gateway).await;
    let directory = state.directory.directory();
    let things = hosts
        .iter()
        .filter_map(|id| directory.get(id).map(|td| (id.as_str(), td)));
    tools::tools(things, may)
}

fn rpc_error(status: StatusCode, id: &Value, code: i64, message: &str) -> Response {
    rpc_io::json(status, &jsonrpc::error(id, code, message, None))
}

pub async fn post(
    State(state): State<HttpState>,
    caller: Result<Caller, Response>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let principal = match oauth::gate(state.oauth.as_deref(), caller, &headers) {
        Ok(p) => p,
        Err(refused) => return refused,
    };
    let bytes = match rpc_io::read_body(&headers, body, state.mcp.body_limit).await {
        Ok(b) => b,
        Err(refused) => {
            state.metrics.limit_hit(metrics::MCP, "max_message_size");
            return refused;
        }
    };
    let message = match jsonrpc::parse(&bytes) {
        Ok(m) => m,
        Err(malformed) => {
            state.metrics.error("mcp_malformed");
            return rpc_io::json(StatusCode::BAD_REQUEST, &malformed.to_value());
        }
    };
    if headers::era(&headers, &message) == headers::Era::Stateless {
        return stateless::post(state, principal, &headers, message).await;
    }
    if let Incoming::Request { id, method, params } = &message {
        if method == "initialize" {
            return initialize(&state, &principal, id, params);
        }
    }
    let session = header(&headers, SESSION_HEADER).unwrap_or_default();
    if session.is_empty() {
        let text = "Bad Request: no Mcp-Session-Id header; send `initialize` first";
        return rpc_error(
            StatusCode::BAD_REQUEST,
            &id_of(&message),
            jsonrpc::INVALID_REQUEST,
            text,
        );
    }
    let Some(current) = state.mcp.sessions.touch(&session, principal.name()) else {
        return rpc_error(
            StatusCode::NOT_FOUND,
            &id_of(&message),
            jsonrpc::INVALID_REQUEST,
            "Session not found; send `initialize` again",
        );
    };
    let ctx = Ctx {
        traceparent: header(&headers, "traceparent"),
        tracestate: header(&headers, "tracestate"),
        state,
        principal,
        session: Some(session),
        version: current.version,
        log_level: current.log_level,
    };
    match message {
        Incoming::Request { id, method, params } => {
            methods::dispatch(ctx, &headers, id, &method, params).await
        }
        Incoming::Notification { method, params } => {
            if method == "notifications/cancelled" {
                call::cancel(&ctx, &params).await;
            }
            StatusCode::ACCEPTED.into_response()
        }
        Incoming::Response => StatusCode::ACCEPTED.into_response(),
    }
}

fn initialize(state: &HttpState, principal: &Principal, id: &Value, params: &Value) -> Response {
    let asked = params["protocolVersion"].as_str().unwrap_or_default();
    let version = VERSIONS
        .iter()
        .find(|v| **v == asked)
        .unwrap_or(&VERSIONS[0]);
    let (session, evicted) = match state.mcp.sessions.open(principal.name(), version) {
        Ok(opened) => opened,
        Err(full) => {
            state.metrics.limit_hit(metrics::MCP, "max_sessions");
            warn!(
                max = full.0,
                "MCP sessions at mcp.max_sessions; refusing initialize."
            );
            let text = format!("{full}; try again later");
            return rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                jsonrpc::INTERNAL_ERROR,
                &text,
            );
        }
    };
    if evicted {
        state
            .metrics
            .limit_hit(metrics::MCP, "max_sessions_per_principal");
        info!(principal = principal.name(), "Closed a principal's least recently used MCP session for its new one (mcp.max_sessions_per_principal).");
    }
    let result = json!({
        "protocolVersion": version,
        "capabilities": capabilities(),
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    });
    let mut response = rpc_io::json(StatusCode::OK, &jsonrpc::result(id, result));
    if let Ok(v) = HeaderValue::from_str(&session) {
        response.headers_mut().insert(SESSION_HEADER, v);
    }
    response
}

/// `GET /mcp`: the session's stream of server notifications.
pub async fn get(
    State(state): State<HttpState>,
    caller: Result<Caller, Response>,
    headers: HeaderMap,
) -> Response {
    let principal = match oauth::gate(state.oauth.as_deref(), caller, &headers) {
        Ok(p) => p,
        Err(refused) => return refused,
    };
    if headers::stateless_header(&headers) {
        return stateless::not_allowed();
    }
    if !accepts_sse(&headers) {
        return (
            StatusCode::NOT_ACCEPTABLE,
            "GET /mcp answers with text/event-stream only.\n",
        )
            .into_response();
    }
    let session = header(&headers, SESSION_HEADER).unwrap_or_default();
    if state
        .mcp
        .sessions
        .touch(&session, principal.name())
        .is_none()
    {
        return rpc_error(
            StatusCode::NOT_FOUND,
            &Value::Null,
            jsonrpc::INVALID_REQUEST,
            "Session not found; send `initialize` again",
        );
    }
    let Some(ended) = state.mcp.sessions.listen(&session) else {
        return rpc_error(
            StatusCode::NOT_FOUND,
            &Value::Null,
            jsonrpc::INVALID_REQUEST,
            "Session not found",
        );
    };
    let (sse, response) = rpc_io::sse(&state.mcp.streams);
    let updates = observe::forward(
        state.clone(),
        principal.clone(),
        session,
        sse.clone(),
        ended.clone(),
    );
    tokio::spawn(updates);
    tokio::spawn(watch::notify_changes(state, principal, sse, ended));
    response
}

/// `DELETE /mcp`: the session ends.
pub async fn delete(
    State(state): State<HttpState>,
    caller: Result<Caller, Response>,
    headers: HeaderMap,
) -> Response {
    let principal = match oauth::gate(state.oauth.as_deref(), caller, &headers) {
        Ok(p) => p,
        Err(refused) => return refused,
    };
    if headers::stateless_header(&headers) {
        return stateless::not_allowed();
    }
    let session = header(&headers, SESSION_HEADER).unwrap_or_default();
    match state.mcp.sessions.close(&session, principal.name()) {
        true => StatusCode::NO_CONTENT.into_response(),
        false => rpc_error(
            StatusCode::NOT_FOUND,
            &Value::Null,
            jsonrpc::INVALID_REQUEST,
            "Session not found",
        ),
    }
}
