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
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::lmos::MessageType;

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

/// A message type as a label: one of the 17, or `unknown`.
fn type_label(message_type: &str) -> &'static str {
    message_type
        .parse::<MessageType>()
        .map_or("unknown", MessageType::as_str)
}

/// `reason` of `lmos_sidecar_spans_dropped_total` for spans of a failed
/// export, or held back while exports fail.
pub const EXPORT_FAILED: &str = "export_failed";

/// What became of the spans the sidecar made (see `otlp::bounded`);
/// clones count together.
#[derive(Debug, Clone)]
pub struct SpanCounters {
    exported: Counter,
    dropped: Family<Labels1, Counter>,
    /// `dropped` for `export_failed`, at hand: counted span by span while
    /// the collector is down.
    export_failed: Counter,
    /// Whether the last export failed (the collector is down or refuses).
    failing: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Default for SpanCounters {
    fn default() -> SpanCounters {
        let dropped = Family::<Labels1, Counter>::default();
        let export_failed = dropped.get_or_create(&[("reason", EXPORT_FAILED)]).clone();
        SpanCounters {
            exported: Counter::default(),
            dropped,
            export_failed,
            failing: Default::default(),
        }
    }
}

impl SpanCounters {
    /// One span not built while the exports fail.
    pub fn held_back(&self) {
        self.export_failed.inc();
    }

    pub fn exported(&self, n: u64) {
        self.exported.inc_by(n);
    }

    /// `reason`: `queue_full`, `export_failed`.
    pub fn dropped(&self, reason: &'static str) {
        self.dropped_many(reason, 1);
    }

    pub fn dropped_many(&self, reason: &'static str, n: u64) {
        self.dropped.get_or_create(&[("reason", reason)]).inc_by(n);
    }

