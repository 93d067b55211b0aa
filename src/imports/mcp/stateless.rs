//! The stateless revision's news (2026-07-28): no GET stream; a
//! `subscriptions/listen` request's answer is a stream that stays open,
//! acknowledged first, then carrying the list changes asked for. It has no
//! replay: when it ends, the client listens again and, since news may have
//! been missed meanwhile, reads the lists again.

use hyper::Method;
use serde_json::{json, Value};

use super::{Inner, REOPEN_AFTER};
use crate::imports::mcp::{revision, session};

impl Inner {
    /// Listens for `filter`'s news until `close`; a refused connection is
    /// the connection's loss, an answer that is no stream (the server
    /// serves no such request) ends listening.
    pub(super) async fn subscribe(&self, filter: Value) {
        let mut listened = false;
        loop {
            let id = self.session.next_id();
            let params = json!({"notifications": filter});
            let mut message = session::request(id, "subscriptions/listen", params);
            revision::stamp(&mut message);
            // Accepting JSON and SSE, as every POST does (the server asks both).
            let headers = self.headers(None, Some(&message));
            let body = message.to_string().into_bytes();
            let response = match self
                .http
                .request(Method::POST, &self.url, &headers, Some(body))
                .await
            {
                Ok(response) => response,
                Err(e) => return self.session.lose(&e.to_string()),
            };
            let (status, streamed) = (response.status, response.content_type());
            if !status.is_success() || streamed.as_deref() != Some("text/event-stream") {
                tracing::debug!(url = %self.url, %status, "imports: no subscriptions/listen stream from the MCP server");
                return;
            }
            if listened {
                self.session.lists_changed();
            }
            listened = true;
            self.stream(response, None).await;
            tokio::time::sleep(REOPEN_AFTER).await;
        }
    }
}
