//! MCP over Streamable HTTP: every message is a POST to the server's
//! endpoint; a request's answer comes back as JSON or as an SSE stream
//! carrying notifications (progress) and then the answer; a GET stream,
//! where the server offers one, carries what it says unasked (its lists
//! changed). The session's ID and the negotiated protocol version go on
//! every request after `initialize`; the session is deleted at close; a
//! 404 on it means the server forgot it (the connection is lost).
//!
//! Speaking 2026-07-28 (`super::revision`), there is no session: each
//! request carries the revision's envelope and routing headers, and a
//! `subscriptions/listen` request's stream takes the GET stream's place
//! (`stateless`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::header::{HeaderName, ACCEPT, CONTENT_TYPE};
use hyper::{Method, StatusCode};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::revision;
use super::session::Session;
use crate::config::ImportConfig;
use crate::imports::http::{HttpClient, Response};
use crate::imports::upstream::UpstreamError;
use crate::telemetry::TraceContext;

const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
const METHOD: HeaderName = HeaderName::from_static("mcp-method");
const NAME: HeaderName = HeaderName::from_static("mcp-name");

#[path = "stateless.rs"]
mod stateless;

/// How often a GET stream that ended is opened again.
const REOPEN_AFTER: Duration = Duration::from_secs(1);

/// One Streamable HTTP connection; dropping it ends its reading tasks.
#[derive(Debug)]
pub(crate) struct Streamable {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    http: HttpClient,
    url: String,
    max: usize,
    connect_timeout: Duration,
    session: Arc<Session>,
    /// `Mcp-Session-Id`, once the server gave one.
    session_id: Mutex<Option<String>>,
    /// `MCP-Protocol-Version`, once negotiated.
    protocol: Mutex<Option<String>>,
    /// Ends the reading tasks (answers' streams, the GET stream) at close.
    stop: CancellationToken,
}

impl Streamable {
    pub(crate) fn new(
        config: &ImportConfig,
        url: &str,
        session: Arc<Session>,
    ) -> Result<Streamable, UpstreamError> {
        Ok(Streamable {
            inner: Arc::new(Inner {
                http: HttpClient::new(config)?,
                url: url.to_owned(),
                max: config.max_message_bytes,
                connect_timeout: config.connect_timeout(),
                session,
                session_id: Mutex::new(None),
                protocol: Mutex::new(None),
                stop: CancellationToken::new(),
            }),
        })
    }

    /// The protocol version negotiated, sent on every later request
    /// (`None`: none yet, as before `initialize`, which starts afresh: no
    /// session a probe may have been given).
    pub(crate) fn set_protocol(&self, version: Option<&str>) {
        *lock(&self.inner.protocol) = version.map(str::to_owned);
        if version.is_none() {
            *lock(&self.inner.session_id) = None;
        }
    }

    /// Whether it speaks the stateless revision.
    pub(crate) fn is_modern(&self) -> bool {
        self.inner.is_modern()
    }

    /// Sends one message. A request (`id`) is sent and its answer read by a
    /// task of its own, so that waiting for it can be cancelled and timed
    /// by the caller; a failure ends that request in the session. Anything
    /// else (a notification, a reply) is sent before this returns, so that
    /// `notifications/initialized` comes before the next request.
    pub(crate) async fn send(
        &self,
        message: &Value,
        id: Option<u64>,
        trace: Option<&TraceContext>,
        extra: &[(String, String)],
    ) -> Result<(), UpstreamError> {
        // Speaking 2026-07-28, each request carries the revision's envelope.
        let stamped = (id.is_some() && self.inner.is_modern()).then(|| {
            let mut stamped = message.clone();
            revision::stamp(&mut stamped);
            stamped
        });
        let message = stamped.as_ref().unwrap_or(message);
        let body =
            serde_json::to_vec(message).map_err(|e| UpstreamError::Malformed(e.to_string()))?;
        let mut headers = self.inner.headers(trace, Some(message));
        for (name, value) in extra {
            // A name no header can have (the server's own token) is left out.
            if let Ok(name) = HeaderName::try_from(name.as_str()) {
                headers.push((name, value.clone()));
            }
        }
        let Some(id) = id else {
            let response = self.inner.post(&headers, body).await?;
            return self.inner.accepted(response).await;
        };
        let inner = self.inner.clone();
        // Reading stops when the request stops waiting (cancelled, timed
        // out), even if the server never answers it.
        let done = self.inner.session.done(id);
        tokio::spawn(async move {
            let stop = inner.stop.clone();
            let answered = async {
                match inner.post(&headers, body).await {
                    Ok(response) => inner.answer(id, response).await,
                    Err(e) => inner.session.fail(id, e),
                }
            };
            tokio::select! {
                () = answered => {}
                () = stop.cancelled() => {}
                () = done.cancelled() => {}
            }
        });
        Ok(())
    }

