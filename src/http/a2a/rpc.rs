//! `POST /a2a/{thingID}` (with or without a trailing slash): A2A's
//! JSON-RPC methods, checked for the `A2A-Version` they ask for, then
//! dispatched (`send.rs` for messages, `query.rs` for the rest).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::errors::{self, VERSION_NOT_SUPPORTED};
use super::store::Owner;
use super::tasks::{self, Dialect, Method};
use super::{query, send, v03};
use crate::auth::Principal;
use crate::http::auth::Caller;
use crate::http::jsonrpc::{self, Incoming};
use crate::http::rpc_io;
use crate::http::HttpState;
use crate::lmos::Problem;
use crate::telemetry::RpcInfo;

/// One JSON-RPC call's context.
pub(super) struct Call {
    pub state: HttpState,
    pub principal: Principal,
    pub thing: String,
    pub id: Value,
    pub dialect: Dialect,
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

pub(super) fn answer(value: Value) -> Response {
    rpc_io::json(StatusCode::OK, &value)
}

impl Call {
    pub fn owner(&self) -> Owner {
        Owner {
            principal: self.principal.name().to_owned(),
            thing: self.thing.clone(),
        }
    }

    pub fn error(&self, code: i64, message: &str) -> Response {
        self.error_with(code, message, &[])
    }

    pub fn error_with(&self, code: i64, message: &str, meta: &[(&str, &str)]) -> Response {
        answer(errors::error(&self.id, code, message, meta))
    }

    pub fn result(&self, result: Value) -> Value {
        jsonrpc::result(&self.id, result)
    }

    pub fn not_found(&self, task: &str) -> Response {
        self.error_with(
            errors::TASK_NOT_FOUND,
            &format!("Task not found: `{task}` names no task of this caller here (unknown, another's, or expired after a2a.task_ttl_ms)."),
            &[("taskId", task)],
        )
    }

    /// A task in the caller's dialect.
    pub fn task_out(&self, task: Value) -> Value {
        match self.dialect {
            Dialect::V1 => task,
            Dialect::V03 => v03::task(&task),
        }
    }

    /// A stream event in the caller's dialect.
    pub fn event_out(&self, event: &Value) -> Value {
        match self.dialect {
            Dialect::V1 => event.clone(),
            Dialect::V03 => v03::event(event),
        }
    }

    /// An LMOS refusal (or `error` reply) as a JSON-RPC error.
    pub fn refused(&self, status: u16, text: &str) -> Response {
        let code = match status {
            400 | 404 | 401 | 403 => jsonrpc::INVALID_PARAMS,
            _ => jsonrpc::INTERNAL_ERROR,
        };
        self.error(code, text)
    }

    pub fn problem(&self, p: &Problem) -> Response {
        self.refused(
            p.kind.status(),
            &format!("{}: {}", p.kind.title(), p.detail),
        )
    }

