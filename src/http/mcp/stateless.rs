//! `POST /mcp` at revision 2026-07-28: each request stands alone. Its
//! `_meta` and mirror headers are checked (`headers::check`), its caller
//! is the request's own (`Caller`, as on every handler), and it is
//! answered by the one method dispatch both revisions share, except for
//! what only this revision has (`server/discover`,
//! `subscriptions/listen`) and what it removed (404, -32601).

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::headers::{self, MODERN};
use super::{discover, header, listen, logging, methods, Ctx};
use crate::auth::Principal;
use crate::http::jsonrpc::{self, Incoming};
use crate::http::rpc_io;
use crate::http::HttpState;

pub async fn post(
    state: HttpState,
    principal: Principal,
    headers: &HeaderMap,
    message: Incoming,
) -> Response {
    // No client notification is defined over HTTP at this revision (a
    // closed stream is the cancel): accepted, and nothing follows.
    let Incoming::Request { id, method, params } = message else {
        return StatusCode::ACCEPTED.into_response();
    };
    if let Err(refusal) = headers::check(headers, &method, &params) {
        state.metrics.error("mcp_refused_request");
        return rpc_io::json(refusal.status, &refusal.to_value(&id));
    }
    if headers::removed(&method) {
        let text = format!("Method not found: `{method}` is not part of MCP {MODERN}");
        let answer = jsonrpc::error(&id, jsonrpc::METHOD_NOT_FOUND, &text, None);
        return rpc_io::json(StatusCode::NOT_FOUND, &answer);
    }
    let log_level = match log_level(&params) {
        Ok(level) => level,
        Err(text) => {
            let answer = jsonrpc::error(&id, jsonrpc::INVALID_PARAMS, &text, None);
            return rpc_io::json(StatusCode::BAD_REQUEST, &answer);
        }
    };
    let ctx = Ctx {
        traceparent: header(headers, "traceparent"),
        tracestate: header(headers, "tracestate"),
        state,
        principal,
        session: None,
        version: MODERN.to_owned(),
        log_level,
    };
    match method.as_str() {
        "server/discover" => ctx.reply(&method, jsonrpc::result(&id, discover::result())),
        "subscriptions/listen" => listen::listen(ctx, headers, id, &params).await,
        _ => methods::dispatch(ctx, headers, id, &method, params).await,
    }
}

/// The request's own log level (`_meta`): no log notifications without
/// one; an unknown one is refused.
fn log_level(params: &Value) -> Result<Option<logging::Level>, String> {
    match params["_meta"].get(LOG_LEVEL) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_str()
            .and_then(logging::Level::parse)
            .map(Some)
            .ok_or_else(|| format!("Invalid params: `{LOG_LEVEL}` is no log level")),
    }
}

const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// GET and DELETE at 2026-07-28: there is no stream to open and no
/// session to end.
pub fn not_allowed() -> Response {
    let text = format!("MCP {MODERN} has no GET stream and no sessions; POST each request");
    let answer = jsonrpc::error(&Value::Null, jsonrpc::INVALID_REQUEST, &text, None);
    let mut response = rpc_io::json(StatusCode::METHOD_NOT_ALLOWED, &answer);
    response
        .headers_mut()
        .insert(axum::http::header::ALLOW, HeaderValue::from_static("POST"));
    response
}
