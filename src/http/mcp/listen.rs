//! `subscriptions/listen` (2026-07-28): the answer is an SSE stream that
//! stays open, acknowledged first (what of the filter is honoured), then
//! carrying the news asked for, each tagged with the subscription's id
//! (the request's JSON-RPC id): `notifications/tools/list_changed` when the
//! caller's tools change (the host watch, as the handshake revisions' GET
//! stream), `notifications/resources/updated` for the resources it follows.
//! A stream the sidecar ends (shutdown, the principal's newer one past
//! `mcp.max_listens_per_principal`) gets the graceful-close result.
//!
//! Bounded: `mcp.max_listens` in all (past it refused), per principal
//! (past it the oldest ends), `mcp.max_listen_resources` URIs per stream.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::headers::SUBSCRIPTION_ID;
use super::resources;
use super::watch::{List, ListChanges, KEEP_ALIVE};
use super::Ctx;
use crate::http::jsonrpc;
use crate::http::rpc_io::{self, accepts_sse, Offered, SseSender};
use crate::http::HttpState;
use crate::telemetry::metrics;

/// How many listen streams there may be.
#[derive(Debug, Clone, Copy)]
pub struct ListenLimits {
    pub max: usize,
    pub per_principal: usize,
    /// Resource URIs one stream follows.
    pub resources: usize,
}

/// The last stream's number, and each principal's open streams, oldest
/// first, with the token that ends each.
type Open = (u64, HashMap<String, Vec<(u64, CancellationToken)>>);

/// The open listen streams.
#[derive(Debug)]
pub struct Listens {
    limits: ListenLimits,
    open: Mutex<Open>,
}

/// A stream's place; given back ([`Listens::close`]) when its task ends.
pub struct Slot {
    principal: String,
    number: u64,
    pub ended: CancellationToken,
}

/// Why a listen stream was not opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the sidecar holds {0} MCP listen streams, as many as it may (mcp.max_listens)")]
pub struct Full(pub usize);

