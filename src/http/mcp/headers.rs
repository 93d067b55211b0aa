//! Which MCP revision serves a request, and the stateless revision's
//! (2026-07-28) checks of a request's `_meta` and its mirror headers
//! (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`). Sans-IO: header
//! values in, a verdict or the JSON-RPC error to answer out.
//!
//! The choice follows the specification's dual-era rules: a request that
//! carries the per-request `_meta` version, or names in its
//! `MCP-Protocol-Version` header a version that is not one of the
//! handshake revisions, is served statelessly (and checked, so an unknown
//! version gets -32022 rather than a session error); everything else
//! (`initialize`, a session's requests) is the 2025-11-25 path as before.

use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use serde_json::{json, Value};

use super::VERSIONS;
use crate::http::jsonrpc::{self, Incoming};

/// The stateless revision.
pub const MODERN: &str = "2026-07-28";

/// The headers disagree with the body, or one is missing or malformed.
pub const HEADER_MISMATCH: i64 = -32020;
/// The request's protocol version is not served.
pub const UNSUPPORTED_VERSION: i64 = -32022;

pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

pub const VERSION_HEADER: &str = "mcp-protocol-version";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";

/// Every version `/mcp` serves, newest first (`supportedVersions`).
pub fn supported() -> Vec<&'static str> {
    std::iter::once(MODERN).chain(VERSIONS).collect()
}

/// Which revision's rules a request is served by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2024-11-05 … 2025-11-25: `initialize`, then a session.
    Handshake,
    /// 2026-07-28 and anything newer-looking: per request, no session.
    Stateless,
}

/// The era of a POST: by its `_meta` version, else by its version header.
pub fn era(headers: &HeaderMap, message: &Incoming) -> Era {
    let params = match message {
        Incoming::Request { params, .. } | Incoming::Notification { params, .. } => params,
        Incoming::Response => &Value::Null,
    };
    if params["_meta"].get(PROTOCOL_VERSION).is_some() {
        return Era::Stateless;
    }
    match headers.get(VERSION_HEADER) {
        None => Era::Handshake,
        Some(v) => match v.to_str().map(str::trim) {
            Ok(v) if VERSIONS.contains(&v) => Era::Handshake,
            _ => Era::Stateless,
        },
    }
}

/// The era of a GET or DELETE, which has no body: the stateless revision
/// has neither (405).
pub fn stateless_header(headers: &HeaderMap) -> bool {
    headers
        .get(VERSION_HEADER)
        .is_some_and(|v| v.to_str().map_or(true, |v| !VERSIONS.contains(&v.trim())))
}

/// A refused request: the HTTP status and the JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub status: StatusCode,
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl Refusal {
    fn bad(code: i64, message: impl Into<String>) -> Refusal {
        Refusal {
            status: StatusCode::BAD_REQUEST,
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn to_value(&self, id: &Value) -> Value {
        jsonrpc::error(id, self.code, &self.message, self.data.clone())
    }
}

/// A header's value as text, trimmed of the optional whitespace HTTP
/// allows around it; `Err` when it is not visible ASCII.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, Refusal> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(text) => Ok(Some(text.trim())),
        Err(_) => Err(Refusal::bad(
            HEADER_MISMATCH,
            format!("Header mismatch: {name} holds characters a header may not"),
        )),
    }
}

