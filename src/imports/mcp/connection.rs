//! One MCP connection: its transport, the `initialize` handshake (over
//! HTTP after a `server/discover` probe, which a server speaking the
//! stateless 2026-07-28 answers instead: `super::revision`), and a
//! request's life from sent to answered (its progress passed on, its
//! timeout counted from the last sign of life, its cancellation sent).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::revision::{self, Discovered};
use super::session::{self, News, Session};
use super::stdio::Stdio;
use super::streamable::Streamable;
use crate::config::ImportConfig;
use crate::imports::upstream::{Update, UpstreamError};
use crate::telemetry::TraceContext;

/// The revision the client offers.
pub(crate) const LATEST: &str = "2025-11-25";
/// The revisions it accepts a server to answer with.
pub(crate) const SUPPORTED: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// Most pages of a list read (a server's cursors could go on forever).
const MAX_PAGES: usize = 100;
/// Progress updates waiting to be passed on, per call.
const PROGRESS_QUEUE: usize = 64;

#[derive(Debug)]
enum Transport {
    Stdio(Stdio),
    Http(Streamable),
}

/// An initialized connection.
#[derive(Debug)]
pub(crate) struct Connection {
    pub(crate) session: Arc<Session>,
    transport: Transport,
    /// The server's `initialize` result (`serverInfo`, `capabilities`, …),
    /// or what its `server/discover` told, shaped alike.
    pub(crate) init: Value,
}

/// A request to send.
pub(crate) struct Request<'a> {
    pub method: &'a str,
    pub params: Value,
    /// How long it may wait for a sign of life (sent, progress, answer).
    pub timeout: Duration,
    pub trace: Option<&'a TraceContext>,
    /// Further HTTP headers (2026-07-28's `Mcp-Param-*`).
    pub headers: Vec<(String, String)>,
    pub progress: Option<Progress>,
    pub cancel: Option<&'a CancellationToken>,
}

impl<'a> Request<'a> {
    pub(crate) fn new(method: &'a str, params: Value, timeout: Duration) -> Request<'a> {
        Request {
            method,
            params,
            timeout,
            trace: None,
            headers: Vec::new(),
            progress: None,
            cancel: None,
        }
    }
}

/// Where a call's progress goes, and how much of it.
pub(crate) struct Progress {
    pub token: String,
    pub updates: mpsc::Sender<Update>,
    pub per_second: u32,
}

impl Connection {
    /// Starts the transport (`url`: Streamable HTTP, else the `command`)
    /// and initializes, all within `connect_timeout`.
    pub(crate) async fn open(
        config: &ImportConfig,
        news: Arc<News>,
        generation: u64,
    ) -> Result<Arc<Connection>, UpstreamError> {
        let session = Session::new(&config.name, news, generation);
        let transport = match &config.url {
            Some(url) => Transport::Http(Streamable::new(config, url, session.clone())?),
            None => Transport::Stdio(Stdio::spawn(config, session.clone())?),
        };
        let mut connection = Connection {
            session,
            transport,
            init: Value::Null,
        };
        let limit = config.connect_timeout();
        let init = match tokio::time::timeout(limit, connection.negotiate(limit)).await {
            Ok(Ok(init)) => init,
            Ok(Err(e)) => return Err(connection.close_with(e).await),
            Err(_) => {
                return Err(connection
                    .close_with(UpstreamError::Timeout(config.connect_timeout_ms))
                    .await)
            }
        };
        if let Transport::Http(http) = &connection.transport {
            http.listen(revision::listen_filter(&init));
        }
        connection.init = init;
        Ok(Arc::new(connection))
    }

    /// Over HTTP, `server/discover` first: the stateless revision if the
    /// server speaks it, else (and over stdio) the handshake.
    async fn negotiate(&self, limit: Duration) -> Result<Value, UpstreamError> {
        let Transport::Http(http) = &self.transport else {
            return self.initialize(limit).await;
        };
        http.set_protocol(Some(revision::MODERN));
        let probe = Request::new("server/discover", json!({}), limit);
        match revision::verdict(self.exchange(probe).await)? {
            Discovered::Modern(init) => Ok(init),
            Discovered::Legacy(why) => {
                tracing::debug!(reason = %why, "imports: the MCP server does not speak {}: initialize", revision::MODERN);
                http.set_protocol(None);
                self.initialize(limit).await
            }
        }
    }

