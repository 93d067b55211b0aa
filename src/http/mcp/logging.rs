//! MCP logging: `logging/setLevel` keeps a level per session, and a
//! `tools/call` tells a client that set one what the sidecar would tell
//! any consumer about the invocation, as `notifications/message` on the
//! call's stream: that it went to the agent (`debug`), the agent's progress
//! text (`info`), how it ended when it did not complete and the errors the
//! router or the agent answered (`error`). Without a level (the default),
//! no log notifications: a client that never asked gets none.

use serde_json::{json, Value};

use crate::http::jsonrpc;
use crate::http::rpc_io::{Offered, SseSender};

/// RFC 5424's severities, as MCP names them, least severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

const NAMES: [(&str, Level); 8] = [
    ("debug", Level::Debug),
    ("info", Level::Info),
    ("notice", Level::Notice),
    ("warning", Level::Warning),
    ("error", Level::Error),
    ("critical", Level::Critical),
    ("alert", Level::Alert),
    ("emergency", Level::Emergency),
];

impl Level {
    pub fn parse(name: &str) -> Option<Level> {
        NAMES.iter().find(|(n, _)| *n == name).map(|(_, l)| *l)
    }

    pub fn as_str(self) -> &'static str {
        NAMES
            .iter()
            .find(|(_, l)| *l == self)
            .map(|(n, _)| *n)
            .unwrap_or("info")
    }
}

/// The level `logging/setLevel` asks for, or the JSON-RPC error for a
/// request without a known one (`-32602`, as the specification says).
pub fn requested(id: &Value, params: &Value) -> Result<Level, Value> {
    let name = params["level"].as_str().unwrap_or_default();
    Level::parse(name).ok_or_else(|| {
        let text = format!(
            "Invalid params: `level` must be one of {:?}",
            NAMES.map(|(n, _)| n)
        );
        jsonrpc::error(id, jsonrpc::INVALID_PARAMS, &text, None)
    })
}

/// One `notifications/message`.
pub fn message(level: Level, logger: &str, data: Value) -> Value {
    let params = json!({"level": level.as_str(), "logger": logger, "data": data});
    jsonrpc::notification("notifications/message", params)
}

/// Where a call's log notifications go, and from which level.
#[derive(Clone)]
pub struct CallLog {
    pub sse: SseSender,
    pub threshold: Level,
    /// The tool's name: the `logger` the client sees.
    pub logger: String,
}

impl CallLog {
    /// Sends `text` at `level` if the client's threshold lets it through;
    /// `false` when the client's stream is gone.
    pub fn log(&self, level: Level, text: &str) -> bool {
        if level < self.threshold {
            return true;
        }
        !matches!(
            self.sse.offer(&message(level, &self.logger, json!(text))),
            Offered::Gone
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_order_and_parse_as_mcp_names_them() {
        assert!(Level::Debug < Level::Info && Level::Error < Level::Emergency);
        for (name, level) in NAMES {
            assert_eq!(Level::parse(name), Some(level));
            assert_eq!(level.as_str(), name);
        }
        assert_eq!(Level::parse("verbose"), None);
        let refused = requested(&json!(3), &json!({"level": "loud"})).unwrap_err();
        assert_eq!(refused["error"]["code"], jsonrpc::INVALID_PARAMS);
        assert_eq!(
            requested(&json!(3), &json!({"level": "warning"})).unwrap(),
            Level::Warning
        );
        let note = message(Level::Error, "getWeather", json!("no sky"));
        assert_eq!(note["method"], "notifications/message");
        assert_eq!(note["params"]["level"], "error");
    }
}
