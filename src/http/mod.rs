//! The HTTP port: `/lmos` (WebSocket gateway), the Thing Description
//! directory (`/.well-known/wot`, `/things`), the HTTP binding for
//! properties and actions (`/things/{id}/properties/...`,
//! `/things/{id}/actions/...`), `/healthz`, `/readyz`, `/metrics` and the
//! live console (`/console`).

pub mod a2a;
pub mod auth;
pub mod console;
pub mod directory;
pub mod guard;
pub mod jsonrpc;
pub mod mcp;
mod mqtt_ws;
pub mod oauth;
mod rpc_io;
pub mod server;
pub mod slow;
mod things;
mod upgrade;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{any, get, post};
use axum::{Extension, Router};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::directory::DirectoryService;
use crate::gateway::Gateway;
use crate::telemetry::metrics::Metrics;

/// Path of the WebSocket endpoint.
pub const LMOS_PATH: &str = "/lmos";

#[derive(Clone)]
pub struct HttpState {
    pub gateway: Gateway,
    /// Upgraded connections outlive their HTTP request; they are tracked
    /// here so shutdown can wait for them.
    pub connections: TaskTracker,
    pub shutdown: CancellationToken,
    /// Cancelled once in-flight requests have been answered on shutdown;
    /// WebSocket connections then close.
    pub closing: CancellationToken,
    pub directory: DirectoryService,
    pub metrics: Metrics,
    /// MQTT client connections, as the broker reports them.
    pub mqtt_connections: Arc<AtomicUsize>,
    /// Whether the embedded broker still serves.
    pub broker: crate::broker::health::Health,
    /// The MQTT guard, serving `/mqtt` (MQTT over WebSocket); `None`: not
    /// served (`mqtt.websocket = false`).
    pub mqtt: Option<crate::broker::guard::Guard>,
    pub auth: auth::HttpAuth,
    /// The cluster link's state, when there is one.
    pub cluster: Option<crate::cluster::ClusterStatus>,
    /// How long an HTTP caller waits for a synchronous action to end
    /// before it gets a status resource instead (`requests.timeout_ms`).
    pub request_timeout: Duration,
    /// `/console`: whether it is served, and what it links to.
    pub console: console::ConsoleSettings,
    /// Host, Origin and Content-Type rules for every request.
    pub guard: guard::Guard,
    /// MCP's sessions and limits (`/mcp`, when `mcp.enabled`).
    pub mcp: Arc<mcp::Mcp>,
    /// A2A's tasks and limits (`/a2a`, when `a2a.enabled`).
    pub a2a: Arc<a2a::A2a>,
    /// What the agent protocols serve (`mcp.enabled`, `a2a.enabled`).
    pub agent_protocols: AgentProtocols,
    /// MCP as an OAuth resource server, while `auth.jwt.issuer` is set.
    pub oauth: Option<Arc<oauth::OAuthResource>>,
}

/// Which agent protocols the port serves.
#[derive(Debug, Clone, Copy)]
pub struct AgentProtocols {
    pub mcp: bool,
    pub a2a: bool,
}

pub fn router(state: HttpState) -> Router {
    let things = Router::new()
        .route("/.well-known/wot", get(directory::well_known))
        .route("/things", get(directory::list).post(directory::post))
        .route(
            "/things/{id}",
            get(directory::get)
                .put(directory::put)
                .patch(directory::patch)
                .delete(directory::delete),
        )
        .with_state(state.directory.clone());
    let auth = state.auth.clone();
    let guard = state.guard.clone();
    let console = console::routes(state.console.enabled);
    let mut agents = Router::new();
    if state.agent_protocols.mcp {
        agents = agents.route("/mcp", post(mcp::post).get(mcp::get).delete(mcp::delete));
        if let Some(oauth) = state.oauth.clone() {
            let metadata = Router::new()
                .route(oauth::METADATA_PATH, get(oauth::metadata))
                .route(oauth::METADATA_MCP_PATH, get(oauth::metadata))
                .layer(Extension(oauth));
            agents = agents.merge(metadata);
        }
    }
    if state.agent_protocols.a2a {
        agents = agents
            .route("/.well-known/agent-card.json", get(a2a::only_agent_card))
            .route(
                "/a2a/{thing}/.well-known/agent-card.json",
                get(a2a::agent_card).fallback(a2a::no_route),
            )
            .route("/a2a/{thing}", post(a2a::rpc).fallback(a2a::no_route))
            .route(
                "/a2a/{thing}/",
                post(a2a::rpc_slash).fallback(a2a::no_route),
            )
            .route("/a2a", any(a2a::no_route))
            .route("/a2a/", any(a2a::no_route))
            .route("/a2a/{thing}/{*rest}", any(a2a::no_route));
    }
    Router::new()
        .route(LMOS_PATH, get(upgrade::lmos))
        .route(mqtt_ws::PATH, get(mqtt_ws::upgrade))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/things/{id}/properties", get(things::read_all_properties))
        .route(
            "/things/{id}/properties/{name}",
            get(things::read_property).put(things::write_property),
        )
        .route(
            "/things/{id}/actions/{name}",
            post(things::invoke_action)
                .get(things::query_action)
                .delete(things::cancel_action),
        )
        .route(
            "/things/{id}/actions/{name}/{invocation}",
            get(things::query_action).delete(things::cancel_action),
        )
        .merge(console)
        .merge(agents)
        .with_state(state)
        .merge(things)
        .layer(Extension(auth))
        // Outermost: a refused request reaches no handler and no
        // credential check.
        .layer(axum::middleware::from_fn_with_state(guard, guard::check))
}