/// A `Mcp-Name` value as the body has it: the `=?base64?…?=` escape
/// undone; `None` when the escape is broken.
pub fn decoded(value: &str) -> Option<String> {
    let Some(inner) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Some(value.to_owned());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(inner)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Checks a stateless request: a version header nobody serves (-32022),
/// its `_meta` (-32602), its headers against its body (-32020), its
/// version (-32022), in the order the specification's conformance suite
/// expects.
pub fn check(headers: &HeaderMap, method: &str, params: &Value) -> Result<(), Refusal> {
    // A version nobody serves is named as such, whatever else is wrong
    // (an old client that sends only the header learns what to speak).
    if let Some(v) = header(headers, VERSION_HEADER)? {
        if v != MODERN && !VERSIONS.contains(&v) {
            return Err(unsupported(v));
        }
    }
    let meta = &params["_meta"];
    let Some(version) = meta[PROTOCOL_VERSION].as_str() else {
        return Err(Refusal::bad(
            jsonrpc::INVALID_PARAMS,
            format!("Invalid params: `_meta` must carry `{PROTOCOL_VERSION}` (a string)"),
        ));
    };
    if !meta[CLIENT_CAPABILITIES].is_object() {
        return Err(Refusal::bad(
            jsonrpc::INVALID_PARAMS,
            format!("Invalid params: `_meta` must carry `{CLIENT_CAPABILITIES}` (an object)"),
        ));
    }
    let mismatch = |what: String| {
        Err(Refusal::bad(
            HEADER_MISMATCH,
            format!("Header mismatch: {what}"),
        ))
    };
    match header(headers, VERSION_HEADER)? {
        None => return mismatch("no MCP-Protocol-Version header".into()),
        Some(v) if v != version => {
            return mismatch(format!(
                "MCP-Protocol-Version `{v}` does not match the body's `{version}`"
            ))
        }
        Some(_) => {}
    }
    match header(headers, METHOD_HEADER)? {
        None => return mismatch("no Mcp-Method header".into()),
        Some(m) if m != method => {
            return mismatch(format!(
                "Mcp-Method `{m}` does not match the body's `{method}`"
            ))
        }
        Some(_) => {}
    }
    check_name(headers, method, params)?;
    if version != MODERN {
        return Err(unsupported(version));
    }
    Ok(())
}

/// `Mcp-Name` of a call, a read or a prompt: the body's name or URI.
fn check_name(headers: &HeaderMap, method: &str, params: &Value) -> Result<(), Refusal> {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return Ok(()),
    };
    let body = params[key].as_str();
    let mismatch = |what: &str| {
        Err(Refusal::bad(
            HEADER_MISMATCH,
            format!("Header mismatch: {what}"),
        ))
    };
    match (header(headers, NAME_HEADER)?, body) {
        (None, None) => Ok(()),
        (None, Some(_)) => mismatch("no Mcp-Name header"),
        (Some(_), None) => mismatch(&format!("Mcp-Name given but the body has no `{key}`")),
        (Some(h), Some(b)) => match decoded(h) {
            Some(h) if h == b => Ok(()),
            Some(_) => mismatch(&format!("Mcp-Name does not match the body's `{key}`")),
            None => mismatch("Mcp-Name is not valid =?base64?…?= of UTF-8"),
        },
    }
}

/// `UnsupportedProtocolVersionError`, naming what is served.
pub fn unsupported(requested: &str) -> Refusal {
    let requested: String = requested.chars().take(64).collect();
    Refusal {
        status: StatusCode::BAD_REQUEST,
        code: UNSUPPORTED_VERSION,
        message: "Unsupported protocol version".into(),
        data: Some(json!({"supported": supported(), "requested": requested})),
    }
}

/// Methods of the handshake revisions that 2026-07-28 removed: answered
/// 404 and -32601 there, whatever the dispatch knows.
pub fn removed(method: &str) -> bool {
    matches!(
        method,
        "initialize"
            | "ping"
            | "logging/setLevel"
            | "resources/subscribe"
            | "resources/unsubscribe"
    ) || method.starts_with("notifications/")
}

/// How long a list may be taken as fresh: about as long as the host watch
/// takes to see an agent come or go (`subscriptions/listen` says so sooner).
const LIST_TTL_MS: u64 = 1_000;
/// What a server's discovery result says does not change while it runs.
const DISCOVER_TTL_MS: u64 = 60_000;

/// A stateless result as the revision shapes it: `resultType`, and the
/// cache hints of the cacheable methods. Lists are `private`: what a
/// caller sees depends on its rights.
pub fn shape(method: &str, result: &mut Value) {
    let Some(fields) = result.as_object_mut() else {
        return;
    };
    fields
        .entry("resultType")
        .or_insert_with(|| json!("complete"));
    let (ttl, scope) = match method {
        "server/discover" => (DISCOVER_TTL_MS, "public"),
        "tools/list"
        | "prompts/list"
        | "resources/list"
        | "resources/templates/list"
        | "resources/read" => (LIST_TTL_MS, "private"),
        _ => return,
    };
    fields.entry("ttlMs").or_insert_with(|| json!(ttl));
    fields.entry("cacheScope").or_insert_with(|| json!(scope));
}

#[cfg(test)]
#[path = "headers_tests.rs"]
mod tests;
