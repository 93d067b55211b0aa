//! The console's MQTT view: the topic tree (`GET /console/tree`), the
//! recent messages (`GET /console/recent?q=`) and publishing from the page
//! (`POST /console/publish`). Each answers with what the caller could do
//! with an MQTT client of its own: a topic is shown when the caller may
//! subscribe to it, and a publication needs the right an MQTT PUBLISH to
//! that topic needs (`crate::auth::mqtt`, the broker guard's rules).
//!
//! The POST goes through the HTTP guard like every state-changing request:
//! a JSON body only (a page on another origin cannot send one without a
//! CORS preflight, which this port never grants) and an `Origin` or
//! `Sec-Fetch-Site` of the sidecar's own.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::no_store_json;
use crate::auth::mqtt::{may_publish, may_subscribe};
use crate::broker::Publication;
use crate::http::auth::Caller;
use crate::http::HttpState;

/// The most messages `GET /console/recent` answers with.
const RECENT_MAX: usize = 200;
/// The largest payload the page may publish: the console is for trying
/// things by hand, not for bulk data.
const PUBLISH_MAX: usize = 256 * 1024;

/// `GET /console/tree`: the latest message of every topic under the prefix
/// the caller may subscribe to. Bounded by `console.topic_tree_bytes`.
pub async fn tree(State(state): State<HttpState>, caller: Caller) -> Response {
    let topics = state.gateway.topics();
    let principal = &caller.principal;
    let all = state
        .console
        .broker
        .monitor
        .tree(|topic| may_subscribe(topics, principal, topic).is_ok());
    no_store_json(&all)
}

#[derive(Debug, Deserialize)]
pub struct Search {
    #[serde(default)]
    q: String,
}

/// `GET /console/recent?q=TEXT`: up to [`RECENT_MAX`] recent messages the
/// caller may see whose topic or payload contains TEXT, newest first.
pub async fn recent(
    State(state): State<HttpState>,
    caller: Caller,
    Query(search): Query<Search>,
) -> Response {
    let topics = state.gateway.topics();
    let principal = &caller.principal;
    let found = state
        .console
        .broker
        .monitor
        .recent(&search.q, RECENT_MAX, |topic| {
            may_subscribe(topics, principal, topic).is_ok()
        });
    no_store_json(&found)
}

/// What the page publishes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Publish {
    topic: String,
    #[serde(default)]
    payload: String,
    /// Only 0: the sidecar's own link publishes at QoS 0.
    #[serde(default)]
    qos: u8,
    #[serde(default)]
    retain: bool,
}

#[derive(Debug, Serialize)]
struct Refusal {
    error: String,
}

fn refuse(status: StatusCode, error: impl Into<String>) -> Response {
    (
        status,
        Json(Refusal {
            error: error.into(),
        }),
    )
        .into_response()
}

/// `POST /console/publish`: publishes with the caller's MQTT rights.
pub async fn publish(
    State(state): State<HttpState>,
    caller: Caller,
    Json(p): Json<Publish>,
) -> Response {
    if let Some(problem) = invalid(&p) {
        return refuse(StatusCode::UNPROCESSABLE_ENTITY, problem);
    }
    let topics = state.gateway.topics();
    if let Err(denial) = may_publish(topics, &caller.principal, &p.topic) {
        state
            .metrics
            .denied(crate::telemetry::metrics::HTTP, denial.access.as_str());
        return refuse(
            StatusCode::FORBIDDEN,
            format!(
                "{} may not publish to {}: it {denial}",
                caller.principal.name(),
                p.topic
            ),
        );
    }
    let Some(bus) = &state.console.broker.bus else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "the console has no bus link",
        );
    };
    match bus
        .publish(Publication::new(p.topic, p.payload.into_bytes(), p.retain))
        .await
    {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => refuse(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// What MQTT itself would refuse in a PUBLISH, said before the broker does.
fn invalid(p: &Publish) -> Option<&'static str> {
    if p.topic.is_empty() || p.topic.len() > usize::from(u16::MAX) {
        return Some("a topic has 1 to 65535 bytes");
    }
    if p.topic.contains(['+', '#', '\0']) {
        return Some("a topic to publish to has no wildcards (+, #) and no NUL");
    }
    if p.payload.len() > PUBLISH_MAX {
        return Some("the console publishes payloads of up to 256 KiB");
    }
    if p.qos != 0 {
        return Some("the console publishes at QoS 0 (the sidecar's own link to the broker)");
    }
    None
}