/// Alive unless the embedded broker has failed (the process then stops by
/// itself; a supervisor that sees this first may restart it).
async fn healthz(State(state): State<HttpState>) -> (StatusCode, String) {
    if let Some(why) = state.broker.failure() {
        return broker_failed(why);
    }
    // The store could not be opened again after an I/O error: nothing
    // will be kept until a restart, which is what a supervisor does.
    match state.metrics.store_stats().and_then(|s| s.stopped()) {
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store stopped: {why}\n"),
        ),
        None => (StatusCode::OK, "ok\n".to_owned()),
    }
}

fn broker_failed(why: &str) -> (StatusCode, String) {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("MQTT broker failed: {why}\n"),
    )
}

/// Ready while the embedded broker serves, the gateway's dispatcher answers
/// and the sidecar is not shutting down. (The broker and the TDs from
/// `discovery.things` are ready before the HTTP port serves at all.)
///
/// A memory budget reached in the last seconds adds a line but keeps the
/// 200: the sidecar still serves everyone else (the budget closed the
/// connection holding the most), and a 503 would let whoever fills a
/// budget take the pod, agent included, out of service at will. A full
/// store (`store.max_file_bytes`, `store.min_free_bytes`) likewise: what
/// needs no write (QoS 0, clean sessions, reads, consumers, invocations)
/// is still served, and writes come back by themselves with the space.
async fn readyz(State(state): State<HttpState>) -> (StatusCode, String) {
    readiness(&state).await
}

/// `/readyz`'s answer, which the console shows too.
pub(crate) async fn readiness(state: &HttpState) -> (StatusCode, String) {
    if let Some(why) = state.broker.failure() {
        return broker_failed(why);
    }
    let (status, text) = ready(state).await;
    let mut text = text.to_owned();
    for line in state.gateway.budget_report() {
        text.push_str(&line);
        text.push('\n');
    }
    if let Some(reason) = state.metrics.store_stats().and_then(|s| s.full_reason()) {
        text.push_str(&format!(
            "store full: {reason}: writes are refused until space returns\n"
        ));
    }
    let (td_bytes, directory_full) = state.directory.directory().bytes();
    if directory_full {
        text.push_str(&format!(
            "directory full (discovery.max_total_td_bytes): {td_bytes} bytes of Thing Descriptions; new ones are refused with 507 until some are deleted\n"
        ));
    }
    (status, text)
}

async fn ready(state: &HttpState) -> (StatusCode, &'static str) {
    if state.shutdown.is_cancelled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n");
    }
    match tokio::time::timeout(Duration::from_secs(2), state.gateway.stats()).await {
        // Local agents and consumers are served without the cluster, so a
        // lost cluster link is reported, not a reason to take the sidecar
        // out of service.
        Ok(_) => match &state.cluster {
            Some(c) if !c.connected() => (
                StatusCode::OK,
                "ready (cluster unreachable: local traffic only)\n",
            ),
            Some(c) if c.jetstream().core_fallback.get() > 0 => (
                StatusCode::OK,
                "ready (cluster without JetStream: events by core NATS, at most once)\n",
            ),
            _ => (StatusCode::OK, "ready\n"),
        },
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "gateway not responding\n"),
    }
}

/// Prometheus / OpenMetrics text.
async fn metrics(State(state): State<HttpState>) -> impl IntoResponse {
    let stats = state.gateway.stats().await;
    let mqtt = state.mqtt_connections.load(Ordering::Relaxed);
    state
        .metrics
        .set_connections(crate::telemetry::metrics::MQTT, mqtt);
    if let Some(c) = &state.cluster {
        state.metrics.set_cluster(c.connected(), c.reconnects());
        state.metrics.set_cluster_jetstream(&c.jetstream().values());
    }
    state.metrics.set_gauges(
        stats.connections,
        stats.subscriptions,
        stats.pending_requests,
        stats.hosted_things,
    );
    let h = stats.history;
    state.metrics.set_history(h.things, h.events, h.bytes);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

/// Serves HTTP on an already bound listener until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    state: HttpState,
    options: server::ServeOptions,
) -> std::io::Result<()> {
    let shutdown = state.shutdown.clone();
    let metrics = state.metrics.clone();
    server::serve(listener, router(state), options, metrics, shutdown).await
}