    pub fn no_agent(&self) -> Response {
        let text = format!(
            "No agent `{}` is registered here for this caller.",
            self.thing
        );
        self.error(jsonrpc::INVALID_PARAMS, &text)
    }
}

pub fn status_of(error: &Value) -> u16 {
    match &error["status"] {
        Value::String(s) => s.parse().unwrap_or(502),
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .unwrap_or(502),
        _ => 502,
    }
}

/// `POST /a2a/{thingID}/`: as without the slash (the TCK's client, and
/// others, post to the interface URL plus `/`).
pub async fn rpc_slash(
    state: State<HttpState>,
    caller: Caller,
    thing: Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    rpc(state, caller, thing, headers, body).await
}

pub async fn rpc(
    State(state): State<HttpState>,
    caller: Caller,
    Path(thing): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let bytes = match rpc_io::read_body(&headers, body, state.mcp.body_limit).await {
        Ok(b) => b,
        Err(refused) => {
            state
                .metrics
                .limit_hit(crate::telemetry::metrics::A2A, "max_message_size");
            return refused;
        }
    };
    let Request {
        id,
        name,
        params,
        method,
        dialect,
        version,
    } = match request(&state, &headers, &bytes) {
        Ok(r) => r,
        Err(response) => return response,
    };
    // The call's SERVER span, parent of the invocation's; it lasts until
    // the answer (for a stream: until the stream starts).
    let tracer = state.gateway.tracer().clone();
    let (incoming, incoming_state) = (
        header(&headers, "traceparent"),
        header(&headers, "tracestate"),
    );
    let span = tracer.begin_rpc(
        incoming.as_deref(),
        incoming_state.as_deref(),
        &format!("{name} {thing}"),
    );
    let (traceparent, tracestate) = match &span {
        Some(s) => (
            Some(s.context.traceparent.clone()),
            s.context.tracestate.clone(),
        ),
        None => (incoming, incoming_state),
    };
    let request_id = id.to_string();
    let call = Call {
        state,
        principal: caller.principal,
        thing: thing.clone(),
        id,
        dialect,
        traceparent,
        tracestate,
    };
    let response = dispatch(call, method, &params).await;
    if let Some(span) = &span {
        let info = RpcInfo {
            protocol: "a2a",
            method: &name,
            target: &thing,
            request_id: Some(&request_id),
            session_id: None,
            protocol_version: Some(version),
            client: false,
        };
        tracer.end_rpc(span, &info, None);
    }
    response
}

/// A request this face answers.
struct Request {
    id: Value,
    name: String,
    params: Value,
    method: Method,
    dialect: Dialect,
    version: &'static str,
}

/// The body as a request of a method and version this face serves, or the
/// answer (JSON-RPC's error with its ErrorInfo, or 204 for a notification).
fn request(state: &HttpState, headers: &HeaderMap, bytes: &[u8]) -> Result<Request, Response> {
    let (id, name, params) = match jsonrpc::parse(bytes) {
        Ok(Incoming::Request { id, method, params }) => (id, method, params),
        Ok(_) => return Err(StatusCode::NO_CONTENT.into_response()),
        Err(m) => {
            state.metrics.error("a2a_malformed");
            return Err(answer(errors::error(&m.id, m.code, &m.message, &[])));
        }
    };
    let version = match errors::version(header(headers, "a2a-version").as_deref()) {
        Ok(v) => v,
        Err(asked) => {
            let text = format!("A2A-Version `{asked}` is not supported here; this interface speaks 1.0 (and 0.3, the version of a request without the header).");
            let meta = [
                ("requestedVersion", asked.as_str()),
                ("supportedVersions", "1.0,0.3"),
            ];
            return Err(answer(errors::error(
                &id,
                VERSION_NOT_SUPPORTED,
                &text,
                &meta,
            )));
        }
    };
    let Some((method, dialect)) = tasks::method(&name) else {
        let text = format!("Method not found: `{name}`");
        let meta = [("method", name.as_str())];
        return Err(answer(errors::error(
            &id,
            jsonrpc::METHOD_NOT_FOUND,
            &text,
            &meta,
        )));
    };
    Ok(Request {
        id,
        name,
        params,
        method,
        dialect,
        version,
    })
}

async fn dispatch(call: Call, method: Method, params: &Value) -> Response {
    let params = &v03::camel_keys(params);
    match method {
        Method::Send | Method::Stream => send::send(call, params, method == Method::Stream).await,
        Method::Get => query::get(call, params).await,
        Method::List => query::list(call, params),
        Method::Cancel => query::cancel(call, params).await,
        Method::Subscribe => query::subscribe(call, params),
        Method::PushConfig => call.error(
            errors::PUSH_NOT_SUPPORTED,
            "Push notifications are not supported by this agent (its Agent Card says capabilities.pushNotifications: false); stream, subscribe or poll instead.",
        ),
        Method::ExtendedCard => query::extended_card(call),
    }
}
