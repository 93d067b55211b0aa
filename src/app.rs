//! Wiring: the broker, the gateway and the HTTP port, started together and
//! stopped together ([`drain`]).

pub mod drain;
mod parts;

use drain::Drain;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;
use tracing::info;

use crate::auth::mqtt::MqttPolicy;
use crate::auth::{AuthError, Authority};
use crate::broker::embedded::{BrokerError, EmbeddedBroker, Hooks, SideLinks};
use crate::cluster::{Bridge, ClusterConfigError, ClusterLink, NatsLink};
use crate::config::{ClusterMode, Config};
use crate::directory::DirectoryService;
use crate::gateway::{Dispatcher, Gateway, GatewaySetup};
use crate::http::{self, LMOS_PATH};
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
    Cluster(#[from] ClusterConfigError),
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
    /// The console's view of the bus and its link to publish on.
    console_link: crate::http::console::BrokerView,
    broker_health: crate::broker::health::Health,
    broker_addr: SocketAddr,
    /// The MQTT guard, for `/mqtt` (MQTT over WebSocket) when served.
    mqtt_guard: Option<crate::broker::guard::Guard>,
    authority: Authority,
    http_tls: Option<tokio_rustls::TlsAcceptor>,
    /// Closes the MQTT listeners and connections when dropped.
    mqtt_stop: DropGuard,
    /// The link to the cluster, when `cluster.url` is set (either mode).
    cluster: Option<ClusterLink>,
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
        let tracing = tracing.with_recent_spans(config.tracing.recent_spans_bytes);
        // First: a data directory another sidecar holds, or one that cannot
        // be used, refuses the start before anything is served.
        let store = Store::open(&config.store)?;
        let metrics = Metrics::with_spans(tracing.span_counters());
        if let Some(stats) = store.stats() {
            metrics.watch_store(stats.clone());
        }
        let authority = parts::authority(&config, &metrics, http_addr)?;
        let http_tls = crate::tls::acceptor(&crate::tls::Settings::http(&config.http))?;
        let mqtt_stop = CancellationToken::new();
        // JWT principals are principals too: anonymous is then no one's
        // only identity and gets no exemption.
        let principals = !config.auth.principals.is_empty() || config.auth.jwt.enabled();
        let quotas = Quotas::new(&config.quotas, principals);
        let shared = (&authority, &metrics, &quotas);
        let mut broker = start_broker(&config, shared, &store, &mqtt_stop).await?;
        let console_link = console_link(&config, &mut broker);
        let thing_id = match config.sidecar.thing_id.as_str() {
            "" => format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            id => id.to_owned(),
        };
        let cluster = cluster_link(&config, &mut broker, &thing_id)?;
        let directory = parts::directory_service(
            &config,
            (&quotas, &metrics),
            broker.bus.clone(),
            http_addr,
            broker.mqtt_addr,
            &thing_id,
        )
        .with_store(&store);
        register_things(&config, &directory).await?;
        let (gateway, mut dispatcher) = Gateway::new(GatewaySetup {
            bus: broker.bus,
            deliveries: broker.deliveries,
            topics: config.topics(),
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
            console_link,
            broker_health: broker.health.clone(),
            broker_addr: broker.broker_addr,
            mqtt_guard: config.mqtt.websocket.then(|| broker.guard.clone()),
            mqtt_stop: mqtt_stop.drop_guard(),
            cluster,
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
        self.log_ready();
        let drain = Drain::new();
        let connections = TaskTracker::new();
        // WebSocket connections close only after the dispatcher has told
        // consumers what becomes of their requests.
        let closing = CancellationToken::new();
        let dispatcher = tokio::spawn(self.dispatcher.run(drain.token(), closing.clone()));
        // The cluster link outlives the connections' drain: what they still
        // publish crosses to the cluster.
        let cluster_stop = CancellationToken::new();
        let cluster = self.cluster.as_ref().map(ClusterLink::status);
        let cluster_link = self
            .cluster
            .map(|c| tokio::spawn(c.run(cluster_stop.clone())));
        tokio::spawn(parts::give_memory_back(
            connections.clone(),
            self.mqtt_connections.clone(),
            drain.token(),
        ));
        // Imported MCP servers and A2A agents, each its Thing's agent.
        let imports = crate::imports::start(
            &self.config.imports,
            &self.gateway,
            &self.metrics,
            drain.token(),
        );
        let serving = parts::Serving {
            config: &self.config,
            gateway: self.gateway,
            directory: self.directory,
            metrics: self.metrics,
            mqtt_connections: self.mqtt_connections,
            console_link: self.console_link,
            broker: self.broker_health.clone(),
            authority: self.authority,
            http_addr: self.http_addr,
            mqtt_guard: self.mqtt_guard,
        };
        let state = serving.http_state(&drain, &connections, &closing, cluster);
        let options = parts::serve_options(&self.config, self.http_tls);
        let server = tokio::spawn(http::serve(self.http_listener, state, options));

        tokio::select! {
            _ = shutdown => info!("Shutting down."),
            _ = self.broker_health.failed() => {
                tokio::time::sleep(crate::broker::health::LINGER).await;
            }
            _ = drain.signalled() => {}
        }
        drain.signal();
        // Should the dispatcher be stuck, connections close anyway.
        drain
            .stage("farewells", drain::FAREWELL_GRACE, closing.cancelled())
            .await;
        closing.cancel();
        connections.close();
        let connections_drained = async {
            let _ = server.await;
            connections.wait().await;
        };
        let grace = self.config.shutdown_grace();
        drain.stage("connections", grace, connections_drained).await;
        drain
            .stage("imports", drain::IMPORTS_GRACE, imports.wait())
            .await;
        dispatcher.abort();
        cluster_stop.cancel();
        if let Some(link) = cluster_link {
            drain
                .stage("cluster link", drain::CLUSTER_GRACE, link)
                .await;
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

    fn log_ready(&self) {
        let tls = self.http_tls.is_some();
        info!(
            mqtt = %self.mqtt_addr,
            mqtt5 = %self.mqtt5_addr,
            http = %self.http_addr,
            websocket = %format!(
                "{}://{}{LMOS_PATH}",
                if tls { "wss" } else { "ws" },
                self.http_addr
            ),
            store = %self.store.describe(),
            console = %if self.config.console.enabled {
                format!(
                    "{}://{}/console",
                    if tls { "https" } else { "http" },
                    self.http_addr
                )
            } else {
                "off".to_owned()
            },
            "Sidecar ready."
        );
    }
}

/// Starts the embedded broker with its side links: the values mirror's
/// (attached here) and the native NATS link's (left in
/// `side_links.cluster` for [`cluster_link`]).
async fn start_broker(
    config: &Config,
    (authority, metrics, quotas): (&Authority, &Metrics, &Arc<Quotas>),
    store: &Store,
    stop: &CancellationToken,
) -> Result<EmbeddedBroker, StartError> {
    let topics = config.topics();
    let mqtt_tls = crate::tls::acceptor(&crate::tls::Settings::mqtt(&config.mqtt))
        .map_err(BrokerError::Tls)?;
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
    // The native NATS link reads the embedded broker through a link of its
    // own, in process, like the values mirror.
    let side_filters = SideLinks {
        values: mirror.as_ref().map(|m| m.link_filters()),
        cluster: native_cluster(config).then(|| crate::cluster::bridged_filters(&topics)),
        // Everything under the prefix, for the console's topic tree and
        // recent messages.
        console: config
            .console
            .enabled
            .then(|| vec![format!("{}/#", topics.prefix())]),
    };
    let hooks = Hooks {
        prerequisite: mirror
            .clone()
            .map(|m| Arc::new(m) as Arc<dyn crate::broker::guard::Prerequisite>),
        store: store.clone(),
        topics: topics.clone(),
        quotas: quotas.clone(),
        metrics: metrics.clone(),
    };
    let filters = Gateway::bus_filters(&topics);
    let mut broker = EmbeddedBroker::start(
        &config.mqtt,
        filters,
        side_filters,
        Arc::new(policy),
        hooks,
        mqtt_tls,
        stop.clone(),
    )
    .await?;
    if let (Some(mirror), Some((bus, deliveries))) = (mirror, broker.side_links.values.take()) {
        tokio::spawn(mirror.attach(bus, deliveries));
    }
    Ok(broker)
}

/// The console's monitor, fed by its own bus link (when the console is
/// on), and that link's bus for the page's publications.
fn console_link(config: &Config, broker: &mut EmbeddedBroker) -> crate::http::console::BrokerView {
    let monitor = crate::http::console::Monitor::new(crate::http::console::MonitorLimits {
        tree_bytes: config.console.topic_tree_bytes,
        recent_bytes: config.console.recent_messages_bytes,
    });
    let mut view = crate::http::console::BrokerView {
        monitor: monitor.clone(),
        bus: None,
        guard: Some(broker.guard.clone()),
    };
    if let Some((bus, deliveries)) = broker.side_links.console.take() {
        tokio::spawn(crate::http::console::follow_bus(
            monitor,
            config.topics(),
            deliveries,
        ));
        view.bus = Some(bus);
    }
    view
}

/// `cluster.mode = "nats"` with a cluster to link to.
fn native_cluster(config: &Config) -> bool {
    !config.cluster.url.is_empty() && config.cluster.mode == ClusterMode::Nats
}

/// The link to the cluster, when `cluster.url` is set: natively through
/// the broker's cluster side link, else an MQTT bridge through the broker's
/// trusted internal listener.
fn cluster_link(
    config: &Config,
    broker: &mut EmbeddedBroker,
    thing_id: &str,
) -> Result<Option<ClusterLink>, ClusterConfigError> {
    let topics = config.topics();
    match (
        config.cluster.url.as_str(),
        broker.side_links.cluster.take(),
    ) {
        ("", _) => Ok(None),
        (_, Some((bus, deliveries))) => {
            let link = NatsLink::new(&config.cluster, topics, bus, deliveries, thing_id)?;
            Ok(Some(ClusterLink::Nats(link)))
        }
        (_, None) => {
            crate::cluster::nats::options::check_mqtt_mode(&config.cluster)?;
            let addr = broker.internal_addr;
            let bridge = Bridge::new(&config.cluster, topics, addr, thing_id)?;
            Ok(Some(ClusterLink::MqttBridge(bridge)))
        }
    }
}

/// The TDs of `discovery.things`, then those the store kept.
async fn register_things(config: &Config, directory: &DirectoryService) -> Result<(), StartError> {
    for path in &config.discovery.things {
        let id = directory
            .register_file(path)
            .await
            .map_err(StartError::Thing)?;
        info!(thing = %id, file = %path.display(), "Registered a Thing Description.");
    }
    // After the files: a file's TD updated over HTTP comes back updated.
    directory.restore().await?;
    Ok(())
}
