//! Configuration: serde structs with named defaults, read from an optional
//! TOML file, then `LMOS_SIDECAR_...` environment variables, then flags.
//! Validated once at start-up.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

use crate::topics::Topics;

mod address;
mod agents;
pub mod descriptors;
mod identity;
mod imports;
mod quotas;
mod store;
pub use address::parse_listen_addr;
pub use agents::{A2aConfig, McpConfig};
pub use identity::{ClientAuth, JwtConfig, McpOAuthConfig};
pub use imports::{ImportConfig, ImportsConfig, ImportsError, Protocol, ThingType};
pub use quotas::{QuotaOverrides, QuotasConfig};
pub use store::{StoreConfig, SyncMode};

/// Environment variables override file settings: `LMOS_SIDECAR_` + section +
/// `__` + key, e.g. `LMOS_SIDECAR_MQTT__LISTEN=0.0.0.0:1883`.
pub const ENV_PREFIX: &str = "LMOS_SIDECAR_";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub sidecar: SidecarConfig,
    pub mqtt: MqttConfig,
    pub http: HttpConfig,
    pub gateway: GatewayConfig,
    pub requests: RequestsConfig,
    pub history: HistoryConfig,
    pub topics: TopicsConfig,
    pub log: LogConfig,
    pub tracing: TracingConfig,
    pub discovery: DiscoveryConfig,
    pub auth: AuthConfig,
    pub cluster: ClusterConfig,
    pub console: ConsoleConfig,
    pub quotas: QuotasConfig,
    pub store: StoreConfig,
    pub mcp: McpConfig,
    pub a2a: A2aConfig,
    pub imports: ImportsConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SidecarConfig {
    /// The thingID the sidecar uses in errors that concern no Thing (e.g. a
    /// message that is not JSON). Empty: `urn:uuid:` + a random UUID per run.
    pub thing_id: String,
    /// How long shutdown waits for connections to close, in milliseconds.
    pub shutdown_grace_ms: u64,
}

