//! Prometheus metrics, one registry per sidecar (no global state, so
//! several sidecars in one process, as in the tests, do not mix counts).
//! Labels stay low-cardinality: message types, transports, error kinds and
//! drop reasons are fixed sets; no Thing IDs.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::lmos::MessageType;
use families::{Access, Budgets, Clients, Cluster, Kept, Messages};
pub use spans::{SpanCounters, EXPORT_FAILED};

mod families;
mod imports;
mod spans;

/// Label sets as arrays: no allocation per message.
type Labels1 = [(&'static str, &'static str); 1];
type Labels2 = [(&'static str, &'static str); 2];

pub const WEBSOCKET: &str = "websocket";
pub const MQTT: &str = "mqtt";
/// The HTTP port: directory requests and WebSocket handshakes.
pub const HTTP: &str = "http";
/// MCP clients at `/mcp` (Streamable HTTP).
pub const MCP: &str = "mcp";
/// A2A clients at `/a2a/...`.
pub const A2A: &str = "a2a";
/// Imported MCP servers and A2A agents speaking through their in-process
/// agent link (`crate::imports`).
pub const IMPORT: &str = "import";

/// A message type as a label: one of the 17, or `unknown`.
fn type_label(message_type: &str) -> &'static str {
    message_type
        .parse::<MessageType>()
        .map_or("unknown", MessageType::as_str)
}

/// The transports messages are counted under.
const TRANSPORTS: [&str; 5] = [WEBSOCKET, MQTT, HTTP, MCP, A2A];

/// A message family's counters by message type (and `unknown`) and
/// transport, each looked up in the family once: a hash of the labels and a
/// lock per message, twice per event fanned out, were 1 % of a WebSocket
/// fan-out's CPU.
#[derive(Default)]
struct Resolved([[std::sync::OnceLock<Counter>; TRANSPORTS.len()]; MessageType::ALL.len() + 1]);

impl Resolved {
    /// The counter of `message_type` on `transport` in `family`.
    fn with(
        &self,
        family: &Family<Labels2, Counter>,
        transport: &'static str,
        message_type: &str,
        count: impl FnOnce(&Counter),
    ) {
        let parsed = message_type.parse::<MessageType>().ok();
        let label = parsed.map_or("unknown", MessageType::as_str);
        let labels = [("message_type", label), ("transport", transport)];
        let Some(t) = TRANSPORTS.iter().position(|x| *x == transport) else {
            return count(&family.get_or_create(&labels));
        };
        let m = parsed.map_or(MessageType::ALL.len(), |m| m as usize);
        count(self.0[m][t].get_or_init(|| family.get_or_create(&labels).clone()));
    }
}

struct Inner {
    registry: Registry,
    messages: Messages,
    clients: Clients,
    access: Access,
    budgets: Budgets,
    cluster: Cluster,
    kept: Kept,
    imports: imports::Imports,
    store_stats: std::sync::OnceLock<Arc<crate::store::StoreStats>>,
    received: Resolved,
    sent: Resolved,
}