    /// Opens the GET stream for what the server says unasked, if it offers
    /// one (405: it does not), and keeps it open until `close`; speaking
    /// 2026-07-28, a `subscriptions/listen` stream for `filter` instead
    /// (none without one).
    pub(crate) fn listen(&self, filter: Option<Value>) {
        let inner = self.inner.clone();
        let modern = inner.is_modern();
        if modern && filter.is_none() {
            return;
        }
        tokio::spawn(async move {
            let stop = inner.stop.clone();
            let listened = async {
                match filter {
                    Some(filter) if modern => inner.subscribe(filter).await,
                    _ => inner.listen().await,
                }
            };
            tokio::select! {
                () = listened => {}
                () = stop.cancelled() => {}
            }
        });
    }

    /// Ends the reading tasks and deletes the session (if the server gave
    /// one; within `connect_timeout`, its answer ignored).
    pub(crate) async fn close(&self) {
        self.inner.stop.cancel();
        if lock(&self.inner.session_id).is_none() {
            return;
        }
        let headers = self.inner.headers(None, None);
        let delete = self
            .inner
            .http
            .request(Method::DELETE, &self.inner.url, &headers, None);
        let _ = tokio::time::timeout(self.inner.connect_timeout, delete).await;
    }
}

impl Drop for Streamable {
    fn drop(&mut self) {
        self.inner.stop.cancel();
    }
}

impl Inner {
    fn is_modern(&self) -> bool {
        lock(&self.protocol).as_deref() == Some(revision::MODERN)
    }

    /// The headers of a POST of `message` (or of a GET or DELETE).
    fn headers(
        &self,
        trace: Option<&TraceContext>,
        message: Option<&Value>,
    ) -> Vec<(HeaderName, String)> {
        let mut headers = vec![
            (ACCEPT, "application/json, text/event-stream".to_owned()),
            (CONTENT_TYPE, "application/json".to_owned()),
        ];
        if let Some(id) = lock(&self.session_id).clone() {
            headers.push((SESSION_ID, id));
        }
        if let Some(version) = lock(&self.protocol).clone() {
            headers.push((PROTOCOL_VERSION, version));
        }
        if let Some(message) = message.filter(|_| self.is_modern()) {
            let (method, name) = revision::routing(message);
            headers.extend(method.map(|method| (METHOD, method)));
            headers.extend(name.map(|name| (NAME, name)));
        }
        if let Some(trace) = trace {
            headers.push((TRACEPARENT, trace.traceparent.clone()));
            if let Some(state) = &trace.tracestate {
                headers.push((TRACESTATE, state.clone()));
            }
        }
        headers
    }

    async fn post(
        &self,
        headers: &[(HeaderName, String)],
        body: Vec<u8>,
    ) -> Result<Response, UpstreamError> {
        let response = self
            .http
            .request(Method::POST, &self.url, headers, Some(body))
            .await?;
        if let Some(id) = response
            .headers
            .get(&SESSION_ID)
            .and_then(|v| v.to_str().ok())
        {
            // The server names its session in its answer to `initialize`.
            lock(&self.session_id).get_or_insert_with(|| id.to_owned());
        }
        if response.status == StatusCode::NOT_FOUND && lock(&self.session_id).is_some() {
            self.session.lose("the server ended the session (HTTP 404)");
        }
        Ok(response)
    }

    /// The answer to a notification or reply: any 2xx will do.
    async fn accepted(&self, response: Response) -> Result<(), UpstreamError> {
        if response.status.is_success() {
            return Ok(());
        }
        Err(self.refused(response).await)
    }

