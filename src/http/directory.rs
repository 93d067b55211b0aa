//! The WoT Discovery HTTP API: `/.well-known/wot`, `/things`, `/things/{id}`.
//! Every change is also published: the TD retained on `{prefix}/{thing}/td`
//! (cleared on removal), and an LMOS `event` (`thingCreated`,
//! `thingUpdated`, `thingDeleted`) on the sidecar's own Thing.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tracing::{info, warn};

use crate::broker::{Bus, Publication};
use crate::directory::{Directory, DirectoryError, Registered, TdError};
use crate::lmos::{now_timestamp, Body, Message};
use crate::topics::Topics;

const TD_JSON: &str = "application/td+json";
const PROBLEM_JSON: &str = "application/problem+json";
const DEFAULT_PAGE: usize = 100;

/// The directory and what a change must reach.
#[derive(Clone)]
pub struct DirectoryService {
    directory: Arc<Mutex<Directory>>,
    bus: Bus,
    topics: Topics,
    /// The sidecar's own thingID: its directory events are its events.
    sidecar: String,
    /// The sidecar's directory description, served at `/.well-known/wot`.
    description: Arc<Value>,
}

impl DirectoryService {
    pub fn new(
        directory: Directory,
        bus: Bus,
        topics: Topics,
        sidecar: String,
        http_base: &str,
    ) -> DirectoryService {
        let description = json!({
            "@context": "https://www.w3.org/2022/wot/td/v1.1",
            "@type": "ThingDirectory",
            "id": sidecar,
            "title": "lmos-sidecar Thing Description directory",
            "base": http_base,
            "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}},
            "security": "nosec_sc",
            "properties": {
                "things": {
                    "description": "The registered Thing Descriptions; ?offset and ?limit page through them.",
                    "readOnly": true,
                    "type": "array",
                    "forms": [{"href": "/things", "htv:methodName": "GET", "contentType": "application/ld+json"}]
                }
            },
            "actions": {
                "createThing": {"forms": [{"href": "/things/{id}", "htv:methodName": "PUT", "contentType": TD_JSON}]},
                "createAnonymousThing": {"forms": [{"href": "/things", "htv:methodName": "POST", "contentType": TD_JSON}]},
                "retrieveThing": {"safe": true, "forms": [{"href": "/things/{id}", "htv:methodName": "GET"}]},
                "updateThing": {"forms": [{"href": "/things/{id}", "htv:methodName": "PUT", "contentType": TD_JSON}]},
                "partiallyUpdateThing": {"forms": [{"href": "/things/{id}", "htv:methodName": "PATCH", "contentType": "application/merge-patch+json"}]},
                "deleteThing": {"forms": [{"href": "/things/{id}", "htv:methodName": "DELETE"}]}
            },
            "events": {
                "thingCreated": {"data": {"type": "object"}},
                "thingUpdated": {"data": {"type": "object"}},
                "thingDeleted": {"data": {"type": "object"}}
            }
        });
        DirectoryService {
            directory: Arc::new(Mutex::new(directory)),
            bus,
            topics,
            sidecar,
            description: Arc::new(description),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Directory> {
        // A panic while holding the lock leaves a consistent map (every
        // change is one insert or remove), so a poisoned lock is still usable.
        self.directory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a TD from a file at start-up.
    pub async fn register_file(&self, path: &std::path::Path) -> Result<String, String> {
        let text =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let result = self.lock().put(None, &text);
        let (registered, td) = result.map_err(|e| format!("{}: {e}", path.display()))?;
        let id = td["id"].as_str().unwrap_or_default().to_owned();
        self.announce(&id, Some(&td), registered).await;
        Ok(id)
    }

    /// Publishes a change: the retained TD (or its removal) and an event.
    async fn announce(&self, id: &str, td: Option<&Value>, registered: Registered) {
        let retained = td.map(Value::to_string).unwrap_or_default();
        let event = match (td, registered) {
            (None, _) => "thingDeleted",
            (Some(_), Registered::Created) => "thingCreated",
            (Some(_), Registered::Updated) => "thingUpdated",
        };
        info!(thing = %id, change = event, "Directory changed.");
        let message = Message::new(
            self.sidecar.clone(),
            Body::Event {
                event: event.to_owned(),
                data: json!({ "id": id }),
                timestamp: now_timestamp(),
            },
        );
        let publications = [
            Publication::new(self.topics.td(id), retained, true),
            Publication::new(
                self.topics.event(&self.sidecar, event),
                message.to_json(),
                false,
            ),
        ];
        for p in publications {
            if self.bus.publish(p).await.is_err() {
                warn!("The message bus closed; a directory change was not published.");
            }
        }
    }
}

/// RFC 9457 problem details, with every TD violation and its JSON pointer.
fn problem(status: StatusCode, title: &str, detail: String, violations: Vec<Value>) -> Response {
    let mut body = json!({
        "type": format!("https://eclipse.dev/lmos/protocol/v1/errors#{}", title.to_lowercase().replace(' ', "-")),
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    if !violations.is_empty() {
        body["violations"] = Value::Array(violations);
    }
    (
        status,
        [(header::CONTENT_TYPE, PROBLEM_JSON)],
        body.to_string(),
    )
        .into_response()
}

fn refused(e: DirectoryError) -> Response {
    match e {
        DirectoryError::Td(TdError::Invalid(violations)) => {
            let list = violations
                .iter()
                .map(|v| json!({"pointer": v.pointer, "message": v.message}))
                .collect();
            let detail = format!(
                "{} violation(s) of the TD 1.1 schema or the LMOS vocabulary.",
                violations.len()
            );
            problem(
                StatusCode::BAD_REQUEST,
                "Invalid Thing Description",
                detail,
                list,
            )
        }
        DirectoryError::Td(e @ TdError::Json { .. }) => problem(
            StatusCode::BAD_REQUEST,
            "Invalid JSON",
            e.to_string(),
            Vec::new(),
        ),
        e @ (DirectoryError::IdMismatch { .. } | DirectoryError::HasId(_)) => problem(
            StatusCode::BAD_REQUEST,
            "Invalid Thing Description",
            e.to_string(),
            Vec::new(),
        ),
        e @ DirectoryError::NotFound(_) => problem(
            StatusCode::NOT_FOUND,
            "Not found",
            e.to_string(),
            Vec::new(),
        ),
    }
}

fn td_response(status: StatusCode, td: &Value) -> Response {
    (status, [(header::CONTENT_TYPE, TD_JSON)], td.to_string()).into_response()
}

pub async fn well_known(State(service): State<DirectoryService>) -> Response {
    td_response(StatusCode::OK, &service.description)
}

#[derive(Debug, Deserialize)]
pub struct Page {
    offset: Option<usize>,
    limit: Option<usize>,
}

pub async fn list(State(service): State<DirectoryService>, Query(page): Query<Page>) -> Response {
    let offset = page.offset.unwrap_or(0);
    let limit = page.limit.unwrap_or(DEFAULT_PAGE).max(1);
    let (body, total) = {
        let directory = service.lock();
        let (things, total) = directory.list(offset, limit);
        (
            Value::Array(things.into_iter().cloned().collect()).to_string(),
            total,
        )
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/ld+json"),
    );
    if offset + limit < total {
        let next = format!(
            "</things?offset={}&limit={limit}>; rel=\"next\"",
            offset + limit
        );
        if let Ok(v) = HeaderValue::from_str(&next) {
            headers.insert(header::LINK, v);
        }
    }
    (StatusCode::OK, headers, body).into_response()
}

pub async fn get(State(service): State<DirectoryService>, Path(id): Path<String>) -> Response {
    let td = service.lock().get(&id).cloned();
    match td {
        Some(td) => td_response(StatusCode::OK, &td),
        None => refused(DirectoryError::NotFound(id)),
    }
}

pub async fn put(
    State(service): State<DirectoryService>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let result = service.lock().put(Some(&id), &body);
    match result {
        Ok((registered, td)) => {
            service.announce(&id, Some(&td), registered).await;
            match registered {
                Registered::Created => StatusCode::CREATED.into_response(),
                Registered::Updated => StatusCode::NO_CONTENT.into_response(),
            }
        }
        Err(e) => refused(e),
    }
}

pub async fn post(State(service): State<DirectoryService>, body: Bytes) -> Response {
    let result = service.lock().post(&body);
    match result {
        Ok((id, td)) => {
            service.announce(&id, Some(&td), Registered::Created).await;
            let location = format!("/things/{id}");
            (StatusCode::CREATED, [(header::LOCATION, location)]).into_response()
        }
        Err(e) => refused(e),
    }
}

pub async fn patch(
    State(service): State<DirectoryService>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let merge = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/merge-patch+json"));
    if !merge {
        let detail = "PATCH takes a JSON merge patch (Content-Type: application/merge-patch+json)."
            .to_owned();
        return problem(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported media type",
            detail,
            Vec::new(),
        );
    }
    let result = service.lock().patch(&id, &body);
    match result {
        Ok(td) => {
            service.announce(&id, Some(&td), Registered::Updated).await;
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => refused(e),
    }
}

pub async fn delete(State(service): State<DirectoryService>, Path(id): Path<String>) -> Response {
    let result = service.lock().delete(&id);
    match result {
        Ok(()) => {
            service.announce(&id, None, Registered::Updated).await;
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => refused(e),
    }
}
