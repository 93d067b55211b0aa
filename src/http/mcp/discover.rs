//! `server/discover` (2026-07-28): what the server is, without a session.

use serde_json::{json, Value};

use super::headers::{supported, SERVER_INFO};
use super::{capabilities, server_info, INSTRUCTIONS};

/// The `DiscoverResult` (the stateless envelope adds `resultType` and the
/// cache hints).
pub fn result() -> Value {
    json!({
        "supportedVersions": supported(),
        "capabilities": capabilities(),
        "instructions": INSTRUCTIONS,
        "_meta": {SERVER_INFO: server_info()},
    })
}
