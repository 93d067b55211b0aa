//! The HTTP binding for properties and actions, on the WoT HTTP Basic
//! Profile's conventions, for consumers that speak neither `lmosprotocol`
//! nor MQTT (node-wot's HTTP client, `curl`):
//!
//! | operation          | request                                      | answer |
//! |--------------------|----------------------------------------------|--------|
//! | readproperty       | `GET /things/{id}/properties/{name}`         | 200, the value |
//! | writeproperty      | `PUT /things/{id}/properties/{name}`, the value | 204 |
//! | readallproperties  | `GET /things/{id}/properties`                | 200, `{name: value}` |
//! | invokeaction       | `POST /things/{id}/actions/{name}`, the input | 200 with the output (204 without) once the action completes; 201 with `Location` and a status object when it is not synchronous or takes longer than `requests.timeout_ms` |
//! | queryaction        | `GET /things/{id}/actions/{name}/{invocation}` (or without `{invocation}`: the caller's latest) | 200, `{status, output?, href}` |
//! | cancelaction       | `DELETE` on the same                         | 204 |
//!
//! Each request becomes the LMOS message a WebSocket consumer would send and
//! goes through the same gateway: the same authorization, TD checks and
//! router (see `crate::gateway::Gateway::http_request`). LMOS `error`
//! replies become `application/problem+json` with their status. A
//! `traceparent` header continues the caller's trace.

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path};
use axum::http::{header, request::Parts, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::auth::Caller;
use super::HttpState;
use crate::auth::Access;
use crate::directory::forms::status_href;
use crate::gateway::Replies;
use crate::lmos::{Body, Message, Problem, ProblemKind};

const JSON: &str = "application/json";
const PROBLEM_JSON: &str = "application/problem+json";

/// An LMOS problem as RFC 9457 problem details.
fn problem(p: &Problem, thing: &str) -> Response {
    from_error(&p.to_message(thing, None).to_value())
}

/// An LMOS `error` reply as problem details with its status.
fn from_error(error: &Value) -> Response {
    let status = match &error["status"] {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        _ => None,
    }
    .and_then(|s| StatusCode::from_u16(s).ok())
    .filter(|s| s.is_client_error() || s.is_server_error())
    .unwrap_or(StatusCode::BAD_GATEWAY);
    let mut body = Map::new();
    for member in ["type", "title", "detail", "instance"] {
        if let Some(v) = error.get(member) {
            body.insert(member.into(), v.clone());
        }
    }
    body.insert("status".into(), status.as_u16().into());
    (
        status,
        [(header::CONTENT_TYPE, PROBLEM_JSON)],
        Value::Object(body).to_string(),
    )
        .into_response()
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    (status, [(header::CONTENT_TYPE, JSON)], value.to_string()).into_response()
}

fn is_error(reply: &Value) -> bool {
    reply["messageType"] == "error"
}

/// What every handler here needs: the gateway, who calls, and the trace
/// the call continues.
pub struct Call {
    state: HttpState,
    caller: Caller,
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl FromRequestParts<HttpState> for Call {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &HttpState) -> Result<Self, Response> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let header = |name| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        Ok(Call {
            state: state.clone(),
            caller,
            traceparent: header("traceparent"),
            tracestate: header("tracestate"),
        })
    }
}

impl Call {
    /// The request as a consumer's LMOS message with the caller's trace.
    /// Its replies come with `correlation`, else with its fresh message ID.
    fn message(&self, thing: &str, body: Body, correlation: Option<String>) -> Message {
        let mut m = Message::new(thing, body);
        m.correlation_id = correlation;
        m.traceparent = self.traceparent.clone();
        m.tracestate = self.tracestate.clone();
        m
    }

    /// Sends the request and returns its replies, or the answer for a
    /// refusal.
    async fn ask(&self, message: Message) -> Result<Replies, Response> {
        let thing = message.thing_id.clone();
        self.state
            .gateway
            .http_request(&self.caller.principal, message)
            .await
            .map_err(|p| problem(&p, &thing))
    }

    /// Sends the request and returns its first reply, or the answer for a
    /// refusal, an LMOS `error` or a shutdown.
    async fn answer(
        &self,
        thing: &str,
        body: Body,
        correlation: Option<String>,
    ) -> Result<Value, Response> {
        let mut replies = self.ask(self.message(thing, body, correlation)).await?;
        first_reply(&mut replies, thing).await
    }
}