impl Default for SidecarConfig {
    fn default() -> Self {
        SidecarConfig {
            thing_id: String::new(),
            shutdown_grace_ms: 10_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MqttConfig {
    /// Address of the embedded broker's MQTT listener (the guard's; 3.1.1
    /// and 5).
    #[serde(deserialize_with = "address::deserialize")]
    pub listen: SocketAddr,
    /// A second MQTT listener, alike (kept for setups that expect one port
    /// per protocol version).
    #[serde(deserialize_with = "address::deserialize")]
    pub listen_v5: SocketAddr,
    pub max_connections: usize,
    /// Largest MQTT payload accepted, in bytes.
    pub max_payload_size: usize,
    /// Unacknowledged QoS 1/2 messages per client, each way (the Receive
    /// Maximum MQTT 5 clients are told).
    pub max_inflight_count: usize,
    /// Time a new connection has to send CONNECT, in milliseconds.
    pub connection_timeout_ms: u16,
    /// Each subscription filter buffers up to segment_size x segment_count
    /// bytes for subscribers that fall behind; beyond that the oldest
    /// messages are overwritten and a slow subscriber misses them.
    pub segment_size: usize,
    pub segment_count: usize,
    /// Messages the broker hands a connection per scheduling round.
    pub max_outgoing_packet_count: u64,
    /// Subscription filters one MQTT connection may hold.
    pub max_subscriptions: usize,
    /// Sessions that may outlive their connection (3.1.1 clean session
    /// off, MQTT 5 Session Expiry Interval > 0), in all and per principal
    /// (anonymous clients count as one): each holds memory and disk until
    /// it expires. A CONNECT asking for one more is refused (MQTT 5: Quota
    /// exceeded; 3.1.1: server unavailable).
    pub max_kept_sessions: usize,
    pub max_kept_sessions_per_principal: usize,
    /// Retained messages the broker keeps (in memory and in the store), and
    /// their bytes (topic, properties and payload), over all publishers; a
    /// retained publication past either is refused (MQTT 5: Quota
    /// exceeded; 3.1.1: dropped). Per principal: `quotas.retained` and
    /// `quotas.retained_bytes`. 0: no limit.
    pub max_retained: u64,
    pub max_retained_bytes: u64,
    /// Bytes of the last wills of all open connections (each is kept in
    /// memory and in the store until published or dropped); a CONNECT whose
    /// will would pass it is refused. Per principal: `quotas.will_bytes`.
    /// 0: no limit.
    pub max_will_bytes: u64,
    /// Longest client ID a CONNECT may carry, in bytes; a longer one is
    /// refused (MQTT 5: 0x85 Client Identifier not valid; 3.1.1: identifier
    /// rejected). A kept session writes its client ID into the key of
    /// every publication queued for it, so this bounds that overhead. MQTT
    /// only promises 23; 256 leaves room for UUIDs, host names and the
    /// prefixed IDs generated by client libraries and cloud IoT services
    /// (which cap theirs at 128).
    pub max_client_id_length: usize,
    /// Bytes the publications queued for one kept session may take on
    /// disk, counted as stored: each queue entry's key (client ID and
    /// position) and the whole publication for every entry, a copy per
    /// matching filter. Past it the session's newest publications are not
    /// written to disk (drop newest; the publisher's PUBACK is unaffected).
    /// The default is the broker's own buffer per filter (segment_size x
    /// segment_count).
    pub max_queued_bytes_per_session: u64,
    /// The same over all kept sessions together (`[quotas] queued_bytes`
    /// bounds one principal's).
    pub max_queued_bytes: u64,
    /// The longest keep-alive, in seconds, an MQTT 5 client may use: one
    /// asking for more, or for none (0), is told this in its CONNACK's
    /// Server Keep Alive and held to it. 0: clients keep what they ask.
    pub max_keep_alive_s: u16,
    /// Topic filters no client may subscribe to, as written (no wildcard
    /// matching); the SUBACK refuses them with `0x80`.
    pub refused_filters: Vec<String>,
    /// Require a username and password (or token) of a principal in
    /// `[auth]` in every CONNECT.
    pub authentication: bool,
    /// Serve MQTT over WebSocket at `/mqtt` on the HTTP port (subprotocol
    /// `mqtt`), through the same guard as the MQTT listeners.
    pub websocket: bool,
    /// PEM certificate chain and private key: both set, the MQTT listeners
    /// speak TLS only (mqtts).
    pub tls_cert: String,
    pub tls_key: String,
    /// PEM CA certificates client certificates must chain to: set (with
    /// TLS), clients are asked for one, and a certificate's SPIFFE ID (URI
    /// SAN) or subject CN names its principal.
    pub tls_client_ca: String,
    /// With `tls_client_ca`: whether a certificate is required.
    pub tls_client_auth: ClientAuth,
}

impl Default for MqttConfig {
    fn default() -> Self {
        MqttConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 1883)),
            listen_v5: SocketAddr::from(([127, 0, 0, 1], 1884)),
            max_connections: 10_000,
            max_payload_size: 1024 * 1024,
            max_inflight_count: 100,
            connection_timeout_ms: 5_000,
            segment_size: 16 * 1024 * 1024,
            segment_count: 4,
            max_outgoing_packet_count: 200,
            max_subscriptions: 1_000,
            max_kept_sessions: 10_000,
            max_kept_sessions_per_principal: 1_000,
            max_retained: 1_000_000,
            max_retained_bytes: 1024 * 1024 * 1024,
            max_will_bytes: 256 * 1024 * 1024,
            max_client_id_length: 256,
            max_queued_bytes_per_session: 64 * 1024 * 1024,
            max_queued_bytes: 2 * 1024 * 1024 * 1024,
            max_keep_alive_s: 0,
            refused_filters: Vec::new(),
            authentication: false,
            websocket: true,
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_client_ca: String::new(),
            tls_client_auth: ClientAuth::Required,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Address of the HTTP port; `/lmos` upgrades to the WebSocket gateway.
    #[serde(deserialize_with = "address::deserialize")]
    pub listen: SocketAddr,
    /// Schemes a client must use: empty (no authentication), or any of
    /// `basic` and `bearer`.
    pub authentication: Vec<HttpScheme>,
    /// PEM certificate chain and private key: both set, the port speaks
    /// HTTPS and WebSocket over TLS only (wss).
    pub tls_cert: String,
    pub tls_key: String,
    /// PEM CA certificates client certificates must chain to: set (with
    /// TLS), clients are asked for one, and a certificate's SPIFFE ID (URI
    /// SAN) or subject CN names its principal.
    pub tls_client_ca: String,
    /// With `tls_client_ca`: whether a certificate is required.
    pub tls_client_auth: ClientAuth,
    /// Open TCP connections on the HTTP port (WebSockets included); beyond
    /// this, new connections are closed at once and counted.
    pub max_connections: usize,
    /// Time a new connection has to complete its TLS and HTTP handshake
    /// (request headers received), in milliseconds.
    pub handshake_timeout_ms: u64,
    /// Web origins (`https://console.example.com`, `null`, or `*` for any)
    /// whose pages may open WebSockets and send state-changing requests,
    /// besides the sidecar's own. Requests without `Origin` always may.
    pub allowed_origins: Vec<String>,
    /// Host names served (`sidecar.example.com`, `*.example.com`, `*` for
    /// any), besides IP addresses, `localhost` and
    /// `discovery.public_host`. Empty: on a loopback listener just those;
    /// on any other, every name.
    pub allowed_hosts: Vec<String>,
    /// Time a request body has to arrive, from its request head, in ms.
    pub body_timeout_ms: u64,
    /// Bytes per second a request body must average after its first
    /// second; 0: no minimum.
    pub body_min_rate: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            authentication: Vec::new(),
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_client_ca: String::new(),
            tls_client_auth: ClientAuth::Required,
            max_connections: 10_000,
            handshake_timeout_ms: 10_000,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            body_timeout_ms: 30_000,
            body_min_rate: 500,
        }
    }
}

/// How WebSocket and HTTP clients authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpScheme {
    /// `Authorization: Basic` with a principal's name and password.
    Basic,
    /// `Authorization: Bearer` with one of a principal's tokens.
    Bearer,
}

