//! The JSON-RPC client's state for one MCP connection, whatever carries its
//! bytes (`super::stdio`, `super::streamable`): request IDs, the requests
//! waiting for their answers, progress routed to its call by token, the
//! server's news ([`News`]), and what the server asks of the client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_util::sync::CancellationToken;

use crate::imports::upstream::{Change, UpstreamError};

/// A request's answer: its `result`, or why there is none.
pub(crate) type Answer = Result<Value, UpstreamError>;

/// The news of an upstream, across its connections: each connection is a
/// generation; news from an older one (a child killed by `close`, a
/// stream ending after a reconnection) is not news any more.
#[derive(Debug, Default)]
pub(crate) struct News {
    state: Mutex<NewsState>,
    notify: Notify,
}

#[derive(Debug, Default)]
struct NewsState {
    generation: u64,
    lists: bool,
    lost: Option<String>,
}

impl News {
    /// A new generation (a connection begins, or the last one was let go):
    /// what is pending of the older one is dropped.
    pub(crate) fn begin(&self) -> u64 {
        let mut state = lock(&self.state);
        state.generation += 1;
        state.lists = false;
        state.lost = None;
        state.generation
    }

    pub(crate) fn lists(&self, generation: u64) {
        self.tell(generation, |state| state.lists = true);
    }

    pub(crate) fn lost(&self, generation: u64, reason: &str) {
        self.tell(generation, |state| {
            state.lost.get_or_insert_with(|| reason.to_owned());
        });
    }

    fn tell(&self, generation: u64, change: impl FnOnce(&mut NewsState)) {
        let mut state = lock(&self.state);
        if state.generation == generation {
            change(&mut state);
            drop(state);
            self.notify.notify_waiters();
        }
    }

    /// The next news; a loss first (it makes a change of lists moot).
    pub(crate) async fn next(&self) -> Change {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = lock(&self.state);
                if let Some(reason) = state.lost.take() {
                    state.lists = false;
                    return Change::Lost(reason);
                }
                if std::mem::take(&mut state.lists) {
                    return Change::Lists;
                }
            }
            notified.await;
        }
    }
}

/// A request waiting for its answer.
#[derive(Debug)]
struct Waiting {
    tx: Option<oneshot::Sender<Answer>>,
    /// Fired when it stops waiting, however that happens (a drop too).
    done: CancellationToken,
}

impl Waiting {
    fn answer(mut self, answer: Answer) {
        if let Some(tx) = self.tx.take() {
            // The caller may have stopped waiting meanwhile: nothing to do.
            let _ = tx.send(answer);
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.done.cancel();
    }
}

/// What a message from the server asked of the client.
#[derive(Debug, Default)]
pub(crate) struct Inbound {
    /// Answers to the server's own requests, to send back.
    pub replies: Vec<Value>,
    /// The message was no JSON-RPC (already counted and logged).
    pub malformed: bool,
}

/// One connection's JSON-RPC state.
#[derive(Debug)]
pub(crate) struct Session {
    /// The upstream's name, for logs.
    name: String,
    next_id: AtomicU64,
    state: Mutex<State>,
    news: Arc<News>,
    generation: u64,
}

#[derive(Debug, Default)]
struct State {
    pending: HashMap<u64, Waiting>,
    /// A call's progress token to its progress channel.
    progress: HashMap<String, mpsc::Sender<Value>>,
    /// Why the connection is gone, once it is.
    lost: Option<String>,
    /// Messages that were no JSON-RPC or named no waiting request.
    ignored: u64,
}

impl Session {
    pub(crate) fn new(name: &str, news: Arc<News>, generation: u64) -> Arc<Session> {
        Arc::new(Session {
            name: name.to_owned(),
            next_id: AtomicU64::new(1),
            state: Mutex::new(State::default()),
            news,
            generation,
        })
    }

