//! Imports: MCP servers and A2A agents brought onto the bus, each as a
//! Thing of its own (`[[imports.mcp]]`, `[[imports.a2a]]`; docs/imports.md).
//!
//! Each upstream is an [`upstream::Upstream`] (`mcp/`, `a2a/`), served to
//! the gateway by a [`bridge`] through an in-process agent link
//! (`crate::gateway::agent_link`): to the router, the records, the faces
//! and the cluster it is one more agent hosting its Thing.

pub mod a2a;
mod bridge;
mod calls;
pub mod http;
pub mod mcp;
mod replies;
pub mod td;
pub mod upstream;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, warn};

use crate::auth::Principal;
use crate::config::{ImportConfig, ImportsConfig, Protocol};
use crate::gateway::Gateway;
use crate::telemetry::metrics::Metrics;
use bridge::{Bridge, Pacing};
use replies::Speaker;
use upstream::Upstream;

/// Starts a bridge per configured upstream; each runs until `shutdown` and
/// then lets its upstream go (a `command` is stopped). Wait on the tracker
/// to know they have.
pub fn start(
    config: &ImportsConfig,
    gateway: &Gateway,
    metrics: &Metrics,
    shutdown: CancellationToken,
) -> TaskTracker {
    let tracker = TaskTracker::new();
    for (import, protocol) in config.all() {
        let started = match protocol {
            Protocol::Mcp => mcp::McpUpstream::new(import)
                .map(|u| serve(&tracker, gateway, metrics, import, u, shutdown.clone())),
            Protocol::A2a => a2a::A2aUpstream::new(import)
                .map(|u| serve(&tracker, gateway, metrics, import, u, shutdown.clone())),
        };
        if let Err(e) = started {
            error!(upstream = %import.name, error = %e, "Cannot set up an imported upstream; it is left out.");
        }
    }
    tracker.close();
    tracker
}

/// Serves one upstream as its Thing's agent, on `tracker`. Public for
/// tests that bring an upstream of their own.
pub fn serve<U: Upstream>(
    tracker: &TaskTracker,
    gateway: &Gateway,
    metrics: &Metrics,
    import: &ImportConfig,
    upstream: U,
    shutdown: CancellationToken,
) {
    let protocol = match upstream.protocol() {
        "a2a" => Protocol::A2a,
        _ => Protocol::Mcp,
    };
    let thing = import.thing_id();
    let speaker = Speaker {
        thing: thing.clone(),
        name: import.name.clone(),
        protocol: protocol.as_str(),
        target: upstream.target().to_owned(),
    };
    let pacing = Pacing {
        probe_interval: std::time::Duration::from_millis(import.probe_interval_ms.max(100)),
        retry_min: std::time::Duration::from_millis(import.retry_min_ms.max(10)),
        retry_max: std::time::Duration::from_millis(import.retry_max_ms.max(import.retry_min_ms)),
    };
    let kind = import.thing_type(protocol);
    let gateway = gateway.clone();
    let parts = (speaker, gateway.tracer().clone(), metrics.clone());
    let principal = Principal::hosting(&format!("import:{}", import.name), &thing);
    tracker.spawn(async move {
        let Some(link) = attach(&gateway, principal, &thing, &shutdown).await else {
            upstream.close().await;
            return;
        };
        Bridge::new(Arc::new(upstream), link, parts, kind, pacing)
            .run(shutdown)
            .await;
    });
}

/// Claims the Thing for the upstream, waiting while another agent holds it.
async fn attach(
    gateway: &Gateway,
    principal: Principal,
    thing: &str,
    shutdown: &CancellationToken,
) -> Option<crate::gateway::agent_link::AgentLink> {
    let mut delay = std::time::Duration::from_millis(500);
    loop {
        match gateway
            .attach(principal.clone(), vec![thing.to_owned()])
            .await
        {
            Ok(link) => return Some(link),
            Err(e) => {
                warn!(thing, error = %e, "An imported upstream's Thing is hosted by another agent; trying again.");
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(std::time::Duration::from_secs(30));
    }
}