/// What happens to a WebSocket consumer that is too slow: its outbound
/// queue past `outbound_queue_bytes`, or not moved for
/// `outbound_stall_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlowConsumerPolicy {
    /// Close the connection (code 1013, with a reason) so the consumer knows
    /// it missed messages and can reconnect; other consumers are unaffected.
    Disconnect,
    /// Drop the newest messages (those that do not fit, or all while the
    /// queue is stalled) and keep the connection.
    #[serde(alias = "drop_newest")]
    Drop,
    /// Keep the newest: past the budget the queue may grow to twice it,
    /// and the connection drops the oldest messages as it takes them until
    /// its queue is back within the budget; past twice the budget (a
    /// consumer that takes nothing), or while stalled, the newest are
    /// dropped as under `drop`.
    DropOldest,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Largest WebSocket message accepted, in bytes.
    pub max_message_size: usize,
    /// Messages queued per WebSocket connection before the slow-consumer
    /// policy applies: a safety cap only, far above what the byte budget
    /// lets through at its default (bytes and time are the policy).
    pub outbound_queue: usize,
    /// Bytes queued per WebSocket connection before the slow-consumer
    /// policy applies, each message counted with 64 bytes on top of its own.
    pub outbound_queue_bytes: usize,
    /// A WebSocket connection whose queue holds messages and has had none
    /// taken off it for this long is too slow (the slow-consumer policy
    /// applies at the next message for it), in ms; 0: never.
    pub outbound_stall_ms: u64,
    /// Bytes queued for all WebSocket connections together; past it the
    /// connection with the most queued is closed (1013).
    pub max_outbound_bytes: usize,
    /// Bytes of WebSocket messages being received or processed, over all
    /// connections; past it the connection holding the most is closed
    /// (1013).
    pub max_inbound_bytes: usize,
    pub slow_consumer: SlowConsumerPolicy,
    /// Subscriptions (events, all events, observed properties) one
    /// WebSocket connection may hold.
    pub max_subscriptions: usize,
    /// Requests one WebSocket connection may have waiting for an agent.
    pub max_pending_requests: usize,
    /// A connection that sends nothing (not even a pong to the sidecar's
    /// pings, sent every third of this) for this long is closed, in ms.
    pub idle_timeout_ms: u64,
    /// Bytes each WebSocket connection reads at a time. Larger frames still
    /// arrive whole (the buffer grows for them); this is what every idle
    /// connection holds.
    pub read_buffer_size: usize,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            max_message_size: 1024 * 1024,
            // Past 16 MiB / 64 bytes: the byte budget comes first.
            outbound_queue: 1_048_576,
            outbound_queue_bytes: 16 * 1024 * 1024,
            outbound_stall_ms: 30_000,
            max_outbound_bytes: 1024 * 1024 * 1024,
            max_inbound_bytes: 256 * 1024 * 1024,
            slow_consumer: SlowConsumerPolicy::Disconnect,
            max_subscriptions: 1_000,
            max_pending_requests: 1_000,
            idle_timeout_ms: 60_000,
            read_buffer_size: 4096,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestsConfig {
    /// How long an agent has to answer `readProperty`, `writeProperty`,
    /// `writeMultipleProperties` and `cancelAction`, in ms.
    pub timeout_ms: u64,
    /// How long an invocation may go without a sign of life from its agent
    /// (its first `actionStatus`, then each further one), in ms.
    pub action_liveness_ms: u64,
    /// Per-Thing or per-action liveness, in ms, overriding
    /// `action_liveness_ms`: keys are a thingID or `{thingID}#{action}`.
    /// An action's TD may say it too (`lmos:livenessMs`); this wins.
    pub action_liveness_overrides: BTreeMap<String, u64>,
    /// Finished invocations remembered for `queryAction` and `cancelAction`.
    pub finished_invocations: usize,
    /// How long a finished invocation stays queryable, in ms.
    pub invocation_retention_ms: u64,
    /// Invocations running at once; past it a new `invokeAction` is refused
    /// with a 429.
    pub max_running_invocations: usize,
    /// Bytes of output chunks (and the statuses behind them) one streamed
    /// invocation may hold for a consumer that granted no more credit
    /// (`"stream": {"credit": N}`); past it the stream fails and the agent
    /// is asked to cancel.
    pub stream_hold_bytes: usize,
    /// The same for all streamed invocations together: what consumers
    /// that withhold credit can make the sidecar hold.
    pub stream_hold_total_bytes: usize,
}

impl Default for RequestsConfig {
    fn default() -> Self {
        RequestsConfig {
            timeout_ms: 10_000,
            action_liveness_ms: 600_000,
            action_liveness_overrides: BTreeMap::new(),
            finished_invocations: 1_000,
            invocation_retention_ms: 3_600_000,
            max_running_invocations: 10_000,
            stream_hold_bytes: 1024 * 1024,
            stream_hold_total_bytes: 64 * 1024 * 1024,
        }
    }
}

