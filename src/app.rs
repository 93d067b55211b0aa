//! Wiring: the broker, the gateway and the HTTP port, started together and
//! stopped together.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::auth::mqtt::MqttPolicy;
use crate::auth::{AuthError, Authority};
use crate::broker::embedded::{BrokerError, EmbeddedBroker, Hooks};
use crate::cluster::Cluster;
use crate::config::{ClusterMode, Config};
use crate::directory::{Directory, DirectoryService, Endpoints};
use crate::gateway::{Dispatcher, Gateway, GatewaySetup};
use crate::http::auth::HttpAuth;
use crate::http::server::ServeOptions;
use crate::http::{self, HttpState, LMOS_PATH};
use crate::quotas::Quotas;
use crate::store::Store;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::{TelemetryError, Tracing};
use crate::tls::TlsError;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen for HTTP on {addr}: {error}")]
    HttpBind {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    #[error("cannot register a Thing Description from discovery.things: {0}")]
    Thing(String),
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Cluster(#[from] crate::cluster::bridge::ClusterError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// A sidecar whose ports are bound and whose broker is accepting
/// connections; [`Application::run`] serves until shutdown.
pub struct Application {
    config: Config,
    http_listener: TcpListener,
    http_addr: SocketAddr,
    mqtt_addr: SocketAddr,
    mqtt5_addr: SocketAddr,
    gateway: Gateway,
    dispatcher: Dispatcher,
    tracing: Tracing,
    directory: DirectoryService,
    metrics: Metrics,
    mqtt_connections: Arc<AtomicUsize>,
    broker_health: crate::broker::health::Health,
    broker_addr: SocketAddr,
    authority: Authority,
    http_tls: Option<tokio_rustls::TlsAcceptor>,
    /// Closes the MQTT listeners and connections when dropped.
    mqtt_stop: DropGuard,
    /// The link to the cluster, when `cluster.url` is set.
    bridge: Option<Cluster>,
    /// What survives a restart; closed (written and synced) last.
    store: Store,
}

impl Application {
    /// Binds every port (port 0 picks a free one) and starts the broker.
    pub async fn build(config: Config) -> Result<Application, StartError> {
        let addr = config.http.listen;
        let http_listener =
            crate::listen::bind(addr).map_err(|error| StartError::HttpBind { addr, error })?;
        let tracing = Tracing::from_config(&config.tracing).await?;
        Application::with_parts(config, http_listener, tracing).await
    }

    /// As [`Application::build`], with the HTTP listener already bound and
    /// the tracing chosen by the caller (tests use in-memory exporters).
    pub async fn with_parts(
        config: Config,
        http_listener: TcpListener,
        tracing: Tracing,
    ) -> Result<Application, StartError> {
        let http_addr = http_listener
            .local_addr()
            .map_err(|error| StartError::HttpBind {
                addr: config.http.listen,
                error,
            })?;
        // First: a data directory another sidecar holds, or one that cannot
        // be used, refuses the start before anything is served.
        let store = Store::open(&config.store)?;
        let metrics = Metrics::with_spans(tracing.span_counters());
        if let Some(stats) = store.stats() {
            metrics.watch_store(stats.clone());
        }
        let authority = authority(&config, &metrics)?;
        let http_tls = crate::tls::acceptor(
            &config.http.tls_cert,
            &config.http.tls_key,
            ("http.tls_cert", "http.tls_key"),
        )?;
        let topics = config.topics();
        let mqtt_tls = crate::tls::acceptor(
            &config.mqtt.tls_cert,
            &config.mqtt.tls_key,
            ("mqtt.tls_cert", "mqtt.tls_key"),
        )
        .map_err(BrokerError::Tls)?;
        let mqtt_stop = CancellationToken::new();
        let policy = MqttPolicy::new(
            authority.clone(),
            topics.clone(),
            config.mqtt.authentication,
            metrics.clone(),
        );
        let mirror = config
            .topics
            .value_topics
            .then(|| crate::wot::values::Mirror::new(topics.clone()));
        let mut side_filters: Vec<Vec<String>> = mirror.iter().map(|m| m.link_filters()).collect();
        // The native NATS link reads the embedded broker through a link of
        // its own, in process, like the values mirror (last, popped first).
        let native = !config.cluster.url.is_empty() && config.cluster.mode == ClusterMode::Nats;
        if native {
            side_filters.push(crate::cluster::bridged_filters(&topics));
        }
        let mut broker = EmbeddedBroker::start(
            &config.mqtt,
            Gateway::bus_filters(&topics),
            side_filters,
            Arc::new(policy),
            Hooks {
                prerequisite: mirror
                    .clone()
                    .map(|m| Arc::new(m) as Arc<dyn crate::broker::guard::Prerequisite>),
                store: store.clone(),
                topics: topics.clone(),
            },
            mqtt_tls,
            mqtt_stop.clone(),
        )
        .await?;
        let cluster_link = if native {
            broker.side_links.pop()
        } else {
            None
        };
        if let (Some(mirror), Some((bus, deliveries))) = (mirror, broker.side_links.pop()) {
            tokio::spawn(mirror.attach(bus, deliveries));
        }
        let thing_id = match config.sidecar.thing_id.as_str() {
            "" => format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            id => id.to_owned(),
        };
        let bridge = match (config.cluster.url.as_str(), cluster_link) {
            ("", _) => None,
            (_, Some((bus, deliveries))) => Some(Cluster::Nats(
                crate::cluster::NatsLink::new(
                    &config.cluster,
                    topics.clone(),
                    bus,
                    deliveries,
                    &thing_id,
                )
                .map_err(crate::cluster::bridge::ClusterError::from)?,
            )),
            (_, None) => {
                crate::cluster::nats::options::check_mqtt_mode(&config.cluster)
                    .map_err(crate::cluster::bridge::ClusterError::from)?;
                Some(Cluster::Mqtt(crate::cluster::Bridge::new(
                    &config.cluster,
                    topics.clone(),
                    broker.internal_addr,
                    &thing_id,
                )?))
            }
        };
        let quotas = Quotas::new(&config.quotas, !config.auth.principals.is_empty());
        let directory = directory_service(
            &config,
            (&quotas, &metrics),
            broker.bus.clone(),
            http_addr,
            broker.mqtt_addr,
            &thing_id,
        )
        .with_store(&store);
        for path in &config.discovery.things {
            let id = directory
                .register_file(path)
                .await
                .map_err(StartError::Thing)?;
            info!(thing = %id, file = %path.display(), "Registered a Thing Description.");
        }
        // After the files: a file's TD updated over HTTP comes back updated.
        directory.restore().await?;
        let (gateway, mut dispatcher) = Gateway::new(GatewaySetup {
            bus: broker.bus,
            deliveries: broker.deliveries,
            topics,
            config: config.gateway.clone(),
            requests: config.requests.clone(),
            history: config.history.clone(),
            thing_id,
            tracer: tracing.messages(),
            directory: directory.clone(),
            validate_agent_data: config.discovery.validate_agent_data,
            metrics: metrics.clone(),
            quotas: quotas.clone(),
            store: store.clone(),
        })?;
        dispatcher.prime().await;
        Ok(Application {
            http_listener,
            http_addr,
            mqtt_addr: broker.mqtt_addr,
            mqtt5_addr: broker.mqtt5_addr,
            mqtt_connections: broker.mqtt_connections,
            broker_health: broker.health.clone(),
            broker_addr: broker.broker_addr,
            mqtt_stop: mqtt_stop.drop_guard(),
            bridge,
            gateway,
            dispatcher,
            config,
            tracing,
            directory,
            metrics,
            authority,
            http_tls,
            store,
        })
    }

    /// The embedded store (memory-only when `store.memory_only`).
    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    pub fn mqtt_addr(&self) -> SocketAddr {
        self.mqtt_addr
    }

    pub fn mqtt5_addr(&self) -> SocketAddr {
        self.mqtt5_addr
    }

    /// The embedded broker's own listener, behind the MQTT guard, on
    /// loopback: not for clients (nothing guards it).
    pub fn broker_addr(&self) -> SocketAddr {
        self.broker_addr
    }

    /// A handle on the gateway, e.g. for its statistics.
    pub fn gateway(&self) -> Gateway {
        self.gateway.clone()
    }

    /// Serves until `shutdown` resolves, then closes every WebSocket
    /// connection (code 1001) and waits for them up to the grace period.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let token = CancellationToken::new();
        let connections = TaskTracker::new();
        info!(
            mqtt = %self.mqtt_addr,
            mqtt5 = %self.mqtt5_addr,
            http = %self.http_addr,
            websocket = %format!(
                "{}://{}{LMOS_PATH}",
                if self.http_tls.is_some() { "wss" } else { "ws" },
                self.http_addr
            ),
            store = %self.store.describe(),
            console = %if self.config.console.enabled {
                format!(
                    "{}://{}/console",
                    if self.http_tls.is_some() { "https" } else { "http" },
                    self.http_addr
                )
            } else {
                "off".to_owned()
            },
            "Sidecar ready."
        );

        // WebSocket connections close only after the dispatcher has told
        // consumers what becomes of their requests.
        let closing = CancellationToken::new();
        let dispatcher = tokio::spawn(self.dispatcher.run(token.clone(), closing.clone()));
        // The bridge outlives the connections' drain: what they still
        // publish crosses to the cluster.
        let bridge_stop = CancellationToken::new();
        let cluster = self.bridge.as_ref().map(Cluster::status);
        let bridge = self
            .bridge
            .map(|b| tokio::spawn(b.run(bridge_stop.clone())));
        tokio::spawn(give_memory_back(
            connections.clone(),
            self.mqtt_connections.clone(),
            token.clone(),
        ));
        // The console's traffic history fills from the start, so a page
        // opened later shows the minutes before it.
        let history = http::console::History::default();
        if self.config.console.enabled {
            tokio::spawn(http::console::sample_traffic(
                history.clone(),
                self.metrics.clone(),
                token.clone(),
            ));
        }
        let state = HttpState {
            gateway: self.gateway,
            connections: connections.clone(),
            shutdown: token.clone(),
            closing: closing.clone(),
            directory: self.directory,
            metrics: self.metrics.clone(),
            mqtt_connections: self.mqtt_connections,
            broker: self.broker_health.clone(),
            cluster,
            request_timeout: self.config.requests.timeout(),
            console: http::console::ConsoleSettings {
                enabled: self.config.console.enabled,
                jaeger_ui_url: self
                    .config
                    .tracing
                    .jaeger_ui_url
                    .trim_end_matches('/')
                    .to_owned(),
                history,
                clients: http::console::Clients::default(),
            },
            guard: http::guard::Guard::new(
                &self.config.http,
                &self.config.discovery.public_host,
                self.http_addr,
                self.metrics.clone(),
            ),
            mcp: http::mcp::Mcp::new(&self.config.mcp, self.config.gateway.max_message_size),
            agent_protocols: http::AgentProtocols {
                mcp: self.config.mcp.enabled,
                a2a: self.config.a2a.enabled,
            },
            auth: HttpAuth {
                authority: self.authority,
                schemes: self.config.http.authentication.clone(),
                metrics: self.metrics,
            },
        };
        let options = ServeOptions {
            tls: self.http_tls,
            max_connections: self.config.http.max_connections,
            handshake_timeout: Duration::from_millis(self.config.http.handshake_timeout_ms),
            body: http::slow::BodyLimits {
                timeout: Duration::from_millis(self.config.http.body_timeout_ms),
                min_rate: self.config.http.body_min_rate,
            },
        };
        let server = tokio::spawn(http::serve(self.http_listener, state, options));

        tokio::select! {
            _ = shutdown => info!("Shutting down."),
            _ = self.broker_health.failed() => {
                tokio::time::sleep(crate::broker::health::LINGER).await;
            }
            _ = token.cancelled() => {}
        }
        token.cancel();
        // Should the dispatcher be stuck, connections close anyway.
        let _ = tokio::time::timeout(Duration::from_secs(1), closing.cancelled()).await;
        closing.cancel();

        let grace = self.config.shutdown_grace();
        connections.close();
        let drained = tokio::time::timeout(grace, async {
            let _ = server.await;
            connections.wait().await;
        })
        .await;
        if drained.is_err() {
            warn!(
                grace_ms = grace.as_millis() as u64,
                "Connections still open after the grace period; exiting anyway."
            );
        }
        dispatcher.abort();
        bridge_stop.cancel();
        if let Some(bridge) = bridge {
            let _ = tokio::time::timeout(Duration::from_secs(2), bridge).await;
        }
        drop(self.mqtt_stop);
        let store = self.store.clone();
        // Writes what is queued and syncs: off the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || store.close()).await;
        self.tracing.shutdown().await;
        if let Some(why) = self.broker_health.failure() {
            return Err(std::io::Error::other(format!(
                "the embedded MQTT broker failed: {why}"
            )));
        }
        info!("Sidecar stopped.");
        Ok(())
    }
}

/// The host consumers use: `discovery.public_host`, else the listening
/// address (`localhost` for one that listens on all interfaces).
fn public_host(config: &Config, bound: SocketAddr) -> String {
    if !config.discovery.public_host.is_empty() {
        return config.discovery.public_host.clone();
    }
    match bound.ip() {
        ip if ip.is_unspecified() => "localhost".to_owned(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    }
}

fn directory_service(
    config: &Config,
    (quotas, metrics): (&Arc<Quotas>, &Metrics),
    bus: crate::broker::Bus,
    http: SocketAddr,
    mqtt: SocketAddr,
    thing_id: &str,
) -> DirectoryService {
    let tls = |cert: &str| !cert.is_empty();
    let (web, ws) = if tls(&config.http.tls_cert) {
        ("https", "wss")
    } else {
        ("http", "ws")
    };
    let mqtt_scheme = if tls(&config.mqtt.tls_cert) {
        "mqtts"
    } else {
        "mqtt"
    };
    let http_base = format!("{web}://{}:{}", public_host(config, http), http.port());
    let endpoints = Endpoints {
        websocket: format!(
            "{ws}://{}:{}{LMOS_PATH}",
            public_host(config, http),
            http.port()
        ),
        mqtt: format!(
            "{mqtt_scheme}://{}:{}",
            public_host(config, mqtt),
            mqtt.port()
        ),
        http: http_base.clone(),
        topics: config.topics(),
        value_topics: config.topics.value_topics,
        http_schemes: config.http.authentication.clone(),
        mqtt_password: config.mqtt.authentication,
    };
    let limits = crate::directory::TdLimits {
        max_td_size: config.discovery.max_td_size,
        max_total_bytes: config.discovery.max_total_td_bytes,
    };
    DirectoryService::new(
        Directory::new(endpoints).with_limits(limits, quotas.clone(), metrics.clone()),
        bus,
        config.topics(),
        thing_id.to_owned(),
        &http_base,
    )
}

/// The principals, checked once; a listener that requires authentication
/// with no one able to pass it is a configuration mistake, not a lock-out.
fn authority(config: &Config, metrics: &Metrics) -> Result<Authority, AuthError> {
    let authority = Authority::with_metrics(&config.auth, metrics.clone())?;
    if authority.is_empty() {
        if !config.http.authentication.is_empty() {
            return Err(AuthError::NoOne("http.authentication"));
        }
        if config.mqtt.authentication {
            return Err(AuthError::NoOne("mqtt.authentication"));
        }
    }
    let open = |addr: SocketAddr| !addr.ip().is_loopback();
    if config.http.authentication.is_empty() && open(config.http.listen) {
        warn!(listen = %config.http.listen, "The HTTP port is reachable from other hosts without authentication (http.authentication).");
    }
    if !config.mqtt.authentication && (open(config.mqtt.listen) || open(config.mqtt.listen_v5)) {
        warn!("The MQTT listeners are reachable from other hosts without authentication (mqtt.authentication).");
    }
    Ok(authority)
}

/// Trims the allocator once a wave of connections (WebSocket and HTTP, and
/// MQTT) has left; see [`crate::telemetry::memory`].
async fn give_memory_back(http: TaskTracker, mqtt: Arc<AtomicUsize>, shutdown: CancellationToken) {
    let mut trimmer = crate::telemetry::memory::Trimmer::default();
    let mut every = tokio::time::interval(crate::telemetry::memory::CHECK_EVERY);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        let open = http.len() + mqtt.load(std::sync::atomic::Ordering::Relaxed);
        if trimmer.after_check(open) {
            crate::telemetry::memory::trim();
        }
    }
}
