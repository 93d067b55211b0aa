//! Resource subscriptions: `resources/subscribe` is the property's
//! `observeProperty` through the router, and each reading the agent
//! publishes a `notifications/resources/updated` on the session's `GET`
//! stream; `resources/unsubscribe` ends it.
//!
//! The router keeps one observation per consumer connection and property,
//! and a principal's MCP sessions share its one connection (as its HTTP
//! and A2A calls do): so one observation per principal and property is
//! made here, shared by every watch on it, and `unobserveProperty` is sent
//! when the last watch goes. A session holds at most
//! [`MAX_PER_SESSION`] subscriptions and [`QUEUE`] undelivered
//! notifications (more are dropped: an update says "read again", and the
//! next one says it too); everything goes when the session ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex as SyncMutex, MutexGuard, PoisonError};

use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, Mutex};
use tokio_util::sync::CancellationToken;

use super::resources::{self, for_caller};
use super::Ctx;
use crate::auth::Principal;
use crate::gateway::Replies;
use crate::http::jsonrpc;
use crate::http::rpc_io::{Offered, SseSender};
use crate::http::HttpState;
use crate::lmos::{Body, Message};
use crate::telemetry::metrics;

pub const MAX_PER_SESSION: usize = 32;
pub const QUEUE: usize = 64;

/// (principal, thing, property)
type Key = (String, String, String);

struct SessionSubscriptions {
    tx: mpsc::Sender<Value>,
    rx: Arc<Mutex<mpsc::Receiver<Value>>>,
    by_uri: HashMap<String, CancellationToken>,
}

/// The observations made, and each session's subscriptions.
#[derive(Default)]
pub struct Observations {
    observed: Mutex<HashMap<Key, broadcast::Sender<()>>>,
    sessions: SyncMutex<HashMap<String, SessionSubscriptions>>,
}

/// The updates of one resource, as `notifications/resources/updated`.
pub struct ResourceWatch {
    uri: String,
    readings: broadcast::Receiver<()>,
}