impl RequestsConfig {
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    pub fn action_liveness(&self) -> Duration {
        Duration::from_millis(self.action_liveness_ms)
    }

    pub fn invocation_retention(&self) -> Duration {
        Duration::from_millis(self.invocation_retention_ms)
    }
}

/// The resume history: what a WebSocket consumer that reconnects can ask
/// for (`lastMessageID`, the Kotlin `lastEvent`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    /// Events kept per Thing; 0 turns the history off.
    pub events_per_thing: usize,
    /// How long an event is kept, and how long the gateway keeps following
    /// a Thing after its last WebSocket subscriber left, in ms; 0 turns the
    /// history off.
    pub max_age_ms: u64,
    /// Bytes of events kept per Thing; past it its oldest are evicted.
    pub max_bytes_per_thing: usize,
    /// Bytes of events kept for all Things together, in memory and in the
    /// store's rows; past it the oldest events of all are evicted.
    pub max_bytes: usize,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            events_per_thing: 1_000,
            max_age_ms: 600_000,
            max_bytes_per_thing: 16 * 1024 * 1024,
            max_bytes: 256 * 1024 * 1024,
        }
    }
}

impl HistoryConfig {
    pub fn max_age(&self) -> Duration {
        Duration::from_millis(self.max_age_ms)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopicsConfig {
    /// First level(s) of every LMOS topic.
    pub prefix: String,
    /// Mirror every event's `data` and every property's `value` to
    /// `{prefix}/{thing}/values/...` for W3C WoT consumers, whose TD forms
    /// point there.
    pub value_topics: bool,
}

impl Default for TopicsConfig {
    fn default() -> Self {
        TopicsConfig {
            prefix: "lmos".into(),
            value_topics: true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `RUST_LOG`-style filter; the `RUST_LOG` variable wins when set.
    pub filter: String,
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            // Why each crate is quieted: config/lmos-sidecar.toml, [log].
            filter: "info,rumqttd=off,opentelemetry_sdk=off,async_nats=warn,rustls=error".into(),
            format: LogFormat::Text,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoveryConfig {
    /// Host name consumers use to reach this sidecar, written into the
    /// forms of every Thing Description served. Empty: the address each
    /// port listens on (`localhost` when it listens on all interfaces).
    pub public_host: String,
    /// Thing Description files registered at start-up.
    pub things: Vec<std::path::PathBuf>,
    /// Also check what agents publish over WebSocket (event data, property
    /// values) against their TD; requests are always checked.
    pub validate_agent_data: bool,
    /// Largest Thing Description accepted, in bytes, as sent (HTTP body,
    /// WebSocket message, retained MQTT publication); beyond it, 413.
    pub max_td_size: usize,
    /// Bytes all registered Thing Descriptions may take together, as
    /// served (forms included); beyond it a registration gets 507.
    pub max_total_td_bytes: u64,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig {
            public_host: String::new(),
            things: Vec::new(),
            validate_agent_data: false,
            max_td_size: 1024 * 1024,
            max_total_td_bytes: 64 * 1024 * 1024,
        }
    }
}

/// The live console in the browser (`GET /console` on the HTTP port).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Serve it. It needs no rights of its own: it acts with those of the
    /// principal who opens it, so on by default like the directory.
    pub enabled: bool,
    /// Bytes the topic tree keeps (the latest message of each topic under
    /// the prefix); the least recently updated topic goes first.
    pub topic_tree_bytes: usize,
    /// Bytes the searchable recent-message view keeps; the oldest go first.
    pub recent_messages_bytes: usize,
    /// Principals who administer the broker from the console: they see
    /// every MQTT client and kept session (others see their own) and may
    /// disconnect clients.
    pub administrators: Vec<String>,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            enabled: true,
            topic_tree_bytes: 4 << 20,
            recent_messages_bytes: 1 << 20,
            administrators: Vec::new(),
        }
    }
}

/// How the sidecar reaches the other sidecars.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClusterMode {
    /// Bridged to an external MQTT cluster (NATS's MQTT listener, EMQX,
    /// HiveMQ, ...).
    #[default]
    Mqtt,
    /// NATS's own protocol: core NATS subjects, request/reply.
    Nats,
}

/// Where JetStream keeps the event stream's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamStorage {
    /// On disk: the history survives every node restarting.
    #[default]
    File,
    /// In memory: faster (a lower tail latency), and still on every replica,
    /// so one node dying loses nothing; a restart of all of them loses the
    /// history.
    Memory,
}