    /// The revision spoken (the `initialize` result's, or 2026-07-28).
    pub(crate) fn version(&self) -> &str {
        self.init["protocolVersion"].as_str().unwrap_or_default()
    }

    /// Whether it speaks the stateless revision.
    pub(crate) fn is_modern(&self) -> bool {
        matches!(&self.transport, Transport::Http(http) if http.is_modern())
    }

    /// A result that is an answer (2026-07-28 results say whether they are).
    fn complete(&self, result: Value) -> Result<Value, UpstreamError> {
        match self.is_modern() {
            true => revision::complete(result),
            false => Ok(result),
        }
    }

    async fn initialize(&self, limit: Duration) -> Result<Value, UpstreamError> {
        let params = json!({
            "protocolVersion": LATEST,
            "capabilities": {},
            "clientInfo": {"name": "lmos-sidecar", "version": env!("CARGO_PKG_VERSION")},
        });
        let init = self
            .exchange(Request::new("initialize", params, limit))
            .await?;
        let version = init["protocolVersion"].as_str().unwrap_or_default();
        if !SUPPORTED.contains(&version) {
            let what = format!("the server speaks MCP {version:?}, not one of {SUPPORTED:?}");
            return Err(UpstreamError::Malformed(what));
        }
        if let Transport::Http(http) = &self.transport {
            http.set_protocol(Some(version));
        }
        let initialized = session::notification("notifications/initialized", None);
        self.send(&initialized, None, None, &[]).await?;
        Ok(init)
    }

    async fn close_with(&self, error: UpstreamError) -> UpstreamError {
        self.close().await;
        error
    }

    /// Lets go of it: waiting requests fail, the child is stopped or the
    /// session deleted.
    pub(crate) async fn close(&self) {
        self.session.shut("the connection was closed");
        match &self.transport {
            Transport::Stdio(stdio) => stdio.close().await,
            Transport::Http(http) => http.close().await,
        }
    }

    /// The child's process ID, for a stdio connection.
    pub(crate) fn pid(&self) -> Option<u32> {
        match &self.transport {
            Transport::Stdio(stdio) => stdio.pid(),
            Transport::Http(_) => None,
        }
    }

    async fn send(
        &self,
        message: &Value,
        id: Option<u64>,
        trace: Option<&TraceContext>,
        headers: &[(String, String)],
    ) -> Result<(), UpstreamError> {
        match &self.transport {
            Transport::Stdio(stdio) => stdio.send(message).await,
            Transport::Http(http) => http.send(message, id, trace, headers).await,
        }
    }

    /// A request that is not cancelled: its answer.
    pub(crate) async fn exchange(&self, request: Request<'_>) -> Result<Value, UpstreamError> {
        let (id, answer) = self.session.register(None)?;
        let _forget = Forget(&self.session, id, None);
        let message = session::request(id, request.method, request.params);
        let timeout_ms = millis(request.timeout);
        let waited = async {
            let headers = &request.headers;
            self.send(&message, Some(id), request.trace, headers)
                .await?;
            answer
                .await
                .unwrap_or_else(|_| Err(UpstreamError::Unreachable("the connection closed".into())))
        };
        match tokio::time::timeout(request.timeout, waited).await {
            Ok(answered) => answered.and_then(|result| self.complete(result)),
            Err(_) => {
                // `initialize` is never cancelled (the specification says
                // so): the connection is given up instead.
                if request.method != "initialize" {
                    self.cancelled(id, "timed out").await;
                }
                Err(UpstreamError::Timeout(timeout_ms))
            }
        }
    }