impl ResourceWatch {
    /// The next update; `None` once the observation ended (the agent went,
    /// refused it, or the sidecar stops).
    pub async fn next(&mut self) -> Option<Value> {
        match self.readings.recv().await {
            // Missed some: it changed all the same.
            Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                let params = json!({"uri": self.uri});
                Some(jsonrpc::notification(
                    "notifications/resources/updated",
                    params,
                ))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

fn error_object(answer: Value) -> Value {
    answer.get("error").cloned().unwrap_or(answer)
}

/// A watch on the resource `uri` for `principal`; `Err` is a JSON-RPC
/// error object (`{code, message, data?}`), the same for a resource that
/// does not exist and one the principal may not `consume`.
pub async fn watch(
    state: &HttpState,
    principal: &Principal,
    uri: &str,
) -> Result<ResourceWatch, Value> {
    let Some((resource, _)) = resources::find(for_caller(state, principal).await, uri) else {
        return Err(error_object(resources::not_found(&Value::Null, uri)));
    };
    let key = (
        principal.name().to_owned(),
        resource.thing.clone(),
        resource.property.clone(),
    );
    // Held across the observe: two first watches make one observation.
    let mut observed = state.mcp.observations.observed.lock().await;
    if let Some(tx) = observed.get(&key).filter(|tx| tx.receiver_count() > 0) {
        return Ok(ResourceWatch {
            uri: uri.to_owned(),
            readings: tx.subscribe(),
        });
    }
    let correlation = uuid::Uuid::new_v4().to_string();
    let body = Body::ObserveProperty {
        name: resource.property.clone(),
    };
    let message = Message::new(&resource.thing, body).with_correlation_id(&correlation);
    let replies = state
        .gateway
        .subscribe_via(metrics::MCP, principal, message)
        .await
        .map_err(|p| {
            let text = format!("{}: {}", p.kind.title(), p.detail);
            error_object(jsonrpc::error(
                &Value::Null,
                jsonrpc::INVALID_PARAMS,
                &text,
                None,
            ))
        })?;
    let (tx, readings) = broadcast::channel(16);
    observed.insert(key.clone(), tx.clone());
    drop(observed);
    tokio::spawn(pump(
        state.clone(),
        principal.clone(),
        key,
        correlation,
        replies,
        tx,
    ));
    Ok(ResourceWatch {
        uri: uri.to_owned(),
        readings,
    })
}

/// Passes the observation's readings on until nobody watches, then
/// `unobserveProperty`.
async fn pump(
    state: HttpState,
    principal: Principal,
    key: Key,
    correlation: String,
    mut replies: Replies,
    tx: broadcast::Sender<()>,
) {
    loop {
        tokio::select! {
            reply = replies.next() => match reply {
                None => break,
                Some(r) if r["messageType"] == "error" => break,
                Some(r) if r["messageType"].as_str().is_some_and(|t| t.starts_with("propertyReading")) => {
                    let _ = tx.send(());
                }
                Some(_) => {}
            },
            _ = tx.closed() => {
                // Under the lock: a watch arriving now either joins this
                // observation or waits for its end.
                let observed = state.mcp.observations.observed.lock().await;
                if tx.receiver_count() == 0 {
                    return unobserve(&state, &principal, key, correlation, observed, &tx).await;
                }
            }
            _ = state.shutdown.cancelled() => break,
        }
    }
    let observed = state.mcp.observations.observed.lock().await;
    unobserve(&state, &principal, key, correlation, observed, &tx).await;
}

async fn unobserve(
    state: &HttpState,
    principal: &Principal,
    key: Key,
    correlation: String,
    mut observed: tokio::sync::MutexGuard<'_, HashMap<Key, broadcast::Sender<()>>>,
    tx: &broadcast::Sender<()>,
) {
    if observed.get(&key).is_some_and(|t| t.same_channel(tx)) {
        observed.remove(&key);
    }
    let (_, thing, property) = key;
    let body = Body::UnobserveProperty { name: property };
    let message = Message::new(thing, body).with_correlation_id(correlation);
    // Unanswered (no acknowledgement asked); sent while the lock is held,
    // so it reaches the router before any new observation of the same.
    let _ = state
        .gateway
        .subscribe_via(metrics::MCP, principal, message)
        .await;
}

impl Observations {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, SessionSubscriptions>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session's queue, made on first use and dropped when it ends.
    fn session(
        &self,
        state: &HttpState,
        session: &str,
        ended: &CancellationToken,
    ) -> (mpsc::Sender<Value>, Arc<Mutex<mpsc::Receiver<Value>>>) {
        let mut sessions = self.lock();
        if let Some(s) = sessions.get(session) {
            return (s.tx.clone(), s.rx.clone());
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        let entry = SessionSubscriptions {
            tx: tx.clone(),
            rx: rx.clone(),
            by_uri: HashMap::new(),
        };
        sessions.insert(session.to_owned(), entry);
        let (state, id, ended) = (state.clone(), session.to_owned(), ended.clone());
        tokio::spawn(async move {
            ended.cancelled().await;
            if let Some(s) = state.mcp.observations.lock().remove(&id) {
                s.by_uri.values().for_each(CancellationToken::cancel);
            }
        });
        (tx, rx)
    }
}

fn too_many(id: &Value) -> Value {
    let text = format!(
        "A session holds at most {MAX_PER_SESSION} resource subscriptions; unsubscribe from one first"
    );
    jsonrpc::error(id, jsonrpc::INVALID_REQUEST, &text, None)
}

/// `resources/subscribe`.
pub async fn subscribe(ctx: &Ctx, id: &Value, params: &Value) -> Value {
    let uri = params["uri"].as_str().unwrap_or_default();
    // Stateless requests (2026-07-28) follow resources on subscriptions/listen.
    let Some(session) = ctx.session.as_deref() else {
        return jsonrpc::error(id, jsonrpc::INVALID_REQUEST, "Session not found", None);
    };
    let Some(current) = ctx.sessions().touch(session, ctx.principal.name()) else {
        return jsonrpc::error(id, jsonrpc::INVALID_REQUEST, "Session not found", None);
    };
    let observations = &ctx.state.mcp.observations;
    let (tx, _) = observations.session(&ctx.state, session, &current.ended);
    {
        let sessions = observations.lock();
        let held = sessions.get(session).map(|s| &s.by_uri);
        if held.is_some_and(|h| h.contains_key(uri)) {
            return jsonrpc::result(id, json!({}));
        }
        if held.is_some_and(|h| h.len() >= MAX_PER_SESSION) {
            return too_many(id);
        }
    }
    let mut watch = match watch(&ctx.state, &ctx.principal, uri).await {
        Ok(w) => w,
        Err(error) => return json!({"jsonrpc": "2.0", "id": id, "error": error}),
    };
    let cancel = current.ended.child_token();
    {
        let mut sessions = observations.lock();
        let Some(s) = sessions.get_mut(session) else {
            return jsonrpc::error(id, jsonrpc::INVALID_REQUEST, "Session not found", None);
        };
        // Checked again: another subscribe may have come in meanwhile.
        if s.by_uri.len() >= MAX_PER_SESSION && !s.by_uri.contains_key(uri) {
            return too_many(id);
        }
        if let Some(previous) = s.by_uri.insert(uri.to_owned(), cancel.clone()) {
            previous.cancel();
        }
    }
    tokio::spawn(async move {
        loop {
            tokio::select! {
                note = watch.next() => match note {
                    // Full: the client is behind; it will read again.
                    Some(note) => { let _ = tx.try_send(note); }
                    None => return,
                },
                _ = cancel.cancelled() => return,
            }
        }
    });
    jsonrpc::result(id, json!({}))
}

/// `resources/unsubscribe`: answered `{}` whether or not it was subscribed.
pub fn unsubscribe(ctx: &Ctx, id: &Value, params: &Value) -> Value {
    let uri = params["uri"].as_str().unwrap_or_default();
    let Some(session) = ctx.session.as_deref() else {
        return jsonrpc::result(id, json!({}));
    };
    let mut sessions = ctx.state.mcp.observations.lock();
    if let Some(cancel) = sessions.get_mut(session).and_then(|s| s.by_uri.remove(uri)) {
        cancel.cancel();
    }
    jsonrpc::result(id, json!({}))
}

/// The `GET` stream's share: the session's resource updates, and
/// `notifications/resources/list_changed` when the caller's resources
/// change (agents come and go), until the stream is replaced or ends.
pub async fn forward(
    state: HttpState,
    principal: Principal,
    session: String,
    sse: SseSender,
    listening: CancellationToken,
) {
    let Some(current) = state.mcp.sessions.touch(&session, principal.name()) else {
        return;
    };
    let (_, rx) = state
        .mcp
        .observations
        .session(&state, &session, &current.ended);
    // A replaced stream's forwarder lets go of the queue as it ends.
    let mut rx = tokio::select! {
        rx = rx.lock() => rx,
        _ = listening.cancelled() => return,
    };
    let mut changes = state.mcp.watch.subscribe(&state);
    let uris =
        |all: Vec<resources::Resource>| -> Vec<String> { all.into_iter().map(|r| r.uri).collect() };
    let mut known = uris(for_caller(&state, &principal).await);
    loop {
        let note = tokio::select! {
            note = rx.recv() => note,
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                let now = uris(for_caller(&state, &principal).await);
                if now == known {
                    continue;
                }
                known = now;
                Some(jsonrpc::notification("notifications/resources/list_changed", json!({})))
            }
            _ = listening.cancelled() => return,
            _ = state.closing.cancelled() => return,
        };
        let Some(note) = note else { return };
        match sse.offer(&note) {
            Offered::Queued => {}
            Offered::OverBudget => state
                .metrics
                .limit_hit(metrics::MCP, "max_stream_queue_bytes"),
            Offered::Gone => return,
        }
    }
}