/// The cluster the sidecar links its LMOS topics to, so consumers on any
/// sidecar reach agents on any other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// `mqtt`: bridge to an MQTT cluster; `nats`: speak NATS natively.
    pub mode: ClusterMode,
    /// A node of the cluster, or several separated by commas (tried in
    /// turn): `mqtt://host:port` in `mqtt` mode, `nats://host:port` (or
    /// `tls://`) in `nats` mode. Empty: no cluster.
    pub url: String,
    /// The bridge's MQTT client ID in the cluster; its persistent session
    /// keeps QoS 1 messages for the sidecar while it is away. Empty:
    /// `lmos-bridge-` + `sidecar.thing_id`.
    pub client_id: String,
    pub username: String,
    /// Environment variable holding the password, if the cluster wants one.
    pub password_env: String,
    /// Seconds between MQTT keep-alives with the cluster.
    pub keep_alive_s: u64,
    /// Longest wait between reconnection attempts, in ms (the wait doubles
    /// from 100 ms up to this).
    pub reconnect_max_ms: u64,
    /// Messages waiting for the cluster while it is unreachable; beyond
    /// this the bridge stops reading the embedded broker, whose per-filter
    /// buffers then take the backlog (see `mqtt.segment_size`).
    pub buffer: usize,
    /// `nats` mode: environment variable holding a token to authenticate with.
    pub token_env: String,
    /// `nats` mode: a NATS credentials file (user JWT and NKey seed).
    pub creds_file: String,
    /// `nats` mode: PEM CA certificates to trust; set, TLS is required.
    pub tls_ca: String,
    /// `nats` mode: PEM client certificate and key, for servers that verify
    /// clients.
    pub tls_cert: String,
    pub tls_key: String,
    /// `nats` mode: JetStream for what must last (see `cluster::nats::kv`
    /// and `cluster::nats::durable`): events through a stream with
    /// acknowledged publishes and a durable consumer per sidecar; readings,
    /// TDs and presence in key-value buckets a starting sidecar reads.
    /// false: core NATS only (at most once; state asked of the others).
    pub jetstream: bool,
    /// `nats` mode: replicas of the stream and buckets, at most 3 (and 1
    /// on a NATS that is not clustered, whatever this says).
    pub jetstream_replicas: usize,
    /// `nats` mode: where the event stream keeps its messages when the
    /// sidecar creates it (an existing stream keeps its own).
    pub jetstream_storage: StreamStorage,
    /// `nats` mode: how long the event stream keeps events, in seconds
    /// (also how long an absent sidecar's durable consumer is kept).
    pub events_max_age_s: u64,
    /// `nats` mode: seconds a presence entry lives unless its sidecar
    /// renews it (every third of this): a sidecar that dies leaves no
    /// presence behind for longer.
    pub presence_ttl_s: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            url: String::new(),
            client_id: String::new(),
            username: String::new(),
            password_env: String::new(),
            keep_alive_s: 60,
            reconnect_max_ms: 10_000,
            buffer: 10_000,
            mode: ClusterMode::Mqtt,
            token_env: String::new(),
            creds_file: String::new(),
            tls_ca: String::new(),
            tls_cert: String::new(),
            tls_key: String::new(),
            jetstream: true,
            jetstream_replicas: 3,
            jetstream_storage: StreamStorage::File,
            events_max_age_s: 3600,
            presence_ttl_s: 30,
        }
    }
}

/// Who may connect, and what each principal may do with which Thing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// What clients may do on listeners without authentication.
    pub anonymous: Grants,
    pub principals: Vec<PrincipalConfig>,
    /// How long credentials that passed are taken without checking them
    /// again, in milliseconds; 0: every attempt is checked.
    pub cache_ttl_ms: u64,
    /// Credentials the cache holds at most.
    pub cache_entries: usize,
    /// Password hashes (Argon2, 19 MiB each by default) checked at once;
    /// 0: the number of CPUs, at most 4.
    pub max_concurrent_verifications: usize,
    /// Checks waiting for one of those; more are refused at once.
    pub verification_queue: usize,
    /// Failed attempts from one address for one name before further ones
    /// are refused without a check; 0: never.
    pub max_failures: u32,
    /// The first refusal period after `max_failures`, in milliseconds; it
    /// doubles with every further failure.
    pub failure_backoff_ms: u64,
    /// The longest refusal period, in milliseconds; an address quiet this
    /// long is forgotten.
    pub max_failure_backoff_ms: u64,
    /// Failures after which even cached credentials are refused from that
    /// address for that name while a refusal period lasts; 0: never.
    pub lockout_failures: u32,
    /// JWT bearer tokens from an OpenID provider (off while `issuer` is
    /// empty).
    pub jwt: JwtConfig,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            anonymous: Grants::everything(),
            principals: Vec::new(),
            cache_ttl_ms: 300_000,
            cache_entries: 10_000,
            max_concurrent_verifications: 0,
            verification_queue: 32,
            max_failures: 5,
            failure_backoff_ms: 1_000,
            max_failure_backoff_ms: 60_000,
            lockout_failures: 1_000,
            jwt: JwtConfig::default(),
        }
    }
}

/// Thing patterns: an exact thingID, `*` for every Thing, or a prefix
/// followed by `*` (e.g. `urn:acme:*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Grants {
    /// Act as the agent of these Things: host them, register their TDs,
    /// receive their requests, publish their events, readings and replies.
    pub host: Vec<String>,
    /// Subscribe to events, observe and read properties, read TDs.
    pub consume: Vec<String>,
    /// Write properties, invoke, query and cancel actions.
    pub operate: Vec<String>,
}

impl Grants {
    pub fn everything() -> Self {
        let all = vec!["*".to_string()];
        Grants {
            host: all.clone(),
            consume: all.clone(),
            operate: all,
        }
    }
}

