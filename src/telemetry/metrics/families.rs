//! The metric families, gathered by what they are about, each group
//! registering its own with the help text an operator reads in `/metrics`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::{Labels1, Labels2};

/// Byte budgets and quotas: what clients can make the sidecar hold.
#[derive(Default)]
pub(super) struct Budgets {
    pub quota_largest: Family<Labels1, Gauge>,
    pub directory_bytes: Gauge,
    pub queued_bytes: Gauge,
    pub bytes: Family<Labels2, Gauge>,
    pub hits: Family<Labels1, Counter>,
}

impl Budgets {
    pub fn register(registry: &mut Registry) -> Budgets {
        let it = Budgets::default();
        registry.register(
            "quota_largest_usage",
            "The largest usage of any one principal, by quota (the `[quotas]` key): how close the greediest principal is to its quota",
            it.quota_largest.clone(),
        );
        registry.register(
            "directory_bytes",
            "Bytes of the registered Thing Descriptions as served (discovery.max_total_td_bytes bounds them)",
            it.directory_bytes.clone(),
        );
        registry.register(
            "mqtt_queued_bytes",
            "Bytes the publications queued for kept MQTT sessions take on disk, keys and a copy per matching filter counted (mqtt.max_queued_bytes bounds them)",
            it.queued_bytes.clone(),
        );
        registry.register(
            "memory_budget_bytes",
            "Byte budgets of what clients can make the sidecar hold, by budget (outbound, inbound, history) and `of` (used, limit)",
            it.bytes.clone(),
        );
        registry.register(
            "memory_budget_hits",
            "Times a byte budget was reached, by budget: outbound and inbound (a connection closed), outbound_per_connection (slow-consumer policy applied), inbound_fragmented (a fragmented message over max_message_size, connection closed), history and history_per_thing (oldest events evicted)",
            it.hits.clone(),
        );
        it
    }
}

/// The cluster link's gauges, set from its status at each scrape.
#[derive(Default)]
pub(super) struct Cluster {
    pub connected: Gauge,
    pub reconnects: Gauge,
    pub jetstream: Family<Labels1, Gauge>,
}

impl Cluster {
    pub fn register(registry: &mut Registry) -> Cluster {
        let it = Cluster::default();
        registry.register(
            "cluster_jetstream",
            "Native NATS mode with JetStream, counts since start by `what`: events published, messages (stream messages they went in, several events to one under load), acked, pending (published, not yet acked), republished (for want of an ack), received (from the stream into the broker), redelivered, duplicates (dropped as already received); state entries kv_writes, kv_errors; stale_presence (remote agents taken offline)",
            it.jetstream.clone(),
        );
        registry.register(
            "cluster_connected",
            "1 while the bridge to the external MQTT cluster is connected (only with cluster.url)",
            it.connected.clone(),
        );
        registry.register(
            "cluster_reconnects",
            "Times the bridge reconnected to the cluster",
            it.reconnects.clone(),
        );
        it
    }
}

/// Who was let in, and what was refused.
#[derive(Default)]
pub(super) struct Access {
    pub auth_failures: Family<Labels2, Counter>,
    pub auth_cache: Family<Labels1, Counter>,
    pub auth_verifications: Family<Labels1, Counter>,
    pub denied: Family<Labels2, Counter>,
    pub limits: Family<Labels2, Counter>,
    pub jwks_fetches: Family<Labels1, Counter>,
    pub jwks_keys: Gauge,
}

impl Access {
    pub fn register(registry: &mut Registry) -> Access {
        let it = Access::default();
        registry.register(
            "auth_failures",
            "Connections refused for missing or wrong credentials, by transport and reason (missing, invalid, scheme; expired: a JWT past its exp; busy: every password check taken; throttled: too many failures from that address for that name)",
            it.auth_failures.clone(),
        );
        registry.register(
            "auth_cache",
            "Credentials looked up in the cache of those that passed, by result (hit, miss)",
            it.auth_cache.clone(),
        );
        registry.register(
            "auth_verifications",
            "Password hash checks by outcome: queued (handed to the verifier threads), busy (refused at once, queue full), throttled (refused without a check after repeated failures)",
            it.auth_verifications.clone(),
        );
        registry.register(
            "denied",
            "Operations refused by authorization, by transport and access (host, consume, operate)",
            it.denied.clone(),
        );
        registry.register(
            "limit_hits",
            "Times a configured limit was reached, by transport and limit",
            it.limits.clone(),
        );
        registry.register(
            "auth_jwks_fetches",
            "Fetches of the JWT signing keys (auth.jwt.jwks_url) by outcome (ok, failed)",
            it.jwks_fetches.clone(),
        );
        registry.register(
            "auth_jwks_keys",
            "JWT signing keys held (from auth.jwt.jwks_url or jwks_file)",
            it.jwks_keys.clone(),
        );
        it
    }
}

