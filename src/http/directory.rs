//! The WoT Discovery HTTP API: `/.well-known/wot`, `/things`, `/things/{id}`.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Caller;
use crate::auth::Access;
use crate::directory::{DirectoryError, DirectoryService, Registered, TdError};
use crate::store::Ticket;
use tracing::warn;

const TD_JSON: &str = "application/td+json";
const PROBLEM_JSON: &str = "application/problem+json";
const DEFAULT_PAGE: usize = 100;

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
        e @ DirectoryError::TooLarge { .. } => problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Thing Description too large",
            e.to_string(),
            Vec::new(),
        ),
        // The directory as a whole is full: no retry helps until someone
        // deletes, which is what 507 says (RFC 4918), not 429's "later".
        e @ DirectoryError::Full { .. } => problem(
            StatusCode::INSUFFICIENT_STORAGE,
            "Directory full",
            e.to_string(),
            Vec::new(),
        ),
        e @ DirectoryError::Quota(_) => problem(
            StatusCode::TOO_MANY_REQUESTS,
            "Quota exceeded",
            e.to_string(),
            Vec::new(),
        ),
    }
}

/// Waits until a change of the TD `id` is on disk (`store`); the answer
/// when it cannot be: `507`, the change made in memory only.
async fn on_disk(ticket: Option<Ticket>, id: &str) -> Result<(), Response> {
    let Some(ticket) = ticket else {
        return Ok(());
    };
    ticket.durable().await.map_err(|e| {
        warn!(thing = %id, error = %e, "A directory change could not be written to the store.");
        let detail = format!("The change of `{id}` is made in this sidecar's memory, but it could not be written to disk ({e}): it will not survive a restart.");
        problem(StatusCode::INSUFFICIENT_STORAGE, "Not stored", detail, Vec::new())
    })
}

fn td_response(status: StatusCode, td: &Value) -> Response {
    (status, [(header::CONTENT_TYPE, TD_JSON)], td.to_string()).into_response()
}

pub async fn well_known(State(service): State<DirectoryService>) -> Response {
    td_response(StatusCode::OK, service.description())
}

#[derive(Debug, Deserialize)]
pub struct Page {
    offset: Option<usize>,
    limit: Option<usize>,
}

/// Lists the Things the caller may consume.
pub async fn list(
    State(service): State<DirectoryService>,
    caller: Caller,
    Query(page): Query<Page>,
) -> Response {
    let offset = page.offset.unwrap_or(0);
    let limit = page.limit.unwrap_or(DEFAULT_PAGE).max(1);
    let (body, total) = {
        let directory = service.directory();
        let (things, total) = if caller.principal.may_all(Access::Consume) {
            directory.list(offset, limit)
        } else {
            let (all, _) = directory.list(0, usize::MAX);
            let visible: Vec<&Value> = all
                .into_iter()
                .filter(|td| {
                    td["id"]
                        .as_str()
                        .is_some_and(|id| caller.principal.may(Access::Consume, id))
                })
                .collect();
            let total = visible.len();
            (
                visible.into_iter().skip(offset).take(limit).collect(),
                total,
            )
        };
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

pub async fn get(
    State(service): State<DirectoryService>,
    caller: Caller,
    Path(id): Path<String>,
) -> Response {
    if let Err(denied) = caller.may(Access::Consume, &id) {
        return denied;
    }
    let td = service.directory().get(&id).cloned();
    match td {
        Some(td) => td_response(StatusCode::OK, &td),
        None => refused(DirectoryError::NotFound(id)),
    }
}

pub async fn put(
    State(service): State<DirectoryService>,
    caller: Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    if let Err(denied) = caller.may(Access::Host, &id) {
        return denied;
    }
    let owner = Some(caller.principal.name());
    let (result, ticket) = {
        let mut directory = service.directory();
        let result = directory.put_as(owner, Some(&id), &body);
        let ticket = result.is_ok().then(|| service.persist(&directory, &id));
        (result, ticket.flatten())
    };
    match result {
        Ok((registered, td)) => {
            service.announce(&id, Some(&td), registered).await;
            if let Err(refused) = on_disk(ticket, &id).await {
                return refused;
            }
            match registered {
                Registered::Created => StatusCode::CREATED.into_response(),
                Registered::Updated => StatusCode::NO_CONTENT.into_response(),
            }
        }
        Err(e) => refused(e),
    }
}

/// An anonymous TD gets a new `urn:uuid:` id, so the caller must be
/// allowed to host whatever id that is.
pub async fn post(
    State(service): State<DirectoryService>,
    caller: Caller,
    body: Bytes,
) -> Response {
    if let Err(denied) = caller.may(Access::Host, "urn:uuid:") {
        return denied;
    }
    let (result, ticket) = {
        let mut directory = service.directory();
        let result = directory.post(Some(caller.principal.name()), &body);
        let ticket = match &result {
            Ok((id, _)) => service.persist(&directory, id),
            Err(_) => None,
        };
        (result, ticket)
    };
    match result {
        Ok((id, td)) => {
            service.announce(&id, Some(&td), Registered::Created).await;
            if let Err(refused) = on_disk(ticket, &id).await {
                return refused;
            }
            let location = format!("/things/{id}");
            (StatusCode::CREATED, [(header::LOCATION, location)]).into_response()
        }
        Err(e) => refused(e),
    }
}

pub async fn patch(
    State(service): State<DirectoryService>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(denied) = caller.may(Access::Host, &id) {
        return denied;
    }
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
    let (result, ticket) = {
        let mut directory = service.directory();
        let result = directory.patch(Some(caller.principal.name()), &id, &body);
        let ticket = result.is_ok().then(|| service.persist(&directory, &id));
        (result, ticket.flatten())
    };
    match result {
        Ok(td) => {
            service.announce(&id, Some(&td), Registered::Updated).await;
            if let Err(refused) = on_disk(ticket, &id).await {
                return refused;
            }
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => refused(e),
    }
}

pub async fn delete(
    State(service): State<DirectoryService>,
    caller: Caller,
    Path(id): Path<String>,
) -> Response {
    if let Err(denied) = caller.may(Access::Host, &id) {
        return denied;
    }
    let (result, ticket) = {
        let mut directory = service.directory();
        let result = directory.delete(&id);
        let ticket = result.is_ok().then(|| service.persist(&directory, &id));
        (result, ticket.flatten())
    };
    match result {
        Ok(()) => {
            service.announce(&id, None, Registered::Updated).await;
            if let Err(refused) = on_disk(ticket, &id).await {
                return refused;
            }
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => refused(e),
    }
}
