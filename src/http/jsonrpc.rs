//! JSON-RPC 2.0 envelopes, shared by MCP (`/mcp`) and A2A (`/a2a/...`):
//! what a request body is, and the error objects both protocols answer
//! with. No I/O.

use serde_json::{json, Value};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;

/// One JSON-RPC message from a client.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request: an answer is owed to `id`.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification: nothing is answered.
    Notification { method: String, params: Value },
    /// A response to something the server asked (MCP servers here ask
    /// nothing, so these are acknowledged and dropped).
    Response,
}

/// Why a body is not one JSON-RPC message: the error object to answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    pub code: i64,
    pub message: String,
    /// The request's id when it could be read, else `null`.
    pub id: Value,
}

impl Malformed {
    pub fn to_value(&self) -> Value {
        error(&self.id, self.code, &self.message, None)
    }
}

fn malformed(code: i64, message: impl Into<String>, id: Value) -> Malformed {
    Malformed {
        code,
        message: message.into(),
        id,
    }
}

/// Reads one message. Batches (arrays) are refused: MCP removed them in
/// 2025-06-18 and A2A never had them.
pub fn parse(body: &[u8]) -> Result<Incoming, Malformed> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| malformed(PARSE_ERROR, format!("Parse error: {e}"), Value::Null))?;
    let Value::Object(mut object) = value else {
        let message = if value.is_array() {
            "Invalid Request: JSON-RPC batches are not supported; send one message per request"
        } else {
            "Invalid Request: the body must be a JSON-RPC 2.0 object"
        };
        return Err(malformed(INVALID_REQUEST, message, Value::Null));
    };
    let id = object.remove("id");
    let valid_id = matches!(&id, None | Some(Value::String(_) | Value::Number(_)));
    let shown_id = id.clone().filter(|_| valid_id).unwrap_or(Value::Null);
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(malformed(
            INVALID_REQUEST,
            "Invalid Request: `jsonrpc` must be \"2.0\"",
            shown_id,
        ));
    }
    if !valid_id {
        return Err(malformed(
            INVALID_REQUEST,
            "Invalid Request: `id` must be a string or a number",
            Value::Null,
        ));
    }
    let params = object.remove("params").unwrap_or(Value::Null);
    if !matches!(params, Value::Null | Value::Object(_) | Value::Array(_)) {
        return Err(malformed(
            INVALID_REQUEST,
            "Invalid Request: `params` must be an object or an array",
            shown_id,
        ));
    }
    match (object.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Ok(Incoming::Request { id, method, params }),
        (Some(Value::String(method)), None) => Ok(Incoming::Notification { method, params }),
        (Some(_), id) => Err(malformed(
            INVALID_REQUEST,
            "Invalid Request: `method` must be a string",
            id.unwrap_or(Value::Null),
        )),
        (None, Some(_)) if object.contains_key("result") || object.contains_key("error") => {
            Ok(Incoming::Response)
        }
        (None, id) => Err(malformed(
            INVALID_REQUEST,
            "Invalid Request: no `method`",
            id.unwrap_or(Value::Null),
        )),
    }
}

/// A successful response.
pub fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response.
pub fn error(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// A notification from the server.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_notifications_and_responses_are_told_apart() {
        let r = parse(br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#).unwrap();
        assert_eq!(
            r,
            Incoming::Request {
                id: json!(7),
                method: "tools/list".into(),
                params: Value::Null
            }
        );
        let n = parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(matches!(n, Incoming::Notification { .. }));
        let a = parse(br#"{"jsonrpc":"2.0","id":"s1","result":{}}"#).unwrap();
        assert_eq!(a, Incoming::Response);
    }

    #[test]
    fn malformed_messages_get_the_codes_json_rpc_names() {
        assert_eq!(parse(b"{nope").unwrap_err().code, PARSE_ERROR);
        assert_eq!(parse(b"[]").unwrap_err().code, INVALID_REQUEST);
        let e = parse(br#"{"jsonrpc":"1.0","id":3,"method":"x"}"#).unwrap_err();
        assert_eq!((e.code, e.id), (INVALID_REQUEST, json!(3)));
        let e = parse(br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#).unwrap_err();
        assert_eq!((e.code, e.id), (INVALID_REQUEST, Value::Null));
        let e = parse(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#).unwrap_err();
        assert_eq!(e.code, INVALID_REQUEST);
    }
}