fn shutting_down(thing: &str) -> Response {
    let p = Problem::new(
        ProblemKind::Unavailable,
        "The sidecar is shutting down; the request may not have been answered.",
    );
    problem(&p, thing)
}

/// The first reply, or the answer when there is none.
async fn first_reply(replies: &mut Replies, thing: &str) -> Result<Value, Response> {
    let reply = replies.next().await.ok_or_else(|| shutting_down(thing))?;
    if is_error(&reply) {
        return Err(from_error(&reply));
    }
    Ok(reply)
}

/// A body that must be JSON (or empty: `None`).
fn parse_body(body: &Bytes, thing: &str) -> Result<Option<Value>, Response> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(body).map(Some).map_err(|e| {
        let p = Problem::new(
            ProblemKind::InvalidJson,
            format!("The request body is not JSON: {e}."),
        );
        problem(&p, thing)
    })
}

pub async fn read_property(call: Call, Path((thing, name)): Path<(String, String)>) -> Response {
    let body = Body::ReadProperty { name: name.clone() };
    match call.answer(&thing, body, None).await {
        Ok(reply) => json_response(
            StatusCode::OK,
            &reading_of(&reply, &name).unwrap_or(Value::Null),
        ),
        Err(response) => response,
    }
}

/// A property's value from a `propertyReading` or `propertyReadings` (either
/// spelling of the value member).
fn reading_of(reply: &Value, name: &str) -> Option<Value> {
    match reply["messageType"].as_str()? {
        "propertyReading" => reply.get("value").or_else(|| reply.get("data")).cloned(),
        "propertyReadings" => reply["data"].get(name).cloned(),
        _ => None,
    }
}