/// LMOS messages: counted in and out, errors, drops, request durations.
pub(super) struct Messages {
    pub received: Family<Labels2, Counter>,
    pub sent: Family<Labels2, Counter>,
    pub errors: Family<Labels1, Counter>,
    pub dropped: Family<Labels1, Counter>,
    pub request_seconds: Family<Labels1, Histogram>,
}

impl Messages {
    pub fn register(registry: &mut Registry) -> Messages {
        let it = Messages {
            received: Family::default(),
            sent: Family::default(),
            errors: Family::default(),
            dropped: Family::default(),
            request_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 16))
            }),
        };
        registry.register(
            "messages_received",
            "LMOS messages received, by message type and transport",
            it.received.clone(),
        );
        registry.register(
            "messages_sent",
            "LMOS messages sent, by message type and transport",
            it.sent.clone(),
        );
        registry.register(
            "errors",
            "LMOS errors sent to clients, by kind",
            it.errors.clone(),
        );
        registry.register(
            "dropped_messages",
            "Messages dropped, by reason",
            it.dropped.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from a request to the agent's first answer, by message type",
            it.request_seconds.clone(),
        );
        it
    }
}

/// What is open and waiting now: connections, subscriptions, requests,
/// hosted Things.
#[derive(Default)]
pub(super) struct Clients {
    pub connections: Family<Labels1, Gauge>,
    pub subscriptions: Gauge,
    pub pending_requests: Gauge,
    pub hosted_things: Gauge,
}

impl Clients {
    pub fn register(registry: &mut Registry) -> Clients {
        let it = Clients::default();
        registry.register(
            "connections",
            "Open client connections, by transport",
            it.connections.clone(),
        );
        registry.register(
            "subscriptions",
            "WebSocket subscriptions (events and observed properties)",
            it.subscriptions.clone(),
        );
        registry.register(
            "pending_requests",
            "Requests waiting for an agent's answer",
            it.pending_requests.clone(),
        );
        registry.register(
            "hosted_things",
            "Things whose agent is connected",
            it.hosted_things.clone(),
        );
        it
    }
}

/// What is kept: the embedded store's figures and the resume history.
#[derive(Default)]
pub(super) struct Kept {
    pub store: Family<Labels1, Gauge>,
    pub store_full: Gauge,
    pub store_refused: Counter,
    pub history: Family<Labels1, Gauge>,
}

impl Kept {
    pub fn register(registry: &mut Registry) -> Kept {
        let it = Kept::default();
        registry.register(
            "store",
            "The embedded store (store.dir), by `what`: file_bytes, queued_bytes (changes not yet committed), waits (changes that waited for the writer: store.max_queued_bytes reached), commits and changes since start, commit_micros_total and max_commit_micros (writing and syncing), reopens (after an I/O error), refused_acks (MQTT acknowledgements refused because what they covered was not written), recovered_* (what start-up found: retained, sessions, queued, invocations)",
            it.store.clone(),
        );
        registry.register(
            "store_full",
            "1 while the store refuses writes (store.max_file_bytes or store.min_free_bytes reached: /readyz says which), else 0",
            it.store_full.clone(),
        );
        registry.register(
            "store_refused_writes",
            "Changes the store refused for want of room (store.max_file_bytes, store.min_free_bytes, a full disk): MQTT 5 clients got 0x97, 3.1.1 publishers no PUBACK, HTTP writes 507",
            it.store_refused.clone(),
        );
        registry.register(
            "resume_history",
            "What the resume history holds: `things`, `events`, `bytes` (entries and their messages)",
            it.history.clone(),
        );
        it
    }
}
