//! A2A (Agent2Agent) for every Thing whose TD is an `lmos:Agent`:
//!
//! - `GET /a2a/{thingID}/.well-known/agent-card.json`: its Agent Card;
//!   `GET /.well-known/agent-card.json`: the card of the one agent the
//!   caller can see, when there is exactly one (the usual sidecar);
//! - `POST /a2a/{thingID}`: JSON-RPC, A2A 1.0 (`SendMessage`,
//!   `SendStreamingMessage`, `GetTask`, `CancelTask`) and 0.3's names for
//!   them (`message/send`, `message/stream`, `tasks/get`, `tasks/cancel`).
//!
//! Messages become `invokeAction`s through the router, as the HTTP
//! binding's requests do: same authentication, same rights, same TD checks.

pub mod card;
mod rpc;
pub mod tasks;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::auth::Caller;
use super::HttpState;
use crate::auth::{Access, Principal};

pub use rpc::rpc;

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

fn card_response(state: &HttpState, thing: &str, td: &Value) -> Response {
    let http = state.directory.directory().endpoints().http.clone();
    let card = card::card(thing, td, &http, &state.auth.schemes);
    (
        [(header::CONTENT_TYPE, "application/json")],
        card.to_string(),
    )
        .into_response()
}

/// `GET /a2a/{thingID}/.well-known/agent-card.json`.
pub async fn agent_card(
    State(state): State<HttpState>,
    caller: Caller,
    Path(thing): Path<String>,
) -> Response {
    match agent_td(&state, &caller.principal, &thing) {
        Some(td) => card_response(&state, &thing, &td),
        None => not_found(format!("No agent `{thing}` (a Thing whose @type includes lmos:Agent) is registered here for this caller.")),
    }
}

/// `GET /.well-known/agent-card.json`: the one agent's card.
pub async fn only_agent_card(State(state): State<HttpState>, caller: Caller) -> Response {
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
        [(id, td)] => card_response(&state, id, td),
        [] => not_found("No agent is registered here for this caller.".into()),
        many => not_found(format!(
            "{} agents are registered here; each has its card at /a2a/{{thingID}}/.well-known/agent-card.json.",
            many.len()
        )),
    }
}
