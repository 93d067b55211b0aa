//! STUB (helper mcprev): the API helper mcpfeat provides for
//! `subscriptions/listen`'s `resourceSubscriptions`; the lead takes
//! mcpfeat's file at merge.

use serde_json::{json, Value};

use crate::auth::Principal;
use crate::http::HttpState;

/// The readings of one resource, as `notifications/resources/updated`.
pub struct ResourceWatch;

/// A watch on `uri` for `principal`; `Err` is a JSON-RPC error object.
pub async fn watch(
    _state: &HttpState,
    _principal: &Principal,
    uri: &str,
) -> Result<ResourceWatch, Value> {
    let message = format!("Resource subscriptions are not supported: `{uri}`");
    Err(json!({"code": -32602, "message": message}))
}

impl ResourceWatch {
    /// The next `notifications/resources/updated` notification; `None`
    /// when the watch ended.
    pub async fn next(&mut self) -> Option<Value> {
        None
    }
}
