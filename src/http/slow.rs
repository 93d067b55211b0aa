//! Slow clients on the HTTP port. A request body must arrive within
//! `http.body_timeout_ms` and, after its first second, at
//! `http.body_min_rate` bytes per second on average, else the request is
//! answered 408 and the connection closed. And a connection that keeps the
//! port waiting for its client (its TLS handshake, request head or body,
//! or the next request on a kept-alive connection) gives its place up to a
//! newcomer when `http.max_connections` are open: slow clients never hold
//! the last places, whatever address they come from (on loopback every
//! client has the same one, so a cap per source could not tell them apart).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// What the body may take.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// `http.body_timeout_ms`.
    pub timeout: Duration,
    /// `http.body_min_rate`, bytes per second; 0: none.
    pub min_rate: u64,
}

/// A body gets this long before the minimum rate counts: its first bytes
/// may wait for a round trip (`Expect: 100-continue`) or a slow start.
pub const RATE_GRACE: Duration = Duration::from_secs(1);

/// A connection that has kept the port waiting this long may be closed to
/// make room; a client that sends its request at once never is.
pub const EVICT_AFTER: Duration = Duration::from_secs(1);

/// Connections waiting for their client, oldest first.
#[derive(Clone, Default)]
pub struct Waiting {
    queue: Arc<Mutex<BTreeMap<(Instant, u64), CancellationToken>>>,
    ids: Arc<AtomicU64>,
}

impl Waiting {
    /// A new connection, waiting for its client from now on.
    pub fn track(&self) -> Arc<Progress> {
        let progress = Progress {
            waiting: self.clone(),
            id: self.ids.fetch_add(1, Ordering::Relaxed),
            since: Mutex::new(None),
            evicted: CancellationToken::new(),
        };
        progress.waiting();
        Arc::new(progress)
    }

    /// Closes the connection that has kept the port waiting longest, if
    /// that is at least `min_age`.
    pub fn evict_oldest(&self, min_age: Duration) -> bool {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = queue.first_entry() else {
            return false;
        };
        if entry.key().0.elapsed() < min_age {
            return false;
        }
        entry.remove().cancel();
        true
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.queue.lock().unwrap().len()
    }
}

/// One connection's state: waiting for its client, or busy (its request
/// is in and being answered, or it became a WebSocket).
pub struct Progress {
    waiting: Waiting,
    id: u64,
    since: Mutex<Option<Instant>>,
    evicted: CancellationToken,
}

impl Progress {
    /// The sidecar waits for this client (again).
    pub fn waiting(&self) {
        let mut since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        if since.is_none() && !self.evicted.is_cancelled() {
            let now = Instant::now();
            let mut queue = self.waiting.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.insert((now, self.id), self.evicted.clone());
            *since = Some(now);
        }
    }

    /// The client has sent what it had to.
    pub fn busy(&self) {
        let mut since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = since.take() {
            let mut queue = self.waiting.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.remove(&(t, self.id));
        }
    }

    /// Cancelled when the connection was chosen to make room.
    pub fn evicted(&self) -> &CancellationToken {
        &self.evicted
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.busy();
    }
}

/// Why a body was cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Cut {
    #[error("the request body did not arrive within http.body_timeout_ms")]
    Timeout,
    #[error("the request body arrived slower than http.body_min_rate")]
    TooSlow,
    #[error("the request was still arriving when the port was full")]
    Evicted,
}

impl Cut {
    /// The metric's label: the setting that cut it.
    pub fn key(self) -> &'static str {
        match self {
            Cut::Timeout => "body_timeout_ms",
            Cut::TooSlow => "body_min_rate",
            Cut::Evicted => "slow_client_evicted",
        }
    }

    /// 408 with what happened and which setting governs it; the
    /// connection closes (the rest of the body is not read).
    pub fn response(self, limits: BodyLimits, received: u64) -> Response {
        let detail = match self {
            Cut::Timeout => format!(
                "The request body did not arrive within {} ms (http.body_timeout_ms); {received} bytes came.",
                limits.timeout.as_millis()
            ),
            Cut::TooSlow => format!(
                "The request body arrived slower than {} bytes per second (http.body_min_rate); {received} bytes came.",
                limits.min_rate
            ),
            Cut::Evicted => format!(
                "The port was full (http.max_connections) and this request was among the slowest to arrive; {received} bytes of its body came."
            ),
        };
        let body = serde_json::json!({
            "type": "about:blank",
            "title": "Request Timeout",
            "status": 408,
            "detail": detail,
        });
        (
            StatusCode::REQUEST_TIMEOUT,
            [
                (header::CONTENT_TYPE, "application/problem+json"),
                (header::CONNECTION, "close"),
            ],
            body.to_string(),
        )
            .into_response()
    }
}

/// What a [`Timed`] body reports once the request has been answered.
#[derive(Default)]
pub struct Outcome {
    pub cut: OnceLock<Cut>,
    pub received: AtomicU64,
}

/// A request body read under [`BodyLimits`], which marks its connection
/// busy once the last byte is in.
pub struct Timed<B> {
    inner: B,
    progress: Arc<Progress>,
    limits: BodyLimits,
    started: Instant,
    received: u64,
    sleep: Pin<Box<Sleep>>,
    evicted: Pin<Box<WaitForCancellationFutureOwned>>,
    outcome: Arc<Outcome>,
}

impl<B> Timed<B> {
    pub fn new(inner: B, progress: Arc<Progress>, limits: BodyLimits) -> (Timed<B>, Arc<Outcome>) {
        let started = Instant::now();
        let outcome = Arc::new(Outcome::default());
        let evicted = Box::pin(progress.evicted().clone().cancelled_owned());
        let mut timed = Timed {
            inner,
            progress,
            limits,
            started,
            received: 0,
            sleep: Box::pin(tokio::time::sleep_until(started)),
            evicted,
            outcome: outcome.clone(),
        };
        let deadline = timed.deadline();
        timed.sleep.as_mut().reset(deadline);
        (timed, outcome)
    }

    /// The body's time so far: the hard limit, or sooner what the bytes
    /// received earned at the minimum rate.
    fn deadline(&self) -> Instant {
        let hard = self.started + self.limits.timeout;
        if self.limits.min_rate == 0 {
            return hard;
        }
        let earned = Duration::from_secs_f64(self.received as f64 / self.limits.min_rate as f64);
        hard.min(self.started + RATE_GRACE + earned)
    }

    fn cut(&mut self, cut: Cut) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        let _ = self.outcome.cut.set(cut);
        Poll::Ready(Some(Err(Box::new(cut))))
    }
}

impl<B> Body for Timed<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(&cut) = this.outcome.cut.get() {
            return this.cut(cut);
        }
        // What has arrived is taken before any timer is looked at.
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                    this.outcome
                        .received
                        .store(this.received, Ordering::Relaxed);
                    let deadline = this.deadline();
                    this.sleep.as_mut().reset(deadline);
                }
                if this.inner.is_end_stream() {
                    this.progress.busy();
                }
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(None) => {
                this.progress.busy();
                return Poll::Ready(None);
            }
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
            Poll::Pending => {}
        }
        if this.evicted.as_mut().poll(cx).is_ready() {
            return this.cut(Cut::Evicted);
        }
        if this.sleep.as_mut().poll(cx).is_ready() {
            let hard = this.started + this.limits.timeout;
            let cut = if Instant::now() >= hard {
                Cut::Timeout
            } else {
                Cut::TooSlow
            };
            return this.cut(cut);
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