    /// The answer to request `id`: JSON, or an SSE stream until its answer.
    async fn answer(&self, id: u64, response: Response) {
        if !response.status.is_success() {
            return self.session.fail(id, self.refused(response).await);
        }
        match response.content_type().as_deref() {
            Some("application/json") => match response.bytes_capped(self.max).await {
                Ok(bytes) => self.receive(&bytes, Some(id)),
                Err(e) => self.session.fail(id, e),
            },
            Some("text/event-stream") => self.stream(response, Some(id)).await,
            other => {
                let what = format!("an answer of type {other:?} (HTTP {})", response.status);
                self.session.fail(id, UpstreamError::Malformed(what));
            }
        }
        if self.session.is_pending(id) {
            let ended =
                UpstreamError::Unreachable("the server's answer ended without the response".into());
            self.session.fail(id, ended);
        }
    }

    /// Reads an SSE stream's messages into the session; for a request's
    /// stream, until its answer came (a broken or overlong event ends it).
    async fn stream(&self, response: Response, id: Option<u64>) {
        let mut events = response.events(self.max);
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    if let Some(id) = id {
                        self.session.fail(id, e);
                    }
                    return;
                }
            };
            // Priming events (an ID, no data) and other event types skipped.
            if event.data.is_empty() || !matches!(event.event.as_str(), "" | "message") {
                continue;
            }
            self.receive(event.data.as_bytes(), id);
            if id.is_some_and(|id| !self.session.is_pending(id)) {
                return;
            }
        }
    }

    /// A message into the session; what it asks of the client is answered
    /// by POSTs of their own; one that is no JSON-RPC on a request's own
    /// stream ends that request.
    fn receive(&self, bytes: &[u8], id: Option<u64>) {
        let inbound = self.session.receive(bytes);
        if let (true, Some(id)) = (inbound.malformed, id) {
            self.session
                .fail(id, UpstreamError::Malformed("no JSON-RPC message".into()));
        }
        for reply in inbound.replies {
            let headers = self.headers(None, Some(&reply));
            let body = reply.to_string().into_bytes();
            let http = self.http.clone();
            let url = self.url.clone();
            tokio::spawn(
                async move { http.request(Method::POST, &url, &headers, Some(body)).await },
            );
        }
    }

    /// An answer that is no success, as the error it means: a JSON-RPC
    /// error if the body holds one, else the HTTP status (a server's 5xx is
    /// a bad gateway to the consumer).
    async fn refused(&self, response: Response) -> UpstreamError {
        let status = response.status;
        let body = response
            .bytes_capped(self.max.min(64 * 1024))
            .await
            .unwrap_or_default();
        let code = match status.as_u16() {
            400..=499 => status.as_u16(),
            _ => 502,
        };
        let error = serde_json::from_slice::<Value>(&body)
            .ok()
            .map(|v| v["error"].clone())
            .unwrap_or_default();
        let mut message = error["message"].as_str().map_or_else(
            || String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
            str::to_owned,
        );
        if let Some(supported) = error["data"]["supported"].as_array() {
            // -32022: which revisions it would have spoken.
            let supported = Value::Array(supported.iter().take(10).cloned().collect());
            let supported: String = supported.to_string().chars().take(200).collect();
            message = format!("{message} (it supports {supported})");
        }
        UpstreamError::Refused {
            status: code,
            message: format!("HTTP {status}: {message}"),
        }
    }

    /// The GET stream, opened again when it ends; a refused connection or
    /// a 404 is the connection's loss.
    async fn listen(&self) {
        loop {
            let mut headers = self.headers(None, None);
            headers.retain(|(name, _)| *name != ACCEPT && *name != CONTENT_TYPE);
            headers.push((ACCEPT, "text/event-stream".to_owned()));
            let response = match self
                .http
                .request(Method::GET, &self.url, &headers, None)
                .await
            {
                Ok(response) => response,
                Err(e) => return self.session.lose(&e.to_string()),
            };
            let (status, streamed) = (response.status, response.content_type());
            if status == StatusCode::NOT_FOUND {
                return self.session.lose("the server ended the session (HTTP 404)");
            }
            if !status.is_success() || streamed.as_deref() != Some("text/event-stream") {
                // 405: the server offers no such stream; others: not now.
                tracing::debug!(url = %self.url, %status, "imports: no GET stream from the MCP server");
                return;
            }
            self.stream(response, None).await;
            tokio::time::sleep(REOPEN_AFTER).await;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
