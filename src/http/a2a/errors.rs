//! A2A's errors on JSON-RPC: the codes of the specification's table (§5.4)
//! and `error.data` as an array holding a `google.rpc.ErrorInfo` with the
//! A2A reason (§9.5), as the official SDKs read it. No I/O.

use serde_json::{json, Map, Value};

use crate::http::jsonrpc;

pub const TASK_NOT_FOUND: i64 = -32001;
pub const TASK_NOT_CANCELABLE: i64 = -32002;
pub const PUSH_NOT_SUPPORTED: i64 = -32003;
pub const UNSUPPORTED_OPERATION: i64 = -32004;
pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
pub const VERSION_NOT_SUPPORTED: i64 = -32009;

const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const DOMAIN: &str = "a2a-protocol.org";

/// The ErrorInfo reason of a code.
pub fn reason(code: i64) -> &'static str {
    match code {
        TASK_NOT_FOUND => "TASK_NOT_FOUND",
        TASK_NOT_CANCELABLE => "TASK_NOT_CANCELABLE",
        PUSH_NOT_SUPPORTED => "PUSH_NOTIFICATION_NOT_SUPPORTED",
        UNSUPPORTED_OPERATION => "UNSUPPORTED_OPERATION",
        CONTENT_TYPE_NOT_SUPPORTED => "CONTENT_TYPE_NOT_SUPPORTED",
        -32006 => "INVALID_AGENT_RESPONSE",
        -32007 => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        -32008 => "EXTENSION_SUPPORT_REQUIRED",
        VERSION_NOT_SUPPORTED => "VERSION_NOT_SUPPORTED",
        jsonrpc::PARSE_ERROR => "JSON_PARSE_ERROR",
        jsonrpc::INVALID_REQUEST => "INVALID_REQUEST",
        jsonrpc::METHOD_NOT_FOUND => "METHOD_NOT_FOUND",
        jsonrpc::INVALID_PARAMS => "INVALID_PARAMS",
        _ => "INTERNAL_ERROR",
    }
}

/// A JSON-RPC error response with its ErrorInfo; `metadata` string values
/// only, as ErrorInfo's `map<string, string>` takes.
pub fn error(id: &Value, code: i64, message: &str, metadata: &[(&str, &str)]) -> Value {
    let mut meta = Map::new();
    for (k, v) in metadata {
        meta.insert((*k).to_owned(), Value::String((*v).to_owned()));
    }
    meta.insert("timestamp".into(), crate::lmos::now_timestamp().into());
    let info =
        json!({"@type": ERROR_INFO, "reason": reason(code), "domain": DOMAIN, "metadata": meta});
    jsonrpc::error(id, code, message, Some(json!([info])))
}

/// The `A2A-Version` a request asks for: absent or empty is 0.3 (§3.6.2);
/// the patch number is ignored. `Err` with what was asked when it is not
/// 0.3 or 1.0.
pub fn version(header: Option<&str>) -> Result<&'static str, String> {
    let asked = header.map(str::trim).unwrap_or_default();
    if asked.is_empty() {
        return Ok("0.3");
    }
    let mut numbers = asked.split('.');
    let major = numbers.next().and_then(|n| n.parse::<u32>().ok());
    let minor = numbers.next().map_or(Some(0), |n| n.parse::<u32>().ok());
    match (major, minor) {
        (Some(1), Some(0)) => Ok("1.0"),
        (Some(0), Some(3)) => Ok("0.3"),
        _ => Err(asked.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_error_info() {
        assert_eq!(version(None), Ok("0.3"));
        assert_eq!(version(Some("")), Ok("0.3"));
        assert_eq!(version(Some("1.0")), Ok("1.0"));
        assert_eq!(version(Some("1.0.2")), Ok("1.0"));
        assert_eq!(version(Some("0.3")), Ok("0.3"));
        assert_eq!(version(Some("99.0")), Err("99.0".into()));
        let e = error(
            &json!(1),
            TASK_NOT_FOUND,
            "Task not found",
            &[("taskId", "x")],
        );
        let info = &e["error"]["data"][0];
        assert_eq!(info["@type"], ERROR_INFO);
        assert_eq!(info["reason"], "TASK_NOT_FOUND");
        assert_eq!(info["domain"], "a2a-protocol.org");
        assert_eq!(info["metadata"]["taskId"], "x");
    }
}
