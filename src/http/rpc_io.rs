//! The I/O MCP and A2A share: a JSON-RPC body read within a byte limit,
//! JSON-RPC answers, and Server-Sent Event streams whose queue has a byte
//! budget (a client that does not read cannot make the sidecar hold more).

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;

use super::jsonrpc;

/// A JSON-RPC answer (or error object) with an HTTP status.
pub fn json(status: StatusCode, value: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// A JSON-RPC error with no request id, with an HTTP status.
pub fn refusal(status: StatusCode, code: i64, message: &str) -> Response {
    json(status, &jsonrpc::error(&Value::Null, code, message, None))
}

/// The body, at most `limit` bytes; else the answer (413, or 400 when the
/// body broke off).
pub async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, Response> {
    let too_large = || {
        refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            jsonrpc::INVALID_REQUEST,
            &format!("The request body exceeds {limit} bytes (gateway.max_message_size)."),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::with_capacity(declared.unwrap_or(0));
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            return Err(refusal(
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_REQUEST,
                "The request body broke off.",
            ));
        };
        if bytes.len() + chunk.len() > limit {
            return Err(too_large());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(bytes))
}

/// Whether the client takes an SSE stream as the answer.
pub fn accepts_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

/// What every SSE stream together may have queued, and what one may.
#[derive(Debug, Clone)]
pub struct SseBudget {
    per_stream: usize,
    total: usize,
    queued: Arc<AtomicUsize>,
}

impl SseBudget {
    pub fn new(per_stream: usize, total: usize) -> SseBudget {
        SseBudget {
            per_stream,
            total,
            queued: Arc::default(),
        }
    }
}

/// Bytes one stream has queued; `None` once its client is gone. Kept
/// under a lock so that what a stream gives back to the total on closing
/// and what is pushed meanwhile cannot cross.
type Queued = Arc<Mutex<Option<usize>>>;

/// The sending half of an SSE stream.
#[derive(Clone)]
pub struct SseSender {
    tx: mpsc::UnboundedSender<Bytes>,
    queued: Queued,
    budget: SseBudget,
}

fn lock(queued: &Queued) -> MutexGuard<'_, Option<usize>> {
    queued.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What became of an offered event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    Queued,
    /// The client is this far behind already: dropped.
    OverBudget,
    /// The client went away.
    Gone,
}

impl SseSender {
    fn push(&self, text: String) -> bool {
        let bytes = Bytes::from(text);
        let mut queued = lock(&self.queued);
        let Some(n) = queued.as_mut() else {
            return false;
        };
        *n += bytes.len();
        self.budget.queued.fetch_add(bytes.len(), Ordering::Relaxed);
        self.tx.send(bytes).is_ok()
    }

    /// Queues an event that may be lost (progress): dropped when what is
    /// queued already reaches the budget.
    pub fn offer(&self, message: &Value) -> Offered {
        if self.tx.is_closed() {
            return Offered::Gone;
        }
        // This stream's share, and all streams' (many calls of one slow
        // client would otherwise each hold a share).
        let mine = lock(&self.queued).unwrap_or(0);
        if mine >= self.budget.per_stream
            || self.budget.queued.load(Ordering::Relaxed) >= self.budget.total
        {
            return Offered::OverBudget;
        }
        match self.push(event(message)) {
            true => Offered::Queued,
            false => Offered::Gone,
        }
    }

    /// Queues an event that must arrive (an answer): one message past the
    /// budget at most, since the stream then ends.
    pub fn send(&self, message: &Value) -> bool {
        self.push(event(message))
    }

    /// An SSE comment, so proxies and clients see the stream is alive.
    pub fn keep_alive(&self) -> bool {
        self.push(": keep-alive\n\n".to_owned())
    }

    /// Resolves when the client has gone (its stream was dropped): for
    /// MCP 2026-07-28 that is how a request is cancelled.
    pub async fn closed(&self) {
        self.tx.closed().await
    }
}

fn event(message: &Value) -> String {
    format!("event: message\ndata: {message}\n\n")
}

/// A stream and the response that carries it; the response ends when
/// every sender is dropped.
pub fn sse(budget: &SseBudget) -> (SseSender, Response) {
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let queued: Queued = Arc::new(Mutex::new(Some(0)));
    let reader = Reader {
        rx,
        stream: queued.clone(),
        total: budget.queued.clone(),
    };
    let stream = futures_util::stream::unfold(reader, |mut reader| async move {
        let bytes = reader.rx.recv().await?;
        if let Some(n) = lock(&reader.stream).as_mut() {
            *n -= bytes.len();
            reader.total.fetch_sub(bytes.len(), Ordering::Relaxed);
        }
        Some((Ok::<_, Infallible>(bytes), reader))
    });
    let response = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        // Proxies that buffer (nginx) would hold progress back.
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(stream))
        .expect("static response parts are valid");
    let sender = SseSender {
        tx,
        queued,
        budget: budget.clone(),
    };
    (sender, response)
}

/// The receiving half: what it takes out is no longer queued, and what is
/// left when the client goes is given back to the total.
struct Reader {
    rx: mpsc::UnboundedReceiver<Bytes>,
    stream: Queued,
    total: Arc<AtomicUsize>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        let left = lock(&self.stream).take().unwrap_or(0);
        self.total.fetch_sub(left, Ordering::Relaxed);
        self.rx.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn progress_past_the_budget_is_dropped_but_the_answer_is_not() {
        let (tx, response) = sse(&SseBudget::new(100, 1000));
        let big = json!({"p": "x".repeat(80)});
        assert_eq!(tx.offer(&big), Offered::Queued);
        assert_eq!(tx.offer(&big), Offered::OverBudget);
        assert!(tx.send(&json!({"result": 1})));
        drop(tx);
        let body = axum::body::to_bytes(response.into_body(), 10_000)
            .await
            .unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert_eq!(text.matches("event: message").count(), 2, "{text}");
        assert!(text.ends_with("data: {\"result\":1}\n\n"), "{text}");
    }

    #[tokio::test]
    async fn many_streams_of_a_client_that_reads_none_share_one_total() {
        let budget = SseBudget::new(100, 250);
        let big = json!({"p": "x".repeat(80)});
        let streams: Vec<_> = (0..5).map(|_| sse(&budget)).collect();
        let queued = streams
            .iter()
            .filter(|(tx, _)| tx.offer(&big) == Offered::Queued)
            .count();
        assert_eq!(queued, 3, "each under its own 100, all under 250");
        assert!(budget.queued.load(Ordering::Relaxed) <= 250 + 100);
        // A client that goes gives its share back.
        drop(streams);
        assert_eq!(budget.queued.load(Ordering::Relaxed), 0);
    }
}