/// A user or service that can authenticate. Secrets are never kept in
/// clear in this file: a password as an Argon2 hash (`lmos-sidecar
/// hash-password`), a token as its SHA-256, or either read from a file or
/// an environment variable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct PrincipalConfig {
    pub name: String,
    pub password_hash: String,
    pub password_file: String,
    pub password_env: String,
    /// Hex SHA-256 of a bearer token.
    pub token_sha256: String,
    pub token_file: String,
    pub token_env: String,
    pub host: Vec<String>,
    pub consume: Vec<String>,
    pub operate: Vec<String>,
}

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OtlpProtocol {
    #[serde(rename = "grpc")]
    Grpc,
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// OTLP collector, e.g. `http://127.0.0.1:4317` (gRPC) or
    /// `http://127.0.0.1:4318` (HTTP). Empty: no export, no rewritten
    /// `traceparent` (the spans are kept for the console only, see
    /// `recent_spans_bytes`) unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
    pub endpoint: String,
    /// `grpc` or `http/protobuf`; `OTEL_EXPORTER_OTLP_PROTOCOL` wins.
    pub protocol: OtlpProtocol,
    /// Service name in traces; `OTEL_SERVICE_NAME` wins.
    pub service_name: String,
    /// Messages without trace context start a new trace, so agents that
    /// never heard of tracing still show up.
    pub new_trace_for_untraced: bool,
    /// Also send the context as MQTT 5 user properties. Off by default, to
    /// keep messages small; MQTT 3.1.1 subscribers get them without the
    /// properties (the MQTT guard translates).
    pub mqtt5_user_properties: bool,
    /// Base URL of a Jaeger UI showing the collector's traces, e.g.
    /// `http://127.0.0.1:16686`: the console links each message whose
    /// trace it knows to `{url}/trace/{traceID}`. Empty: no links.
    pub jaeger_ui_url: String,
    /// Bytes of recent spans kept in memory for the console's trace view
    /// (`/console/traces`), with or without an OTLP endpoint; the oldest
    /// traces go first. 0: none kept (and, with no endpoint, no spans are
    /// made at all).
    pub recent_spans_bytes: usize,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            endpoint: String::new(),
            protocol: OtlpProtocol::Grpc,
            service_name: "lmos-sidecar".into(),
            new_trace_for_untraced: true,
            mqtt5_user_properties: false,
            jaeger_ui_url: String::new(),
            recent_spans_bytes: 8 * 1024 * 1024,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}", describe(.0))]
    Load(Box<figment::Error>),
    #[error("invalid value for `{key}`: {reason}")]
    Invalid { key: &'static str, reason: String },
    /// The file on its own does not parse: TOML's message names the line,
    /// the column and the key.
    #[error("{path}: {message}")]
    File { path: String, message: String },
}

/// TOML's multi-line report as one line: the message, where, and the line
/// of the file it is about.
fn toml_error(report: &str) -> String {
    let lines: Vec<&str> = report
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let position = lines
        .first()
        .map(|l| l.trim_start_matches("TOML parse error at "))
        .unwrap_or_default();
    let source = lines
        .iter()
        .find_map(|l| {
            l.split_once('|')
                .filter(|(n, rest)| !n.trim().is_empty() && !rest.trim().is_empty())
        })
        .map(|(_, rest)| rest.trim())
        .unwrap_or_default();
    let message = lines.last().copied().unwrap_or_default();
    format!("{message} ({position}: `{source}`)")
}