pub async fn write_property(
    call: Call,
    Path((thing, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let data = match parse_body(&body, &thing) {
        Ok(data) => data.unwrap_or(Value::Null),
        Err(response) => return response,
    };
    let body = Body::WriteProperty { name, data };
    match call.answer(&thing, body, None).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(response) => response,
    }
}

/// Every readable property of the Thing's description, read at once.
pub async fn read_all_properties(call: Call, Path(thing): Path<String>) -> Response {
    // Authorized before the TD is looked up: a caller without rights gets
    // the same 403 whether the Thing is registered or not.
    if let Err(denied) = call.caller.may(Access::Consume, &thing) {
        return denied;
    }
    let names: Vec<String> = {
        let directory = call.state.directory.directory();
        let Some(td) = directory.get(&thing) else {
            let p = Problem::new(
                ProblemKind::NotFound,
                format!("No Thing `{thing}` is registered with this sidecar."),
            );
            return problem(&p, &thing);
        };
        td["properties"]
            .as_object()
            .map(|props| {
                props
                    .iter()
                    .filter(|(_, p)| p["writeOnly"] != true)
                    .map(|(name, _)| name.clone())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut pending = Vec::with_capacity(names.len());
    for name in &names {
        let body = Body::ReadProperty { name: name.clone() };
        match call.ask(call.message(&thing, body, None)).await {
            Ok(replies) => pending.push((name, replies)),
            Err(response) => return response,
        }
    }
    let mut values = Map::new();
    for (name, mut replies) in pending {
        match first_reply(&mut replies, &thing).await {
            Ok(reply) => {
                values.insert(
                    name.clone(),
                    reading_of(&reply, name).unwrap_or(Value::Null),
                );
            }
            Err(response) => return response,
        }
    }
    json_response(StatusCode::OK, &Value::Object(values))
}

/// The Basic Profile's status object for an `actionStatus`.
fn status_object(status: &Value, href: &str) -> Value {
    let mut object = json!({
        "status": status["status"].clone(),
        "href": href,
    });
    if let Some(output) = status.get("output") {
        object["output"] = output.clone();
    }
    object
}

/// `201 Created`: the action goes on; its status is at `Location`.
fn accepted(status: &Value, href: &str) -> Response {
    let mut response = json_response(StatusCode::CREATED, &status_object(status, href));
    if let Ok(location) = HeaderValue::from_str(href) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

/// How a finished invocation answers a synchronous invoke.
fn finished(status: &Value, href: &str) -> Response {
    match status["status"].as_str().unwrap_or_default() {
        "completed" => match status.get("output") {
            Some(output) => json_response(StatusCode::OK, output),
            None => StatusCode::NO_CONTENT.into_response(),
        },
        ended => {
            let (code, title) = if ended == "failed" {
                (StatusCode::INTERNAL_SERVER_ERROR, "Action failed")
            } else {
                (StatusCode::CONFLICT, "Action cancelled")
            };
            let mut body = json!({
                "type": "about:blank",
                "title": title,
                "status": code.as_u16(),
                "detail": format!("The invocation ended `{ended}`; its status stays at {href}."),
            });
            if let Some(output) = status.get("output") {
                body["output"] = output.clone();
            }
            (
                code,
                [(header::CONTENT_TYPE, PROBLEM_JSON)],
                body.to_string(),
            )
                .into_response()
        }
    }
}

pub async fn invoke_action(
    call: Call,
    Path((thing, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let input = match parse_body(&body, &thing) {
        Ok(input) => input,
        Err(response) => return response,
    };
    let synchronous = {
        let directory = call.state.directory.directory();
        directory
            .get(&thing)
            .map(|td| td["actions"][&action]["synchronous"] != false)
            .unwrap_or(true)
    };
    let invocation = Uuid::new_v4().to_string();
    let href = status_href(&thing, &action, &invocation);
    let request = call.message(
        &thing,
        Body::InvokeAction {
            action: action.clone(),
            input,
        },
        Some(invocation),
    );
    let mut replies = match call.ask(request).await {
        Ok(r) => r,
        Err(response) => return response,
    };
    let mut latest = match first_reply(&mut replies, &thing).await {
        Ok(status) => status,
        Err(response) => return response,
    };
    if !synchronous {
        return accepted(&latest, &href);
    }
    // A synchronous action is answered when it ends, unless that takes
    // longer than an agent may take to answer at all: then the caller gets
    // the status resource, as for an asynchronous one.
    let deadline = tokio::time::Instant::now() + call.state.request_timeout;
    loop {
        if is_error(&latest) {
            return from_error(&latest);
        }
        if crate::lmos::is_terminal(latest["status"].as_str().unwrap_or_default()) {
            return finished(&latest, &href);
        }
        match tokio::time::timeout_at(deadline, replies.next()).await {
            Ok(Some(status)) => latest = status,
            Ok(None) => return shutting_down(&thing),
            Err(_) => return accepted(&latest, &href),
        }
    }
}

/// An action's status resource: `/things/{id}/actions/{name}` (the caller's
/// latest invocation) or `/things/{id}/actions/{name}/{invocation}`.
#[derive(serde::Deserialize)]
pub struct StatusPath {
    id: String,
    name: String,
    #[serde(default)]
    invocation: Option<String>,
}

pub async fn query_action(call: Call, Path(path): Path<StatusPath>) -> Response {
    let StatusPath {
        id: thing,
        name: action,
        invocation,
    } = path;
    let body = Body::QueryAction {
        action: action.clone(),
    };
    // Without a correlation ID the router answers for the caller's latest
    // invocation of the action.
    match call.answer(&thing, body, invocation.clone()).await {
        Ok(status) => {
            let mut object = status_object(&status, "");
            match &invocation {
                Some(i) => object["href"] = status_href(&thing, &action, i).into(),
                None => drop(object.as_object_mut().map(|o| o.remove("href"))),
            }
            json_response(StatusCode::OK, &object)
        }
        Err(response) => response,
    }
}

pub async fn cancel_action(call: Call, Path(path): Path<StatusPath>) -> Response {
    let body = Body::CancelAction {
        action: path.name,
        reason: Some("Cancelled over HTTP (DELETE).".into()),
    };
    match call.answer(&path.id, body, path.invocation).await {
        Ok(status) if matches!(status["status"].as_str(), Some("cancelled" | "canceled")) => {
            StatusCode::NO_CONTENT.into_response()
        }
        // Too late: it ended otherwise.
        Ok(status) => json_response(StatusCode::CONFLICT, &status_object(&status, "")),
        Err(response) => response,
    }
}