    /// Records how the last export went; returns how the one before went.
    pub fn set_failing(&self, failing: bool) -> bool {
        self.failing
            .swap(failing, std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the last export failed.
    pub fn failing(&self) -> bool {
        self.failing.load(std::sync::atomic::Ordering::Relaxed)
    }
}

struct Inner {
    registry: Registry,
    received: Family<Labels2, Counter>,
    sent: Family<Labels2, Counter>,
    errors: Family<Labels1, Counter>,
    dropped: Family<Labels1, Counter>,
    request_seconds: Family<Labels1, Histogram>,
    connections: Family<Labels1, Gauge>,
    subscriptions: Gauge,
    pending_requests: Gauge,
    hosted_things: Gauge,
    history: Family<Labels1, Gauge>,
    auth_failures: Family<Labels2, Counter>,
    auth_cache: Family<Labels1, Counter>,
    auth_verifications: Family<Labels1, Counter>,
    denied: Family<Labels2, Counter>,
    limits: Family<Labels2, Counter>,
    quota_largest: Family<Labels1, Gauge>,
    directory_bytes: Gauge,
    cluster: Cluster,
    budget_bytes: Family<Labels2, Gauge>,
    budget_hits: Family<Labels1, Counter>,
    store: Family<Labels1, Gauge>,
    store_stats: std::sync::OnceLock<Arc<crate::store::StoreStats>>,
}

/// The cluster link's gauges, set from its status at each scrape.
struct Cluster {
    connected: Gauge,
    reconnects: Gauge,
    jetstream: Family<Labels1, Gauge>,
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
    pub fn with_spans(spans: &SpanCounters) -> Metrics {
        let mut registry = Registry::with_prefix("lmos_sidecar");
        registry.register(
            "spans_exported",
            "Message spans the OTLP collector accepted",
            spans.exported.clone(),
        );
        registry.register(
            "spans_dropped",
            "Message spans lost, by reason: queue_full (the exporter fell behind), export_failed (the collector refused or was unreachable)",
            spans.dropped.clone(),
        );
        let received = Family::<Labels2, Counter>::default();
        let sent = Family::<Labels2, Counter>::default();
        let errors = Family::<Labels1, Counter>::default();
        let dropped = Family::<Labels1, Counter>::default();
        let request_seconds = Family::<Labels1, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        let connections = Family::<Labels1, Gauge>::default();
        let subscriptions = Gauge::default();
        let pending_requests = Gauge::default();
        let hosted_things = Gauge::default();
        let history = Family::<Labels1, Gauge>::default();
        let auth_failures = Family::<Labels2, Counter>::default();
        let auth_cache = Family::<Labels1, Counter>::default();
        let auth_verifications = Family::<Labels1, Counter>::default();
        let denied = Family::<Labels2, Counter>::default();
        let limits = Family::<Labels2, Counter>::default();
        let quota_largest = Family::<Labels1, Gauge>::default();
        registry.register(
            "quota_largest_usage",
            "The largest usage of any one principal, by quota (the `[quotas]` key): how close the greediest principal is to its quota",
            quota_largest.clone(),
        );
        let directory_bytes = Gauge::default();
        registry.register(
            "directory_bytes",
            "Bytes of the registered Thing Descriptions as served (discovery.max_total_td_bytes bounds them)",
            directory_bytes.clone(),
        );
        let cluster_connected = Gauge::default();
        let cluster_reconnects = Gauge::default();
        let cluster_jetstream = Family::<Labels1, Gauge>::default();
        let budget_bytes = Family::<Labels2, Gauge>::default();
        let budget_hits = Family::<Labels1, Counter>::default();
        registry.register(
            "memory_budget_bytes",
            "Byte budgets of what clients can make the sidecar hold, by budget (outbound, inbound, history) and `of` (used, limit)",
            budget_bytes.clone(),
        );
        registry.register(
            "memory_budget_hits",
            "Times a byte budget was reached, by budget: outbound and inbound (a connection closed), outbound_per_connection (slow-consumer policy applied), inbound_fragmented (a fragmented message over max_message_size, connection closed), history and history_per_thing (oldest events evicted)",
            budget_hits.clone(),
        );
        registry.register(
            "cluster_jetstream",
            "Native NATS mode with JetStream, counts since start by `what`: events published, messages (stream messages they went in, several events to one under load), acked, pending (published, not yet acked), republished (for want of an ack), received (from the stream into the broker), redelivered, duplicates (dropped as already received); state entries kv_writes, kv_errors; stale_presence (remote agents taken offline)",
            cluster_jetstream.clone(),
        );
        registry.register(
            "cluster_connected",
            "1 while the bridge to the external MQTT cluster is connected (only with cluster.url)",
            cluster_connected.clone(),
        );
        registry.register(
            "cluster_reconnects",
            "Times the bridge reconnected to the cluster",
            cluster_reconnects.clone(),
        );
        registry.register(
            "auth_failures",
            "Connections refused for missing or wrong credentials, by transport and reason (missing, invalid, scheme; busy: every password check taken; throttled: too many failures from that address for that name)",
            auth_failures.clone(),
        );
        registry.register(
            "auth_cache",
            "Credentials looked up in the cache of those that passed, by result (hit, miss)",
            auth_cache.clone(),
        );
        registry.register(
            "auth_verifications",
            "Password hash checks by outcome: queued (handed to the verifier threads), busy (refused at once, queue full), throttled (refused without a check after repeated failures)",
            auth_verifications.clone(),
        );
        registry.register(
            "denied",
            "Operations refused by authorization, by transport and access (host, consume, operate)",
            denied.clone(),
        );
        registry.register(
            "limit_hits",
            "Times a configured limit was reached, by transport and limit",
            limits.clone(),
        );
        registry.register(
            "messages_received",
            "LMOS messages received, by message type and transport",
            received.clone(),
        );
        registry.register(
            "messages_sent",
            "LMOS messages sent, by message type and transport",
            sent.clone(),
        );
        registry.register(
            "errors",
            "LMOS errors sent to clients, by kind",
            errors.clone(),
        );
        registry.register(
            "dropped_messages",
            "Messages dropped, by reason",
            dropped.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from a request to the agent's first answer, by message type",
            request_seconds.clone(),
        );
        registry.register(
            "connections",
            "Open client connections, by transport",
            connections.clone(),
        );
        registry.register(
            "subscriptions",
            "WebSocket subscriptions (events and observed properties)",
            subscriptions.clone(),
        );
        registry.register(
            "pending_requests",
            "Requests waiting for an agent's answer",
            pending_requests.clone(),
        );
        registry.register(
            "hosted_things",
            "Things whose agent is connected",
            hosted_things.clone(),
        );
        let store = Family::<Labels1, Gauge>::default();
        registry.register(
            "store",
            "The embedded store (store.dir), by `what`: file_bytes, queued_bytes (changes not yet committed), commits and changes since start, commit_micros_total and max_commit_micros (writing and syncing), recovered_* (what start-up found: retained, sessions, queued, invocations)",
            store.clone(),
        );
        registry.register(
            "resume_history",
            "What the resume history holds: `things`, `events`, `bytes` (entries and their messages)",
            history.clone(),
        );
        Metrics(Arc::new(Inner {
            registry,
            received,
            sent,
            errors,
            dropped,
            request_seconds,
            connections,
            subscriptions,
            pending_requests,
            hosted_things,
            history,
            auth_failures,
            auth_cache,
            auth_verifications,
            denied,
            limits,
            quota_largest,
            directory_bytes,
            cluster: Cluster {
                connected: cluster_connected,
                reconnects: cluster_reconnects,
                jetstream: cluster_jetstream,
            },
            budget_bytes,
            budget_hits,
            store,
            store_stats: std::sync::OnceLock::new(),
        }))
    }

    pub fn received(&self, transport: &'static str, message_type: &str) {
        let labels = [
            ("message_type", type_label(message_type)),
            ("transport", transport),
        ];
        self.0.received.get_or_create(&labels).inc();
    }

    pub fn sent(&self, transport: &'static str, message_type: &str) {
        self.sent_many(transport, message_type, 1);
    }

    pub fn sent_many(&self, transport: &'static str, message_type: &str, n: u64) {
        let labels = [
            ("message_type", type_label(message_type)),
            ("transport", transport),
        ];
        self.0.sent.get_or_create(&labels).inc_by(n);
    }

    /// `kind` is a problem slug (`invalid-json`, `timeout`, ...).
    pub fn error(&self, kind: &'static str) {
        self.0.errors.get_or_create(&[("kind", kind)]).inc();
    }

    /// `reason`: `slow_consumer`, `slow_consumer_disconnected`,
    /// `invalid_payload`, `too_large`, `reply_topic_refused`,
    /// `unanswerable_request`.
    pub fn dropped(&self, reason: &'static str) {
        self.0.dropped.get_or_create(&[("reason", reason)]).inc();
    }

    pub fn request_done(&self, message_type: &str, elapsed: Duration) {
        let labels = [("message_type", type_label(message_type))];
        self.0
            .request_seconds
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    pub fn set_connections(&self, transport: &'static str, n: usize) {
        self.0
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
            .connections
            .get_or_create(&[("transport", WEBSOCKET)])
            .set(websocket_connections as i64);
        self.0.subscriptions.set(subscriptions as i64);
        self.0.pending_requests.set(pending as i64);
        self.0.hosted_things.set(hosted as i64);
    }

    pub fn set_history(&self, things: usize, events: usize, bytes: usize) {
        for (of, n) in [("things", things), ("events", events), ("bytes", bytes)] {
            self.0.history.get_or_create(&[("of", of)]).set(n as i64);
        }
    }

    /// `reason`: `missing`, `invalid`, `scheme`, `busy`, `throttled`.
    pub fn auth_failure(&self, transport: &'static str, reason: &'static str) {
        let labels = [("reason", reason), ("transport", transport)];
        self.0.auth_failures.get_or_create(&labels).inc();
    }

    /// `result`: `hit`, `miss`.
    pub fn auth_cache(&self, result: &'static str) {
        self.0.auth_cache.get_or_create(&[("result", result)]).inc();
    }

    /// `outcome`: `queued`, `busy`, `throttled`.
    pub fn auth_verification(&self, outcome: &'static str) {
        let labels = [("outcome", outcome)];
        self.0.auth_verifications.get_or_create(&labels).inc();
    }

    /// `access`: `host`, `consume`, `operate`.
    pub fn denied(&self, transport: &'static str, access: &'static str) {
        let labels = [("access", access), ("transport", transport)];
        self.0.denied.get_or_create(&labels).inc();
    }

    /// `limit`: the configuration key's last part, e.g. `max_subscriptions`;
    /// a per-principal quota's whole key, e.g. `quotas.subscriptions`.
    pub fn limit_hit(&self, transport: &'static str, limit: &'static str) {
        let labels = [("limit", limit), ("transport", transport)];
        self.0.limits.get_or_create(&labels).inc();
    }

    /// The gauge of the largest usage of one quota (`quotas.*` key), for
    /// its [`crate::quotas::Tally`].
    pub fn quota_largest(&self, quota: &'static str) -> Gauge {
        self.0
            .quota_largest
            .get_or_create(&[("quota", quota)])
            .clone()
    }

    /// The gauge of the directory's bytes, for its budget to keep.
    pub fn directory_bytes(&self) -> Gauge {
        self.0.directory_bytes.clone()
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
            .budget_bytes
            .get_or_create(&limit_gauge)
            .set(limit as i64);
        let used = self
            .0
            .budget_bytes
            .get_or_create(&[("budget", budget), ("of", "used")])
            .clone();
        (used, self.budget_hit_counter(budget))
    }

    /// The counter of a budget that has no gauge of its own (a per-Thing or
    /// per-connection one).
    pub fn budget_hit_counter(&self, budget: &'static str) -> Counter {
        self.0
            .budget_hits
            .get_or_create(&[("budget", budget)])
            .clone()
    }

    /// The Prometheus text exposition.
    /// Reports the store's figures at every scrape.
    pub fn watch_store(&self, stats: Arc<crate::store::StoreStats>) {
        let _ = self.0.store_stats.set(stats);
    }

    fn refresh_store(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(stats) = self.0.store_stats.get() else {
            return;
        };
        let figures = [
            ("file_bytes", stats.file_bytes.load(Relaxed)),
            ("queued_bytes", stats.queued_bytes.load(Relaxed)),
            ("commits", stats.commits.load(Relaxed)),
            ("changes", stats.changes.load(Relaxed)),
            ("commit_micros_total", stats.commit_micros.load(Relaxed)),
            ("max_commit_micros", stats.max_commit_micros.load(Relaxed)),
        ];
        for (what, value) in figures {
            self.0
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
                .store
                .get_or_create(&[("what", name)])
                .set(*value as i64);
        }
    }

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
