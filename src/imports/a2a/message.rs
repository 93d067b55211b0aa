//! One LMOS call as an A2A JSON-RPC request (pure; `super` sends it).
//!
//! Both wires are spoken, chosen by the card ([`Dialect`]): 1.0
//! (`SendStreamingMessage`, `ROLE_USER`, parts `{"text"}`, `{"data"}`)
//! and 0.3 (`message/stream`, `user`, parts `{"kind": "text"}`).
//!
//! The input: a string is one text part, an object or array one data part
//! (0.3 data parts must be objects: anything else goes as `{"value": …}`);
//! no input is one empty text part. The message's `metadata` is
//! `{"skill": action}`, its `messageId` fresh. An object's `taskId` and
//! `contextId` continue that task (see [`super::card::input_schema`]).

use serde_json::{json, Map, Value};

use super::card::{Dialect, Endpoint};
use crate::imports::upstream::UpstreamError;

/// The JSON-RPC methods called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Stream,
    Send,
    Cancel,
    Get,
}

pub fn method_name(dialect: Dialect, method: Method) -> &'static str {
    match (dialect, method) {
        (Dialect::V1, Method::Stream) => "SendStreamingMessage",
        (Dialect::V1, Method::Send) => "SendMessage",
        (Dialect::V1, Method::Cancel) => "CancelTask",
        (Dialect::V1, Method::Get) => "GetTask",
        (Dialect::V03, Method::Stream) => "message/stream",
        (Dialect::V03, Method::Send) => "message/send",
        (Dialect::V03, Method::Cancel) => "tasks/cancel",
        (Dialect::V03, Method::Get) => "tasks/get",
    }
}

/// A JSON-RPC request.
pub fn request(id: u64, endpoint: &Endpoint, method: Method, params: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": method_name(endpoint.dialect, method),
        "params": params,
    })
}

/// `SendStreamingMessage`/`SendMessage` params: the user's message for
/// `action` (with `input`), `message_id` fresh for each call.
pub fn send_params(
    endpoint: &Endpoint,
    action: &str,
    input: Option<&Value>,
    message_id: &str,
) -> Value {
    let dialect = endpoint.dialect;
    let (continued, input) = continuation(input);
    let mut message = Map::new();
    message.insert("messageId".into(), json!(message_id));
    message.insert("parts".into(), json!([input_part(dialect, input)]));
    message.insert("metadata".into(), json!({ "skill": action }));
    for (key, value) in continued {
        message.insert(key.into(), json!(value));
    }
    let mut params = Map::new();
    match dialect {
        Dialect::V1 => {
            message.insert("role".into(), json!("ROLE_USER"));
        }
        Dialect::V03 => {
            message.insert("role".into(), json!("user"));
            message.insert("kind".into(), json!("message"));
            // Only `message/send` reads it; a blocking send answers when
            // the task ends (1.0 blocks unless `returnImmediately`).
            params.insert("configuration".into(), json!({ "blocking": true }));
        }
    }
    params.insert("message".into(), Value::Object(message));
    with_tenant(endpoint, params)
}

/// `CancelTask`/`GetTask` params.
pub fn task_params(endpoint: &Endpoint, task_id: &str) -> Value {
    let mut params = Map::new();
    params.insert("id".into(), json!(task_id));
    with_tenant(endpoint, params)
}

fn with_tenant(endpoint: &Endpoint, mut params: Map<String, Value>) -> Value {
    if let (Dialect::V1, Some(tenant)) = (endpoint.dialect, &endpoint.tenant) {
        params.insert("tenant".into(), json!(tenant));
    }
    Value::Object(params)
}

/// Takes `taskId`/`contextId` out of an object input; an `input` member
/// left alone is the input itself.
fn continuation(input: Option<&Value>) -> (Vec<(&'static str, String)>, Option<Value>) {
    let Some(Value::Object(object)) = input else {
        return (Vec::new(), input.cloned());
    };
    let mut rest = object.clone();
    let mut ids = Vec::new();
    for key in ["taskId", "contextId"] {
        if let Some(Value::String(id)) = rest.get(key) {
            ids.push((key, id.clone()));
            rest.remove(key);
        }
    }
    if ids.is_empty() {
        return (ids, input.cloned());
    }
    match rest.remove("input") {
        Some(inner) if rest.is_empty() => (ids, Some(inner)),
        Some(inner) => {
            rest.insert("input".into(), inner);
            (ids, Some(Value::Object(rest)))
        }
        None => (ids, Some(Value::Object(rest))),
    }
}

fn input_part(dialect: Dialect, input: Option<Value>) -> Value {
    match (dialect, input.unwrap_or(Value::Null)) {
        (Dialect::V1, Value::Null) => json!({ "text": "" }),
        (Dialect::V1, Value::String(text)) => json!({ "text": text }),
        (Dialect::V1, data) => json!({ "data": data }),
        (Dialect::V03, Value::Null) => json!({ "kind": "text", "text": "" }),
        (Dialect::V03, Value::String(text)) => json!({ "kind": "text", "text": text }),
        (Dialect::V03, Value::Object(data)) => json!({ "kind": "data", "data": data }),
        (Dialect::V03, other) => json!({ "kind": "data", "data": { "value": other } }),
    }
}

/// A JSON-RPC response's `result`, or its error as an [`UpstreamError`].
pub fn rpc_result(response: Value) -> Result<Value, UpstreamError> {
    let Value::Object(mut response) = response else {
        return Err(UpstreamError::Malformed(
            "a JSON-RPC response that is no object".into(),
        ));
    };
    if let Some(error) = response.remove("error") {
        let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        return Err(UpstreamError::Refused {
            status: status_of(code),
            message: format!("the agent refused ({code}): {message}"),
        });
    }
    response.remove("result").ok_or_else(|| {
        UpstreamError::Malformed("a JSON-RPC response with neither result nor error".into())
    })
}

/// The LMOS status of an A2A/JSON-RPC error code.
fn status_of(code: i64) -> u16 {
    match code {
        -32001 => 404,                   // TaskNotFound
        -32002 => 409,                   // TaskNotCancelable
        -32003 | -32004 | -32601 => 501, // push, operation, method unsupported
        -32005 => 415,                   // ContentTypeNotSupported
        -32700 | -32600 | -32602 => 400,
        _ => 502,
    }
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;