    /// A new request waiting for its answer (and its progress, if it asks
    /// for some): its ID and where its answer will come.
    pub(crate) fn register(
        &self,
        progress: Option<(String, mpsc::Sender<Value>)>,
    ) -> Result<(u64, oneshot::Receiver<Answer>), UpstreamError> {
        let mut state = lock(&self.state);
        if let Some(reason) = &state.lost {
            return Err(UpstreamError::Unreachable(reason.clone()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let waiting = Waiting {
            tx: Some(tx),
            done: CancellationToken::new(),
        };
        state.pending.insert(id, waiting);
        if let Some((token, sender)) = progress {
            state.progress.insert(token, sender);
        }
        Ok((id, rx))
    }

    /// The request no longer waits (answered, cancelled, timed out): a late
    /// answer or progress for it is ignored.
    pub(crate) fn forget(&self, id: u64, token: Option<&str>) {
        let mut state = lock(&self.state);
        state.pending.remove(&id);
        if let Some(token) = token {
            state.progress.remove(token);
        }
    }

    /// An ID for a request nobody waits on (a `subscriptions/listen`).
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The lists may have changed unheard (a listen stream was broken).
    pub(crate) fn lists_changed(&self) {
        self.news.lists(self.generation);
    }

    pub(crate) fn is_pending(&self, id: u64) -> bool {
        lock(&self.state).pending.contains_key(&id)
    }

    /// Fires when the request no longer waits (answered, failed,
    /// cancelled, timed out): its transport can stop reading for it.
    pub(crate) fn done(&self, id: u64) -> CancellationToken {
        match lock(&self.state).pending.get(&id) {
            Some(waiting) => waiting.done.clone(),
            None => {
                let done = CancellationToken::new();
                done.cancel();
                done
            }
        }
    }

    /// Ends one request with `error` (its transport knows it failed).
    pub(crate) fn fail(&self, id: u64, error: UpstreamError) {
        let waiting = lock(&self.state).pending.remove(&id);
        if let Some(waiting) = waiting {
            waiting.answer(Err(error));
        }
    }

    /// The connection is gone: every waiting request fails with `reason`,
    /// the upstream's news says so (once).
    pub(crate) fn lose(&self, reason: &str) {
        if self.end(reason) {
            self.news.lost(self.generation, reason);
        }
    }

    /// The connection is let go of (no news: the upstream asked for it).
    pub(crate) fn shut(&self, reason: &str) {
        self.end(reason);
    }

    /// Whether this ended it (it had not ended before).
    fn end(&self, reason: &str) -> bool {
        let pending = {
            let mut state = lock(&self.state);
            if state.lost.is_some() {
                return false;
            }
            state.lost = Some(reason.to_owned());
            state.progress.clear();
            std::mem::take(&mut state.pending)
        };
        for (_, waiting) in pending {
            waiting.answer(Err(UpstreamError::Unreachable(reason.to_owned())));
        }
        true
    }

    pub(crate) fn lost(&self) -> Option<String> {
        lock(&self.state).lost.clone()
    }

    /// One message (or batch) as received.
    pub(crate) fn receive(&self, bytes: &[u8]) -> Inbound {
        let mut inbound = Inbound::default();
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Array(batch)) => batch.iter().for_each(|m| self.one(m, &mut inbound)),
            Ok(message) => self.one(&message, &mut inbound),
            Err(e) => self.ignore(&format!("no JSON ({e})"), &mut inbound),
        }
        inbound
    }

    fn one(&self, message: &Value, inbound: &mut Inbound) {
        let Some(fields) = message.as_object() else {
            return self.ignore("a message that is no object", inbound);
        };
        let id = fields.get("id").filter(|id| !id.is_null());
        match (fields.get("method").and_then(Value::as_str), id) {
            (Some(method), Some(id)) => inbound.replies.push(reply_to(method, id)),
            (Some(method), None) => self.notification(method, &message["params"]),
            (None, Some(id)) => self.response(id, fields, inbound),
            (None, None) => self.ignore("a message with neither method nor id", inbound),
        }
    }

    fn response(&self, id: &Value, fields: &serde_json::Map<String, Value>, inbound: &mut Inbound) {
        let Some(id) = id.as_u64().or_else(|| id.as_str()?.parse().ok()) else {
            return self.ignore("an answer to no request of ours", inbound);
        };
        let answer = match (fields.get("result"), fields.get("error")) {
            // An answer that is not JSON-RPC 2.0 is not trusted, whatever it says.
            _ if fields.get("jsonrpc").and_then(Value::as_str) != Some("2.0") => Err(
                UpstreamError::Malformed("an answer without \"jsonrpc\": \"2.0\"".into()),
            ),
            (Some(result), None) => Ok(result.clone()),
            (None, Some(error)) => Err(refused(error)),
            _ => Err(UpstreamError::Malformed(
                "an answer with both or neither of result and error".into(),
            )),
        };
        if answer.is_err() && !matches!(answer, Err(UpstreamError::Refused { .. })) {
            inbound.malformed = true;
        }
        let waiting = lock(&self.state).pending.remove(&id);
        match waiting {
            Some(waiting) => waiting.answer(answer),
            // Cancelled or timed out before: expected now and then.
            None => tracing::debug!(upstream = %self.name, id, "imports: a late answer, ignored"),
        }
    }

    fn notification(&self, method: &str, params: &Value) {
        match method {
            "notifications/progress" => self.progress(params),
            "notifications/tools/list_changed" | "notifications/resources/list_changed" => {
                self.news.lists(self.generation)
            }
            "notifications/message" => {
                let data = params["data"].to_string();
                let data: String = data.chars().take(1024).collect();
                tracing::debug!(upstream = %self.name, level = ?params["level"], data, "imports: server log");
            }
            _ => tracing::trace!(upstream = %self.name, method, "imports: a notification, ignored"),
        }
    }

    fn progress(&self, params: &Value) {
        let token = match &params["progressToken"] {
            Value::String(token) => token.clone(),
            Value::Number(token) => token.to_string(),
            _ => return,
        };
        let mut update = serde_json::Map::new();
        for key in ["progress", "total", "message"] {
            if let Some(value) = params.get(key).filter(|v| !v.is_null()) {
                update.insert(key.to_owned(), value.clone());
            }
        }
        let sender = lock(&self.state).progress.get(&token).cloned();
        if let Some(sender) = sender {
            // A full channel drops the update: progress is not the answer.
            let _ = sender.try_send(Value::Object(update));
        }
    }

    fn ignore(&self, what: &str, inbound: &mut Inbound) {
        inbound.malformed = true;
        let count = {
            let mut state = lock(&self.state);
            state.ignored += 1;
            state.ignored
        };
        tracing::warn!(upstream = %self.name, count, "imports: ignored {what} from the server");
    }

    /// An overlong message could not be read; if its ID can be found in
    /// what was seen of it, that request fails with `error`.
    pub(crate) fn overlong(&self, id: Option<u64>, error: UpstreamError) {
        match id.filter(|id| self.is_pending(*id)) {
            Some(id) => self.fail(id, error),
            None => self.ignore(
                "an overlong message (no waiting request named)",
                &mut Inbound::default(),
            ),
        }
    }
}

/// The client's answer to a server's request: `ping` is answered; the
/// client offers no capabilities (roots, sampling, elicitation), so
/// anything else is "method not found", at once, so that the server is not
/// left waiting.
fn reply_to(method: &str, id: &Value) -> Value {
    if method == "ping" {
        return json!({"jsonrpc": "2.0", "id": id, "result": {}});
    }
    let error = json!({"code": -32601, "message": format!("the client does not offer {method}")});
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// A JSON-RPC error as the LMOS status it maps to.
pub(crate) fn refused(error: &Value) -> UpstreamError {
    let code = error["code"].as_i64().unwrap_or(-32603);
    let status = match code {
        // 2026-07-28: headers that disagree with the body (-32020), a
        // capability the client lacks (-32021), a revision not spoken
        // (-32022): the request as sent cannot be served.
        -32700 | -32600 | -32602 | -32020 | -32021 | -32022 => 400,
        -32601 | -32002 => 404,
        _ => 500,
    };
    let message = error["message"].as_str().unwrap_or("the server refused");
    UpstreamError::Refused {
        status,
        message: message.chars().take(1000).collect(),
    }
}

/// A request, as sent.
pub(crate) fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

pub(crate) fn notification(method: &str, params: Option<Value>) -> Value {
    match params {
        Some(params) => json!({"jsonrpc": "2.0", "method": method, "params": params}),
        None => json!({"jsonrpc": "2.0", "method": method}),
    }
}

/// The top-level `id` of a JSON-RPC message seen only in part: its head
/// (the Python SDK writes `{"jsonrpc":"2.0","id":7,...`) or its tail (the
/// TypeScript SDK writes `...,"jsonrpc":"2.0","id":7}`).
pub(crate) fn overlong_id(head: &[u8], tail: &[u8]) -> Option<u64> {
    head_id(head).or_else(|| tail_id(tail))
}

fn head_id(head: &[u8]) -> Option<u64> {
    // Only the members before the first nested value are looked at: an
    // `id` inside a result must not be taken for the message's.
    let text = String::from_utf8_lossy(head);
    let body = text.trim_start().strip_prefix('{')?;
    let flat = &body[..body.find(['{', '[']).unwrap_or(body.len())];
    let at = flat.find("\"id\"")?;
    number_after_colon(&flat[at + 4..])
}

fn tail_id(tail: &[u8]) -> Option<u64> {
    let text = String::from_utf8_lossy(tail);
    let body = text.trim_end().strip_suffix('}')?;
    let at = body.rfind("\"id\"")?;
    let after = &body[at + 4..];
    let value = after.trim_start().strip_prefix(':')?.trim();
    // The ID must be the last member: nothing but it before the `}`.
    value.trim_matches('"').parse().ok()
}

fn number_after_colon(text: &str) -> Option<u64> {
    let value = text.trim_start().strip_prefix(':')?.trim_start();
    let quoted = value.strip_prefix('"');
    let value = quoted.unwrap_or(value);
    let end = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    value[..end].parse().ok()
}

/// The state's lock; a panic elsewhere while it was held leaves it usable
/// (every update is a single assignment or insertion).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
