//! A2A (Agent2Agent) for every Thing whose TD is an `lmos:Agent`:
//!
//! - `GET /a2a/{thingID}/.well-known/agent-card.json`: its Agent Card;
//!   `GET /.well-known/agent-card.json`: the card of the one agent the
//!   caller can see, when there is exactly one (the usual sidecar); both
//!   with `Cache-Control`, `ETag` (304 on `If-None-Match`) and
//!   `Last-Modified`;
//! - `POST /a2a/{thingID}` (or `.../`): JSON-RPC, A2A 1.0 (`SendMessage`,
//!   `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask`,
//!   `SubscribeToTask`, `GetExtendedAgentCard`, the push-notification
//!   config methods answered "not supported") and 0.3's names for them.
//!
//! Messages become `invokeAction`s through the router, as the HTTP
//! binding's requests do: same authentication, same rights, same TD checks.
//! Tasks are kept per principal (`store.rs`), bounded and expiring.

pub mod card;
mod errors;
mod input;
mod query;
mod recover;
mod rpc;
mod send;
mod store;
pub mod tasks;
mod v03;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::auth::Caller;
use super::HttpState;
use crate::auth::{Access, Principal};
use crate::config::A2aConfig;

pub use rpc::{rpc, rpc_slash};

/// What the A2A face keeps: the tasks, and when it started serving (the
/// cards' `Last-Modified` when a TD says no `modified`).
pub struct A2a {
    tasks: store::Tasks,
    started: chrono::DateTime<chrono::Utc>,
}

impl A2a {
    pub fn new(config: &A2aConfig) -> Arc<A2a> {
        Arc::new(A2a {
            tasks: store::Tasks::new(store::Limits {
                max: config.max_tasks,
                per_principal: config.max_tasks_per_principal,
                ttl: Duration::from_millis(config.task_ttl_ms),
            }),
            started: chrono::Utc::now(),
        })
    }
}

/// A body that is not JSON (refused by the port's guard before any
/// handler): A2A's ContentTypeNotSupported, as a JSON-RPC error.
pub fn content_type_refused(detail: &str) -> Response {
    let body = errors::error(
        &Value::Null,
        errors::CONTENT_TYPE_NOT_SUPPORTED,
        detail,
        &[],
    );
    super::rpc_io::json(StatusCode::UNSUPPORTED_MEDIA_TYPE, &body)
}

/// Any other path under `/a2a`, or a method a path does not take: a JSON
/// problem, so a client sees what went wrong.
pub async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    // A path that exists, asked with another method: 405.
    let card = uri.path().ends_with("/.well-known/agent-card.json");
    let thing = uri
        .path()
        .strip_prefix("/a2a/")
        .map(|t| t.strip_suffix('/').unwrap_or(t));
    let endpoint = method != axum::http::Method::POST
        && thing.is_some_and(|t| !t.is_empty() && !t.contains('/'));
    let (status, title) = if card || endpoint {
        (StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
    } else {
        (StatusCode::NOT_FOUND, "Not Found")
    };
    let detail = format!("{method} {} is not served: A2A is JSON-RPC by POST to /a2a/{{thingID}}, and each agent's card is at GET /a2a/{{thingID}}/.well-known/agent-card.json.", uri.path());
    let body =
        json!({"type": "about:blank", "title": title, "status": status.as_u16(), "detail": detail});
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

fn not_found(detail: String) -> Response {
    let body =
        json!({"type": "about:blank", "title": "Not Found", "status": 404, "detail": detail});
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

fn may_see(principal: &Principal, thing: &str) -> bool {
    principal.may(Access::Operate, thing) || principal.may(Access::Consume, thing)
}

/// The agent's TD, if the caller may see it and it is an agent.
pub(crate) fn agent_td(state: &HttpState, principal: &Principal, thing: &str) -> Option<Value> {
    if !may_see(principal, thing) {
        state
            .metrics
            .denied(crate::telemetry::metrics::A2A, Access::Consume.as_str());
        return None;
    }
    let directory = state.directory.directory();
    directory
        .get(thing)
        .filter(|td| card::is_agent(td))
        .cloned()
}

/// The card's `Last-Modified`: the TD's `modified`, else when the face
/// started (the card is made from the TD and the port's settings).
fn last_modified(state: &HttpState, td: &Value) -> String {
    let modified = td["modified"]
        .as_str()
        .and_then(|m| chrono::DateTime::parse_from_rfc3339(m).ok())
        .map_or(state.a2a.started, |m| m.with_timezone(&chrono::Utc));
    modified.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

fn card_response(state: &HttpState, headers: &HeaderMap, thing: &str, td: &Value) -> Response {
    let http = state.directory.directory().endpoints().http.clone();
    let card = card::card(thing, td, &http, &state.auth.schemes).to_string();
    let digest = Sha256::digest(card.as_bytes());
    let etag = format!("\"{}\"", hex(&digest[..16]));
    // Private: a card shows what this caller may see.
    let cache = "private, max-age=300";
    let modified = last_modified(state, td);
    let matched = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let caching = [
        (header::CACHE_CONTROL, cache.to_owned()),
        (header::ETAG, etag),
        (header::LAST_MODIFIED, modified),
    ];
    if matched {
        return (StatusCode::NOT_MODIFIED, caching).into_response();
    }
    (caching, [(header::CONTENT_TYPE, "application/json")], card).into_response()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `GET /a2a/{thingID}/.well-known/agent-card.json`.
pub async fn agent_card(
    State(state): State<HttpState>,
    caller: Caller,
    Path(thing): Path<String>,
    headers: HeaderMap,
) -> Response {
    match agent_td(&state, &caller.principal, &thing) {
        Some(td) => card_response(&state, &headers, &thing, &td),
        None => not_found(format!("No agent `{thing}` (a Thing whose @type includes lmos:Agent) is registered here for this caller.")),
    }
}

/// `GET /.well-known/agent-card.json`: the one agent's card.
pub async fn only_agent_card(
    State(state): State<HttpState>,
    caller: Caller,
    headers: HeaderMap,
) -> Response {
    let agents: Vec<(String, Value)> = {
        let directory = state.directory.directory();
        let (all, _) = directory.list(0, usize::MAX);
        all.into_iter()
            .filter(|td| card::is_agent(td))
            .filter_map(|td| td["id"].as_str().map(|id| (id.to_owned(), td.clone())))
            .filter(|(id, _)| may_see(&caller.principal, id))
            .collect()
    };
    match agents.as_slice() {
        [(id, td)] => card_response(&state, &headers, id, td),
        [] => not_found("No agent is registered here for this caller.".into()),
        many => not_found(format!(
            "{} agents are registered here; each has its card at /a2a/{{thingID}}/.well-known/agent-card.json.",
            many.len()
        )),
    }
}
