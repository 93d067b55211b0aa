//! The console's lists of clients and sessions (`GET /console/clients`)
//! and the disconnect button (`POST /console/disconnect`).
//!
//! Who sees what: a principal in `console.administrators` sees every MQTT
//! session (connected or kept) and every principal's WebSocket connection
//! count, and may disconnect an MQTT client; everyone else sees their own
//! sessions and connections only, and a disconnect is refused (403) on the
//! server, whatever the page shows. The POST passes the HTTP guard like
//! every state-changing request (JSON body, same origin).

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::no_store_json;
use crate::broker::guard::SessionView;
use crate::http::auth::Caller;
use crate::http::HttpState;

/// The most rows of each list one answer carries; the search narrows.
const ROWS_MAX: usize = 500;

#[derive(Debug, Deserialize)]
pub struct Search {
    #[serde(default)]
    q: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WebSocketClients {
    principal: String,
    connections: usize,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ClientsAnswer {
    /// Whether the caller may disconnect (and sees everyone's).
    administer: bool,
    mqtt: Vec<SessionView>,
    /// How many matched before [`ROWS_MAX`] cut the list.
    mqtt_matched: usize,
    websocket: Vec<WebSocketClients>,
}

/// Whether a session matches the search: client ID, principal or a filter.
fn matches(s: &SessionView, q: &str) -> bool {
    q.is_empty()
        || s.client_id.to_lowercase().contains(q)
        || s.owner
            .as_deref()
            .is_some_and(|o| o.to_lowercase().contains(q))
        || s.subscriptions.iter().any(|f| f.to_lowercase().contains(q))
}

/// `GET /console/clients?q=TEXT`.
pub async fn clients(
    State(state): State<HttpState>,
    caller: Caller,
    Query(search): Query<Search>,
) -> Response {
    let administer = state.console.administers(&caller.principal);
    let me = caller.principal.name();
    let q = search.q.to_lowercase();
    let mut mqtt: Vec<SessionView> = state
        .console
        .broker
        .guard
        .as_ref()
        .map(|g| g.sessions())
        .unwrap_or_default()
        .into_iter()
        .filter(|s| administer || s.owner.as_deref() == Some(me))
        .filter(|s| matches(s, &q))
        .collect();
    mqtt.sort_by(|a, b| a.client_id.cmp(&b.client_id));
    let mqtt_matched = mqtt.len();
    mqtt.truncate(ROWS_MAX);
    let websocket = state
        .console
        .clients
        .all()
        .into_iter()
        .filter(|(p, _)| administer || p == me)
        .filter(|(p, _)| q.is_empty() || p.to_lowercase().contains(&q))
        .take(ROWS_MAX)
        .map(|(principal, connections)| WebSocketClients {
            principal,
            connections,
        })
        .collect();
    no_store_json(&ClientsAnswer {
        administer,
        mqtt,
        mqtt_matched,
        websocket,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Disconnect {
    client_id: String,
}

#[derive(Debug, Serialize)]
struct Refusal {
    error: String,
}

fn answer(status: StatusCode, error: impl Into<String>) -> Response {
    (
        status,
        Json(Refusal {
            error: error.into(),
        }),
    )
        .into_response()
}

/// `POST /console/disconnect` `{"clientId": "..."}`: administrators only.
pub async fn disconnect(
    State(state): State<HttpState>,
    caller: Caller,
    Json(d): Json<Disconnect>,
) -> Response {
    if !state.console.administers(&caller.principal) {
        state
            .metrics
            .denied(crate::telemetry::metrics::HTTP, "administer");
        return answer(
            StatusCode::FORBIDDEN,
            format!(
                "{} may not disconnect clients: only the principals in console.administrators may",
                caller.principal.name()
            ),
        );
    }
    let done = state
        .console
        .broker
        .guard
        .as_ref()
        .is_some_and(|g| g.disconnect(&d.client_id));
    if !done {
        return answer(
            StatusCode::NOT_FOUND,
            format!("no MQTT client {} is connected", d.client_id),
        );
    }
    tracing::info!(client_id = %d.client_id, by = %caller.principal.name(), "Disconnected an MQTT client from the console.");
    StatusCode::NO_CONTENT.into_response()
}
