//! Tools come and go with their agents: one task looks at which Things are
//! hosted (and their descriptions) once a second while any MCP client
//! listens, and each session's `GET /mcp` stream tells its client
//! `notifications/tools/list_changed` when *its* tools changed.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::tools_for;
use crate::auth::Principal;
use crate::gateway::Gateway;
use crate::http::jsonrpc;
use crate::http::rpc_io::{Offered, SseSender};
use crate::http::HttpState;
use crate::telemetry::metrics;

const LOOK_EVERY: Duration = Duration::from_secs(1);
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The Things an agent hosts now.
pub async fn hosted(gateway: &Gateway) -> BTreeSet<String> {
    gateway.hosted().await.into_iter().collect()
}

/// A fingerprint of what tools are made of, changed when an agent comes or
/// goes or a hosted Thing's description changes.
pub struct HostWatch {
    tx: watch::Sender<u64>,
    started: AtomicBool,
}

impl Default for HostWatch {
    fn default() -> Self {
        HostWatch {
            tx: watch::channel(0).0,
            started: AtomicBool::new(false),
        }
    }
}

async fn fingerprint(state: &HttpState) -> u64 {
    let hosts = hosted(&state.gateway).await;
    let directory = state.directory.directory();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for id in &hosts {
        id.hash(&mut h);
        if let Some(td) = directory.get(id) {
            td["actions"].to_string().hash(&mut h);
            td["properties"].to_string().hash(&mut h);
        }
    }
    h.finish()
}

impl HostWatch {
    pub(super) fn subscribe(&self, state: &HttpState) -> watch::Receiver<u64> {
        if !self.started.swap(true, Ordering::Relaxed) {
            tokio::spawn(look(state.clone()));
        }
        self.tx.subscribe()
    }
}

/// Looks while anyone listens, until shutdown.
async fn look(state: HttpState) {
    let watch = &state.mcp.watch;
    let mut tick = tokio::time::interval(LOOK_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = state.shutdown.cancelled() => return,
        }
        if watch.tx.receiver_count() == 0 {
            continue;
        }
        let now = fingerprint(&state).await;
        watch
            .tx
            .send_if_modified(|old| std::mem::replace(old, now) != now);
    }
}

/// Which list a caller hears of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    Tools,
    Resources,
}

/// The news of one caller's list: [`ListChanges::next`] resolves when
/// the names (URIs) of what *it* may use changed (so a principal without
/// rights on a Thing hears nothing of it coming or going).
pub struct ListChanges {
    state: HttpState,
    principal: Principal,
    list: List,
    changes: watch::Receiver<u64>,
    known: Vec<String>,
}

async fn names(state: &HttpState, principal: &Principal, list: List) -> Vec<String> {
    match list {
        List::Tools => tools_for(state, principal)
            .await
            .into_iter()
            .map(|t| t.name)
            .collect(),
        List::Resources => super::resources::for_caller(state, principal)
            .await
            .into_iter()
            .map(|r| r.uri)
            .collect(),
    }
}

impl ListChanges {
    pub async fn new(state: &HttpState, principal: &Principal, list: List) -> ListChanges {
        ListChanges {
            changes: state.mcp.watch.subscribe(state),
            known: names(state, principal, list).await,
            state: state.clone(),
            principal: principal.clone(),
            list,
        }
    }

    pub fn list(&self) -> List {
        self.list
    }

    /// Waits for a change of the caller's list; `None` when the watch
    /// ended (shutdown).
    pub async fn next(&mut self) -> Option<()> {
        loop {
            self.changes.changed().await.ok()?;
            let now = names(&self.state, &self.principal, self.list).await;
            if now != self.known {
                self.known = now;
                return Some(());
            }
        }
    }
}

/// A session's server stream: `tools/list_changed` whenever the caller's
/// tool names change, until the session ends, a newer GET replaces this
/// one, the client goes or the sidecar stops.
pub async fn notify_changes(
    state: HttpState,
    principal: Principal,
    sse: SseSender,
    ended: CancellationToken,
) {
    let mut changes = ListChanges::new(&state, &principal, List::Tools).await;
    let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
    keep_alive.reset();
    loop {
        tokio::select! {
            changed = changes.next() => {
                if changed.is_none() {
                    return;
                }
            }
            _ = keep_alive.tick() => {
                if !sse.keep_alive() {
                    return;
                }
                continue;
            }
            _ = ended.cancelled() => return,
            _ = sse.closed() => return,
            _ = state.closing.cancelled() => return,
        }
        let note = jsonrpc::notification("notifications/tools/list_changed", serde_json::json!({}));
        match sse.offer(&note) {
            Offered::Queued => {}
            Offered::OverBudget => state
                .metrics
                .limit_hit(metrics::MCP, "max_stream_queue_bytes"),
            Offered::Gone => return,
        }
    }
}