    /// A request that may be cancelled and reports progress: its answer,
    /// or `None` when it was cancelled (the server told so, at once).
    pub(crate) async fn call(
        self: &Arc<Self>,
        request: Request<'_>,
    ) -> Result<Option<Value>, UpstreamError> {
        let (progress_tx, mut progress_rx) = mpsc::channel(PROGRESS_QUEUE);
        let token = request.progress.as_ref().map(|p| p.token.clone());
        let (id, mut answer) = self
            .session
            .register(token.clone().map(|t| (t, progress_tx)))?;
        let _forget = Forget(&self.session, id, token);
        let message = session::request(id, request.method, request.params);
        let never = CancellationToken::new();
        let cancel = request.cancel.unwrap_or(&never);
        let timeout_ms = millis(request.timeout);
        let sending = tokio::time::timeout(
            request.timeout,
            self.send(&message, Some(id), request.trace, &request.headers),
        );
        tokio::select! {
            sent = sending => match sent {
                Ok(sent) => sent?,
                Err(_) => return Err(self.timed_out(id, timeout_ms)),
            },
            () = cancel.cancelled() => return Ok(self.cancel(id)),
        }
        let mut limiter = Limiter::new(request.progress.as_ref().map_or(0, |p| p.per_second));
        let pass_on = |update: Value, limiter: &mut Limiter| {
            if let Some(progress) = &request.progress {
                if limiter.allow() {
                    // A full channel drops it: updates are not the answer.
                    let _ = progress.updates.try_send(Update::Progress(update));
                }
            }
        };
        let mut deadline = tokio::time::Instant::now() + request.timeout;
        loop {
            tokio::select! {
                biased;
                answered = &mut answer => {
                    while let Ok(update) = progress_rx.try_recv() {
                        pass_on(update, &mut limiter);
                    }
                    let answered = answered
                        .unwrap_or_else(|_| Err(UpstreamError::Unreachable("the connection closed".into())));
                    return answered.and_then(|result| self.complete(result)).map(Some);
                }
                () = cancel.cancelled() => return Ok(self.cancel(id)),
                Some(update) = progress_rx.recv() => {
                    deadline = tokio::time::Instant::now() + request.timeout;
                    pass_on(update, &mut limiter);
                }
                () = tokio::time::sleep_until(deadline) => return Err(self.timed_out(id, timeout_ms)),
            }
        }
    }

    /// The consumer cancelled: the server is told in the background, the
    /// call ends now (a late answer is ignored).
    fn cancel(self: &Arc<Self>, id: u64) -> Option<Value> {
        self.session.forget(id, None);
        let this = self.clone();
        tokio::spawn(async move { this.cancelled(id, "cancelled by the consumer").await });
        None
    }

    fn timed_out(self: &Arc<Self>, id: u64, timeout_ms: u64) -> UpstreamError {
        self.session.forget(id, None);
        let this = self.clone();
        tokio::spawn(async move { this.cancelled(id, "timed out").await });
        UpstreamError::Timeout(timeout_ms)
    }

    async fn cancelled(&self, id: u64, reason: &str) {
        if self.is_modern() {
            // 2026-07-28 has no such notification: closing the request's
            // answer stream (its reading task ends when it stops waiting)
            // is the cancellation.
            return;
        }
        let params = json!({"requestId": id, "reason": reason});
        let message = session::notification("notifications/cancelled", Some(params));
        if let Err(e) = self.send(&message, None, None, &[]).await {
            tracing::debug!(error = %e, "imports: the cancellation could not be sent");
        }
    }

    /// A paginated list (`tools/list`, `resources/list`): the items under
    /// `key` of every page, at most [`MAX_PAGES`] pages.
    pub(crate) async fn list(
        &self,
        method: &str,
        key: &str,
        timeout: Duration,
    ) -> Result<Vec<Value>, UpstreamError> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(cursor) => json!({"cursor": cursor}),
                None => json!({}),
            };
            let page = self.exchange(Request::new(method, params, timeout)).await?;
            let Some(listed) = page[key].as_array() else {
                return Err(UpstreamError::Malformed(format!(
                    "a {method} result without {key}"
                )));
            };
            items.extend(listed.iter().cloned());
            match page["nextCursor"].as_str() {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(items),
            }
        }
        tracing::warn!(
            method,
            "imports: an MCP list went past {MAX_PAGES} pages; the rest is left out"
        );
        Ok(items)
    }
}

/// The request stops waiting when its future ends, however it ends.
struct Forget<'a>(&'a Session, u64, Option<String>);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.forget(self.1, self.2.as_deref());
    }
}

/// At most `per_second` updates in each second.
struct Limiter {
    per_second: u32,
    window: Instant,
    count: u32,
}

impl Limiter {
    fn new(per_second: u32) -> Limiter {
        Limiter {
            per_second,
            window: Instant::now(),
            count: 0,
        }
    }

    fn allow(&mut self) -> bool {
        if self.window.elapsed() >= Duration::from_secs(1) {
            self.window = Instant::now();
            self.count = 0;
        }
        self.count = self.count.saturating_add(1);
        self.count <= self.per_second
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