/// One line per problem, naming the key as written in the file (figment's
/// own message prefixes its internal profile name).
fn describe(error: &figment::Error) -> String {
    error
        .clone()
        .into_iter()
        .map(|e| {
            let key = e.path.join(".");
            let source = match &e.metadata {
                Some(m) if m.source.is_some() => {
                    format!(" in {}", m.source.as_ref().expect("checked"))
                }
                Some(m) if m.name.contains("environment") => format!(" (from the {})", m.name),
                _ => String::new(),
            };
            if let figment::error::Kind::UnknownField(_, expected) = &e.kind {
                return unknown_key(&key, expected, &source);
            }
            if key.is_empty() {
                format!("{}{source}", e.kind)
            } else {
                format!("`{key}`: {}{source}", e.kind)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// An unknown key, said plainly: figment's own text nests quotes
/// (`expected `one of `a`, `b```) and names no variable.
fn unknown_key(path: &str, expected: &[&str], source: &str) -> String {
    let section = path.rsplit_once('.').map(|(s, _)| s).unwrap_or_default();
    let source = if source.contains("environment") {
        // The variable as the user wrote it (figment lower-cases keys).
        let wanted = format!("{ENV_PREFIX}{}", path.replace('.', "__")).to_uppercase();
        let name = std::env::vars()
            .map(|(k, _)| k)
            .find(|k| k.to_uppercase() == wanted)
            .unwrap_or(wanted);
        format!(" (from the environment variable {name})")
    } else {
        source.to_owned()
    };
    let known = if section.is_empty() {
        "sections".to_owned()
    } else {
        format!("keys in [{section}]")
    };
    format!(
        "`{path}` is not a configuration key{source}; the {known} are: {}",
        expected.join(", ")
    )
}

/// Command-line values that override everything else.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Overrides {
    pub mqtt_listen: Option<SocketAddr>,
    pub mqtt5_listen: Option<SocketAddr>,
    pub http_listen: Option<SocketAddr>,
}

impl Config {
    /// Defaults, then the file (if any), then the environment, then flags.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            if !file.exists() {
                return Err(ConfigError::Invalid {
                    key: "--config",
                    reason: format!("the file {} does not exist", file.display()),
                });
            }
            // Checked on its own first: TOML's own error names line and
            // column, which the merged view no longer knows.
            let text = std::fs::read_to_string(file).map_err(|e| ConfigError::File {
                path: file.display().to_string(),
                message: e.to_string(),
            })?;
            toml::from_str::<Config>(&text).map_err(|e| ConfigError::File {
                path: file.display().to_string(),
                message: toml_error(&e.to_string()),
            })?;
            figment = figment.merge(Toml::file(file));
        }
        figment = figment.merge(Env::prefixed(ENV_PREFIX).split("__"));
        if let Some(a) = overrides.mqtt_listen {
            figment = figment.merge(Serialized::default("mqtt.listen", a));
        }
        if let Some(a) = overrides.mqtt5_listen {
            figment = figment.merge(Serialized::default("mqtt.listen_v5", a));
        }
        if let Some(a) = overrides.http_listen {
            figment = figment.merge(Serialized::default("http.listen", a));
        }
        let config: Config = figment
            .extract()
            .map_err(|e| ConfigError::Load(Box::new(e)))?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.imports.check().map_err(|e| ConfigError::Invalid {
            key: "imports",
            reason: e.to_string(),
        })?;
        Topics::new(&self.topics.prefix).map_err(|e| ConfigError::Invalid {
            key: "topics.prefix",
            reason: e.to_string(),
        })?;
        let positive = self.must_be_positive();
        for (key, v) in positive {
            if v == 0 {
                return Err(ConfigError::Invalid {
                    key,
                    reason: "must be greater than 0".into(),
                });
            }
        }
        crate::http::guard::validate(&self.http)
            .map_err(|(key, reason)| ConfigError::Invalid { key, reason })?;
        self.validate_tracing()?;
        if self.mqtt.max_inflight_count > usize::from(u16::MAX) {
            return Err(ConfigError::Invalid {
                key: "mqtt.max_inflight_count",
                reason: "must be at most 65535 (MQTT packet identifiers are 16-bit)".into(),
            });
        }
        if !(23..=usize::from(u16::MAX)).contains(&self.mqtt.max_client_id_length) {
            return Err(ConfigError::Invalid {
                key: "mqtt.max_client_id_length",
                reason: "must be 23 to 65535 (every MQTT server accepts client IDs of 23 bytes)"
                    .into(),
            });
        }
        self.validate_quotas()?;
        if self.auth.max_failure_backoff_ms < self.auth.failure_backoff_ms {
            return Err(ConfigError::Invalid {
                key: "auth.max_failure_backoff_ms",
                reason: "must be at least auth.failure_backoff_ms".into(),
            });
        }
        if self.mqtt.segment_size < self.mqtt.max_payload_size {
            return Err(ConfigError::Invalid {
                key: "mqtt.segment_size",
                reason: "must be at least mqtt.max_payload_size, or large messages could never be buffered".into(),
            });
        }
        Ok(())
    }

    /// The keys where 0 makes no sense (a queue, a limit or a timeout of
    /// nothing), with their values.
    fn must_be_positive(&self) -> Vec<(&'static str, usize)> {
        vec![
            ("gateway.outbound_queue", self.gateway.outbound_queue),
            ("gateway.max_message_size", self.gateway.max_message_size),
            (
                "gateway.outbound_queue_bytes",
                self.gateway.outbound_queue_bytes,
            ),
            (
                "gateway.max_outbound_bytes",
                self.gateway.max_outbound_bytes,
            ),
            ("gateway.max_inbound_bytes", self.gateway.max_inbound_bytes),
            (
                "history.max_bytes_per_thing",
                self.history.max_bytes_per_thing,
            ),
            ("history.max_bytes", self.history.max_bytes),
            ("mqtt.max_payload_size", self.mqtt.max_payload_size),
            ("mqtt.segment_size", self.mqtt.segment_size),
            ("mqtt.segment_count", self.mqtt.segment_count),
            ("mqtt.max_connections", self.mqtt.max_connections),
            ("mqtt.max_inflight_count", self.mqtt.max_inflight_count),
            ("requests.timeout_ms", self.requests.timeout_ms as usize),
            ("gateway.max_subscriptions", self.gateway.max_subscriptions),
            (
                "gateway.max_pending_requests",
                self.gateway.max_pending_requests,
            ),
            (
                "gateway.idle_timeout_ms",
                self.gateway.idle_timeout_ms as usize,
            ),
            ("mqtt.max_subscriptions", self.mqtt.max_subscriptions),
            ("mqtt.max_kept_sessions", self.mqtt.max_kept_sessions),
            (
                "mqtt.max_kept_sessions_per_principal",
                self.mqtt.max_kept_sessions_per_principal,
            ),
            ("mqtt.max_client_id_length", self.mqtt.max_client_id_length),
            (
                "mqtt.max_queued_bytes_per_session",
                self.mqtt.max_queued_bytes_per_session as usize,
            ),
            ("mqtt.max_queued_bytes", self.mqtt.max_queued_bytes as usize),
            ("http.max_connections", self.http.max_connections),
            ("discovery.max_td_size", self.discovery.max_td_size),
            (
                "http.handshake_timeout_ms",
                self.http.handshake_timeout_ms as usize,
            ),
            ("http.body_timeout_ms", self.http.body_timeout_ms as usize),
            ("auth.cache_entries", self.auth.cache_entries),
            ("mcp.max_sessions", self.mcp.max_sessions),
            (
                "mcp.max_sessions_per_principal",
                self.mcp.max_sessions_per_principal,
            ),
            ("mcp.session_idle_ms", self.mcp.session_idle_ms as usize),
            (
                "mcp.max_stream_queue_bytes",
                self.mcp.max_stream_queue_bytes,
            ),
            ("mcp.max_listens", self.mcp.max_listens),
            (
                "mcp.max_listens_per_principal",
                self.mcp.max_listens_per_principal,
            ),
            ("mcp.max_listen_resources", self.mcp.max_listen_resources),
        ]
    }

    /// The OTLP endpoint and the Jaeger UI link are URLs.
    fn validate_tracing(&self) -> Result<(), ConfigError> {
        let endpoint = &self.tracing.endpoint;
        if !(endpoint.is_empty() || endpoint.contains("://")) {
            return Err(ConfigError::Invalid {
                key: "tracing.endpoint",
                reason: format!("`{endpoint}` has no scheme; add http://, e.g. http://{endpoint}"),
            });
        }
        let jaeger = &self.tracing.jaeger_ui_url;
        if !(jaeger.is_empty() || jaeger.starts_with("http://") || jaeger.starts_with("https://")) {
            return Err(ConfigError::Invalid {
                key: "tracing.jaeger_ui_url",
                reason: "must be empty or an http:// or https:// URL".into(),
            });
        }
        Ok(())
    }

    /// `[quotas.principals.<name>]` must name a principal: a typo would
    /// otherwise leave the principal on the default without a word.
    fn validate_quotas(&self) -> Result<(), ConfigError> {
        let known = |name: &str| {
            name == crate::auth::ANONYMOUS || self.auth.principals.iter().any(|p| p.name == name)
        };
        match self.quotas.principals.keys().find(|n| !known(n)) {
            Some(name) => Err(ConfigError::Invalid {
                key: "quotas.principals",
                reason: format!("`{name}` is not the name of a principal in [[auth.principals]] (nor `anonymous`)"),
            }),
            None => Ok(()),
        }
    }

    pub fn topics(&self) -> Topics {
        Topics::new(&self.topics.prefix).expect("validated at load")
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.sidecar.shutdown_grace_ms)
    }

    /// The configuration as TOML, for `--print-config`.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("the configuration is always serializable")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHIPPED: &str = include_str!("../config/lmos-sidecar.toml");

    #[test]
    fn the_shipped_file_spells_out_the_defaults() {
        let from_file: Config = toml::from_str(SHIPPED).unwrap();
        assert_eq!(from_file, Config::default());
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = toml::from_str::<Config>("[mqtt]\nlisen = \"127.0.0.1:1\"\n").unwrap_err();
        assert!(e.to_string().contains("lisen"), "{e}");
    }

    #[test]
    fn environment_overrides_the_file_and_flags_override_both() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "c.toml",
                "[mqtt]\nlisten = \"127.0.0.1:1000\"\n[topics]\nprefix = \"file\"\n",
            )?;
            jail.set_env("LMOS_SIDECAR_TOPICS__PREFIX", "env/lmos");
            jail.set_env("LMOS_SIDECAR_GATEWAY__OUTBOUND_QUEUE", "7");
            let c = Config::load(Some(Path::new("c.toml")), &Overrides::default()).unwrap();
            assert_eq!(c.topics.prefix, "env/lmos");
            assert_eq!(c.gateway.outbound_queue, 7);
            assert_eq!(c.mqtt.listen.port(), 1000);
            let o = Overrides {
                mqtt_listen: Some("127.0.0.1:0".parse().unwrap()),
                ..Overrides::default()
            };
            let c = Config::load(Some(Path::new("c.toml")), &o).unwrap();
            assert_eq!(c.mqtt.listen.port(), 0);
            Ok(())
        });
    }

    #[test]
    fn invalid_values_name_their_key() {
        let mut c = Config::default();
        c.topics.prefix = "a/#".into();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("topics.prefix"), "{e}");
        let mut c = Config::default();
        c.gateway.outbound_queue = 0;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("gateway.outbound_queue"));
    }
}