impl Listens {
    pub fn new(limits: ListenLimits) -> Listens {
        Listens {
            limits,
            open: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for `principal`'s new stream; its oldest ends when it has
    /// its share already (`Ok(_, true)`).
    pub fn open(&self, principal: &str) -> Result<(Slot, bool), Full> {
        let mut open = self.lock();
        let mut evicted = false;
        let per_principal = self.limits.per_principal.max(1);
        if let Some(own) = open.1.get_mut(principal) {
            while own.len() >= per_principal {
                let (_, oldest) = own.remove(0);
                oldest.cancel();
                evicted = true;
            }
        }
        let total: usize = open.1.values().map(Vec::len).sum();
        if total >= self.limits.max {
            return Err(Full(self.limits.max));
        }
        open.0 += 1;
        let number = open.0;
        let ended = CancellationToken::new();
        open.1
            .entry(principal.to_owned())
            .or_default()
            .push((number, ended.clone()));
        let slot = Slot {
            principal: principal.to_owned(),
            number,
            ended,
        };
        Ok((slot, evicted))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().1.values().map(Vec::len).sum()
    }
}

/// A notification tagged with the subscription it belongs to.
fn tagged(mut note: Value, id: &Value) -> Value {
    if !note["params"].is_object() {
        note["params"] = json!({});
    }
    if !note["params"]["_meta"].is_object() {
        note["params"]["_meta"] = json!({});
    }
    note["params"]["_meta"][SUBSCRIPTION_ID] = id.clone();
    note
}

/// A stream's place, held by the stream's task (or the request until it
/// starts): given back, and its followers stopped, however it ends.
struct Held {
    state: HttpState,
    slot: Slot,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.slot.ended.cancel();
        self.state.mcp.listens.close(&self.slot);
    }
}

fn refusal(id: &Value, status: StatusCode, code: i64, text: &str) -> Response {
    rpc_io::json(status, &jsonrpc::error(id, code, text, None))
}

/// A place for the caller's new stream, or the refusal to answer.
fn hold(ctx: &Ctx, id: &Value) -> Result<Held, Response> {
    let state = &ctx.state;
    match state.mcp.listens.open(ctx.principal.name()) {
        Ok((slot, evicted)) => {
            if evicted {
                state
                    .metrics
                    .limit_hit(metrics::MCP, "max_listens_per_principal");
            }
            Ok(Held {
                state: state.clone(),
                slot,
            })
        }
        Err(full) => {
            state.metrics.limit_hit(metrics::MCP, "max_listens");
            warn!(
                max = full.0,
                "MCP listen streams at mcp.max_listens; refusing one."
            );
            let text = format!("{full}; try again later");
            let status = StatusCode::SERVICE_UNAVAILABLE;
            Err(refusal(id, status, jsonrpc::INTERNAL_ERROR, &text))
        }
    }
}

/// Follows each resource the caller may watch, forwarding its news to
/// `tx` until the stream ends; the URIs followed.
async fn follow(ctx: &Ctx, uris: Vec<&str>, held: &Held, tx: mpsc::Sender<Value>) -> Vec<Value> {
    let mut followed = Vec::new();
    for uri in uris {
        let Ok(mut watch) = resources::watch(&ctx.state, &ctx.principal, uri).await else {
            continue;
        };
        followed.push(json!(uri));
        let (tx, ended) = (tx.clone(), held.slot.ended.clone());
        tokio::spawn(async move {
            loop {
                let note = tokio::select! {
                    note = watch.next() => note,
                    _ = ended.cancelled() => None,
                };
                let Some(note) = note else { return };
                if tx.send(note).await.is_err() {
                    return;
                }
            }
        });
    }
    followed
}

pub async fn listen(ctx: Ctx, headers: &HeaderMap, id: Value, params: &Value) -> Response {
    if !accepts_sse(headers) {
        let text = "subscriptions/listen answers with a text/event-stream; accept it";
        return refusal(
            &id,
            StatusCode::NOT_ACCEPTABLE,
            jsonrpc::INVALID_REQUEST,
            text,
        );
    }
    let filter = &params["notifications"];
    let limit = ctx.state.mcp.listens.limits.resources;
    let uris: Vec<&str> = filter["resourceSubscriptions"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if uris.len() > limit {
        let text =
            format!("at most {limit} resourceSubscriptions per stream (mcp.max_listen_resources)");
        return refusal(&id, StatusCode::BAD_REQUEST, jsonrpc::INVALID_PARAMS, &text);
    }
    let held = match hold(&ctx, &id) {
        Ok(held) => held,
        Err(refused) => return refused,
    };
    let mut honoured = Map::new();
    let tools = filter["toolsListChanged"] == true;
    if tools {
        honoured.insert("toolsListChanged".into(), json!(true));
    }
    // Each followed resource forwards its news here.
    let (news_tx, news) = mpsc::channel::<Value>(16);
    let followed = follow(&ctx, uris, &held, news_tx).await;
    if !followed.is_empty() {
        honoured.insert("resourceSubscriptions".into(), Value::Array(followed));
    }
    let resources_changed = filter["resourcesListChanged"] == true;
    if resources_changed {
        honoured.insert("resourcesListChanged".into(), json!(true));
    }
    let mut changes = Vec::new();
    for (asked, list) in [(tools, List::Tools), (resources_changed, List::Resources)] {
        if asked {
            changes.push(ListChanges::new(&ctx.state, &ctx.principal, list).await);
        }
    }
    let (sse, response) = rpc_io::sse(&ctx.state.mcp.streams);
    let ack = jsonrpc::notification(
        "notifications/subscriptions/acknowledged",
        json!({"notifications": honoured}),
    );
    sse.send(&tagged(ack, &id));
    let ended = held.slot.ended.clone();
    tokio::spawn(async move {
        let stream = Stream {
            ctx,
            id,
            sse,
            ended,
        };
        if stream.run(changes, news).await {
            let mut result = json!({"resultType": "complete"});
            result["_meta"] = json!({SUBSCRIPTION_ID: stream.id});
            stream.sse.send(&jsonrpc::result(&stream.id, result));
        }
        drop(held);
    });
    response
}

impl Listens {
    pub fn close(&self, slot: &Slot) {
        let mut open = self.lock();
        if let Some(own) = open.1.get_mut(&slot.principal) {
            own.retain(|(n, _)| *n != slot.number);
            if own.is_empty() {
                open.1.remove(&slot.principal);
            }
        }
    }
}

struct Stream {
    ctx: Ctx,
    id: Value,
    sse: SseSender,
    ended: CancellationToken,
}

/// The next change of any of the lists: which, or `None` at shutdown;
/// never without lists.
async fn list_change(changes: &mut [ListChanges]) -> Option<List> {
    if changes.is_empty() {
        return std::future::pending().await;
    }
    let nexts = changes.iter_mut().map(|c| {
        let list = c.list();
        Box::pin(async move { c.next().await.map(|()| list) })
    });
    futures_util::future::select_all(nexts).await.0
}

impl Stream {
    /// Forwards news until the client goes (`false`) or the sidecar ends
    /// the stream (`true`: it says so with a result).
    async fn run(&self, mut changes: Vec<ListChanges>, mut news: mpsc::Receiver<Value>) -> bool {
        let state = &self.ctx.state;
        let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
        keep_alive.reset();
        let mut news_open = true;
        loop {
            let note = tokio::select! {
                changed = list_change(&mut changes) => match changed {
                    Some(List::Tools) => jsonrpc::notification("notifications/tools/list_changed", json!({})),
                    Some(List::Resources) => jsonrpc::notification("notifications/resources/list_changed", json!({})),
                    None => return true,
                },
                note = news.recv(), if news_open => match note {
                    Some(note) => note,
                    None => { news_open = false; continue; }
                },
                _ = keep_alive.tick() => {
                    if !self.sse.keep_alive() {
                        return false;
                    }
                    continue;
                }
                _ = self.sse.closed() => return false,
                _ = self.ended.cancelled() => return true,
                _ = state.closing.cancelled() => return true,
            };
            match self.sse.offer(&tagged(note, &self.id)) {
                Offered::Queued => {}
                Offered::OverBudget => state
                    .metrics
                    .limit_hit(metrics::MCP, "max_stream_queue_bytes"),
                Offered::Gone => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listens(max: usize, per_principal: usize) -> Listens {
        Listens::new(ListenLimits {
            max,
            per_principal,
            resources: 4,
        })
    }

    #[test]
    fn a_principal_over_its_share_ends_its_oldest_stream_not_anothers() {
        let l = listens(3, 2);
        let (bob, _) = l.open("bob").unwrap();
        let (first, _) = l.open("alice").unwrap();
        let (_second, evicted) = l.open("alice").unwrap();
        assert!(!evicted);
        let (_third, evicted) = l.open("alice").unwrap();
        assert!(evicted && first.ended.is_cancelled());
        assert!(!bob.ended.is_cancelled());
        l.close(&first);
        assert_eq!(l.len(), 3);
        // The global cap refuses rather than ends someone else's.
        assert_eq!(l.open("carol").err().map(|f| f.0), Some(3));
        l.close(&bob);
        assert!(l.open("carol").is_ok());
    }

    #[test]
    fn news_carries_its_subscription_id() {
        let note = jsonrpc::notification("notifications/tools/list_changed", json!({}));
        let note = tagged(note, &json!(7));
        assert_eq!(note["params"]["_meta"][SUBSCRIPTION_ID], 7);
    }
}
