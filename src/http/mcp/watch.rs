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
const KEEP_ALIVE: Duration = Duration::from_secs(15);

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

/// A session's server stream: `tools/list_changed` whenever the caller's
/// tool names change, until the session ends, a newer GET replaces this
/// one, the client goes or the sidecar stops.
pub async fn notify_changes(
    state: HttpState,
    principal: Principal,
    sse: SseSender,
    ended: CancellationToken,
) {
    let mut changes = state.mcp.watch.subscribe(&state);
    let names = |tools: Vec<super::tools::Tool>| -> Vec<String> {
        tools.into_iter().map(|t| t.name).collect()
    };
    let mut known = names(tools_for(&state, &principal).await);
    let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
    keep_alive.reset();
    loop {
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
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
            _ = state.closing.cancelled() => return,
        }
        if sse.is_closed() {
            return;
        }
        let now = names(tools_for(&state, &principal).await);
        if now != known {
            known = now;
            let note =
                jsonrpc::notification("notifications/tools/list_changed", serde_json::json!({}));
            match sse.offer(&note) {
                Offered::Queued => {}
                Offered::OverBudget => state
                    .metrics
                    .limit_hit(metrics::MCP, "max_stream_queue_bytes"),
                Offered::Gone => return,
            }
        }
    }
}