#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::with_spans(&SpanCounters::default())
    }

    /// With the tracer's span counters (see [`crate::telemetry::Tracing`]).
    /// The groups register in this order, which is the exposition's.
    pub fn with_spans(spans: &SpanCounters) -> Metrics {
        let mut registry = Registry::with_prefix("lmos_sidecar");
        spans.register(&mut registry);
        let budgets = Budgets::register(&mut registry);
        let cluster = Cluster::register(&mut registry);
        let access = Access::register(&mut registry);
        let messages = Messages::register(&mut registry);
        let clients = Clients::register(&mut registry);
        let kept = Kept::register(&mut registry);
        let imports = imports::Imports::register(&mut registry);
        Metrics(Arc::new(Inner {
            registry,
            messages,
            clients,
            access,
            budgets,
            cluster,
            kept,
            imports,
            store_stats: std::sync::OnceLock::new(),
            received: Resolved::default(),
            sent: Resolved::default(),
        }))
    }

    pub fn received(&self, transport: &'static str, message_type: &str) {
        let family = &self.0.messages.received;
        self.0.received.with(family, transport, message_type, |c| {
            c.inc();
        });
    }

    pub fn sent(&self, transport: &'static str, message_type: &str) {
        self.sent_many(transport, message_type, 1);
    }

    pub fn sent_many(&self, transport: &'static str, message_type: &str, n: u64) {
        let family = &self.0.messages.sent;
        self.0.sent.with(family, transport, message_type, |c| {
            c.inc_by(n);
        });
    }

    /// `kind` is a problem slug (`invalid-json`, `timeout`, ...).
    pub fn error(&self, kind: &'static str) {
        self.0
            .messages
            .errors
            .get_or_create(&[("kind", kind)])
            .inc();
    }

    /// `reason`: `slow_consumer`, `slow_consumer_disconnected`,
    /// `invalid_payload`, `too_large`, `reply_topic_refused`,
    /// `unanswerable_request`.
    pub fn dropped(&self, reason: &'static str) {
        self.0
            .messages
            .dropped
            .get_or_create(&[("reason", reason)])
            .inc();
    }

    pub fn request_done(&self, message_type: &str, elapsed: Duration) {
        let labels = [("message_type", type_label(message_type))];
        self.0
            .messages
            .request_seconds
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    pub fn set_connections(&self, transport: &'static str, n: usize) {
        self.0
            .clients
            .connections
            .get_or_create(&[("transport", transport)])
            .set(n as i64);
    }

    pub fn set_gauges(
        &self,
        websocket_connections: usize,
        subscriptions: usize,
        pending: usize,
        hosted: usize,
    ) {
        self.0
            .clients
            .connections
            .get_or_create(&[("transport", WEBSOCKET)])
            .set(websocket_connections as i64);
        self.0.clients.subscriptions.set(subscriptions as i64);
        self.0.clients.pending_requests.set(pending as i64);
        self.0.clients.hosted_things.set(hosted as i64);
    }

    pub fn set_history(&self, things: usize, events: usize, bytes: usize) {
        for (of, n) in [("things", things), ("events", events), ("bytes", bytes)] {
            self.0
                .kept
                .history
                .get_or_create(&[("of", of)])
                .set(n as i64);
        }
    }

    /// `reason`: `missing`, `invalid`, `expired` (a JWT past its `exp`),
    /// `scheme`, `certificate` (a client certificate refused in the TLS
    /// handshake or naming no principal), `busy`, `throttled`.
    pub fn auth_failure(&self, transport: &'static str, reason: &'static str) {
        let labels = [("reason", reason), ("transport", transport)];
        self.0.access.auth_failures.get_or_create(&labels).inc();
    }

    /// A fetch of the JWT signing keys; `outcome`: `ok`, `failed`.
    pub fn jwks_fetch(&self, outcome: &'static str) {
        let labels = [("outcome", outcome)];
        self.0.access.jwks_fetches.get_or_create(&labels).inc();
    }

    /// The JWT signing keys held now.
    pub fn set_jwks_keys(&self, n: usize) {
        self.0.access.jwks_keys.set(n as i64);
    }

    /// `result`: `hit`, `miss`.
    pub fn auth_cache(&self, result: &'static str) {
        self.0
            .access
            .auth_cache
            .get_or_create(&[("result", result)])
            .inc();
    }

    /// `outcome`: `queued`, `busy`, `throttled`.
    pub fn auth_verification(&self, outcome: &'static str) {
        let labels = [("outcome", outcome)];
        self.0
            .access
            .auth_verifications
            .get_or_create(&labels)
            .inc();
    }

    /// `access`: `host`, `consume`, `operate`.
    pub fn denied(&self, transport: &'static str, access: &'static str) {
        let labels = [("access", access), ("transport", transport)];
        self.0.access.denied.get_or_create(&labels).inc();
    }

    /// `limit`: the configuration key's last part, e.g. `max_subscriptions`;
    /// a per-principal quota's whole key, e.g. `quotas.subscriptions`.
    pub fn limit_hit(&self, transport: &'static str, limit: &'static str) {
        let labels = [("limit", limit), ("transport", transport)];
        self.0.access.limits.get_or_create(&labels).inc();
    }

    /// The counter of `limit_hit(transport, limit)`, resolved once, for a
    /// hot path.
    pub fn limit_counter(&self, transport: &'static str, limit: &'static str) -> Counter {
        let labels = [("limit", limit), ("transport", transport)];
        self.0.access.limits.get_or_create(&labels).clone()
    }

    /// The gauge of the bytes kept MQTT sessions' queues take on disk.
    pub fn mqtt_queued_bytes(&self) -> Gauge {
        self.0.budgets.queued_bytes.clone()
    }

    /// The gauge of the largest usage of one quota (`quotas.*` key), for
    /// its [`crate::quotas::Tally`].
    pub fn quota_largest(&self, quota: &'static str) -> Gauge {
        self.0
            .budgets
            .quota_largest
            .get_or_create(&[("quota", quota)])
            .clone()
    }

    /// The gauge of the directory's bytes, for its budget to keep.
    pub fn directory_bytes(&self) -> Gauge {
        self.0.budgets.directory_bytes.clone()
    }

    pub fn set_cluster(&self, connected: bool, reconnects: u64) {
        self.0.cluster.connected.set(i64::from(connected));
        self.0.cluster.reconnects.set(reconnects as i64);
    }

    /// The native link's JetStream counts, by `what`.
    pub fn set_cluster_jetstream(&self, values: &[(&'static str, u64)]) {
        for &(what, value) in values {
            let labels = [("what", what)];
            self.0
                .cluster
                .jetstream
                .get_or_create(&labels)
                .set(value as i64);
        }
    }

    /// A byte budget's gauge of bytes in use (live: the budget counts in
    /// it) and its counter of hits; its limit is published alongside.
    pub fn budget(&self, budget: &'static str, limit: usize) -> (Gauge, Counter) {
        let limit_gauge = [("budget", budget), ("of", "limit")];
        self.0
            .budgets
            .bytes
            .get_or_create(&limit_gauge)
            .set(limit as i64);
        let used = self
            .0
            .budgets
            .bytes
            .get_or_create(&[("budget", budget), ("of", "used")])
            .clone();
        (used, self.budget_hit_counter(budget))
    }

    /// The counter of a budget that has no gauge of its own (a per-Thing or
    /// per-connection one).
    /// The `dropped` counter of `reason`, for a hot path that counts
    /// without a label lookup.
    pub fn dropped_counter(&self, reason: &'static str) -> Counter {
        self.0
            .messages
            .dropped
            .get_or_create(&[("reason", reason)])
            .clone()
    }

    pub fn budget_hit_counter(&self, budget: &'static str) -> Counter {
        self.0
            .budgets
            .hits
            .get_or_create(&[("budget", budget)])
            .clone()
    }

    /// Reports the store's figures at every scrape.
    pub fn watch_store(&self, stats: Arc<crate::store::StoreStats>) {
        let _ = self.0.store_stats.set(stats);
    }

    /// The store's figures, once [`Metrics::watch_store`] gave them: for
    /// `/readyz` and `/healthz`.
    pub fn store_stats(&self) -> Option<&Arc<crate::store::StoreStats>> {
        self.0.store_stats.get()
    }

    fn refresh_store(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(stats) = self.0.store_stats.get() else {
            return;
        };
        let figures = [
            ("file_bytes", stats.file_bytes.load(Relaxed)),
            ("queued_bytes", stats.queued_bytes.load(Relaxed)),
            ("waits", stats.waits.load(Relaxed)),
            ("commits", stats.commits.load(Relaxed)),
            ("syncs", stats.syncs.load(Relaxed)),
            ("changes", stats.changes.load(Relaxed)),
            ("commit_micros_total", stats.commit_micros.load(Relaxed)),
            ("max_commit_micros", stats.max_commit_micros.load(Relaxed)),
            ("reopens", stats.reopens.load(Relaxed)),
            ("refused_acks", stats.refused_acks.load(Relaxed)),
        ];
        self.0.kept.store_full.set(stats.full.load(Relaxed) as i64);
        let refused = stats.refused.load(Relaxed);
        let counted = self.0.kept.store_refused.get();
        self.0
            .kept
            .store_refused
            .inc_by(refused.saturating_sub(counted));
        for (what, value) in figures {
            self.0
                .kept
                .store
                .get_or_create(&[("what", what)])
                .set(value as i64);
        }
        let recovered = stats.recovered.lock().unwrap_or_else(|e| e.into_inner());
        for (what, value) in recovered.iter() {
            let name = match *what {
                "retained" => "recovered_retained",
                "sessions" => "recovered_sessions",
                "queued" => "recovered_queued",
                "invocations" => "recovered_invocations",
                _ => "recovered_other",
            };
            self.0
                .kept
                .store
                .get_or_create(&[("what", name)])
                .set(*value as i64);
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        self.refresh_store();
        let mut out = String::new();
        encode(&mut out, &self.0.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_render_with_low_cardinality_labels() {
        let m = Metrics::new();
        m.received(WEBSOCKET, "subscribeEvent");
        m.received(WEBSOCKET, "madeUp");
        m.error("invalid-json");
        m.request_done("readProperty", Duration::from_millis(3));
        let text = m.render();
        assert!(text.contains(r#"lmos_sidecar_messages_received_total{message_type="subscribeEvent",transport="websocket"} 1"#), "{text}");
        assert!(text.contains(r#"message_type="unknown""#));
        assert!(text.contains(r#"lmos_sidecar_errors_total{kind="invalid-json"} 1"#));
        assert!(text.contains("lmos_sidecar_request_duration_seconds_bucket"));
    }
}
