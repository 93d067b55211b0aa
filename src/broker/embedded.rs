//! rumqttd, embedded in the process, behind the [guard](super::guard).
//!
//! The guard binds the public MQTT addresses (a taken port fails start-up
//! with a clear message, port 0 is resolved to a real port) and reaches
//! rumqttd's router through direct links ([`super::engine`]). rumqttd also listens
//! on a loopback port of its own, for diagnostics and tests that must reach
//! the engine around the guard. The sidecar binds that listener and hands
//! it over (`vendor/rumqttd/PATCHES.md`, patch 9): rumqttd binding a port
//! the sidecar had chosen lost it now and then to another socket in
//! between, and then stopped its server, logging only. rumqttd blocks the
//! thread that starts it and never stops, so the sidecar waits until a
//! probe through the engine comes back; the probe goes straight to
//! rumqttd, so the guard's authentication never stands in its way.
//!
//! The sidecar's own traffic goes through one local link. Its sending half
//! blocks on the router's queue, so it lives on a thread of its own, fed by
//! an async channel; its receiving half is read by an async task.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rumqttd::alerts::AlertsLink;
use rumqttd::local::{LinkRx, LinkTx};
use rumqttd::meters::MetersLink;
use rumqttd::protocol::{
    Filter, Packet, Publish, PublishProperties, QoS, RetainForwardRule, Subscribe, Unsubscribe,
};
use rumqttd::{
    Broker, ConnectionSettings, MetricSettings, MetricType, Notification, RouterConfig,
    ServerSettings,
};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::engine::Engine;
use super::guard::retained::{RetainedBook, RetainedLimits};
use super::guard::wills::WillBook;
use super::guard::{AllowAll, Guard, Keeps, Limits, Policy, Prerequisite};
use super::health::Health;
use super::kept::KeptSession;
use super::probe::wait_ready;
use super::{Bus, BusCommand, Delivery, ResponseInfo};
use crate::config::MqttConfig;
use crate::store::Store;
use crate::telemetry::TraceContext;
use crate::topics::Topics;

/// Commands queued towards the broker before publishers wait.
const COMMAND_QUEUE: usize = 4096;
/// Deliveries queued towards the gateway before the link stops reading (the
/// broker then buffers in its per-filter rings).
const DELIVERY_QUEUE: usize = 4096;
/// rumqttd's MQTT 5 server, whose settings the guard's direct links take.
const V5_SERVER: &str = "mqtt-v5";
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// rumqttd refuses connections past its own limit silently (no CONNACK), so
/// its limit sits above the guard's: room for the sidecar's own link and
/// for connections the guard has closed but the router not yet forgotten.
const ROUTER_SLACK: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("cannot listen for {what} on {addr}: {error}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("the embedded MQTT broker did not start listening on {addr} within {READY_TIMEOUT:?}")]
    NotReady { addr: SocketAddr },
    #[error("cannot connect the sidecar to the embedded MQTT broker: {0}")]
    Link(String),
    #[error("cannot start a broker thread: {0}")]
    Thread(std::io::Error),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// A running embedded broker.
pub struct EmbeddedBroker {
    /// Where the public `mqtt.listen` listener is bound (the guard's; it
    /// takes MQTT 3.1.1 and 5).
    pub mqtt_addr: SocketAddr,
    /// Where the public `mqtt.listen_v5` listener is bound (the guard's; it
    /// takes MQTT 3.1.1 and 5).
    pub mqtt5_addr: SocketAddr,
    pub bus: Bus,
    pub deliveries: mpsc::Receiver<Delivery>,
    /// One more link per side filter set given to [`EmbeddedBroker::start`],
    /// under the same name, subscribed to those filters.
    pub side_links: SideLinks<OwnLink>,
    /// MQTT client connections, from rumqttd's meters (every second).
    pub mqtt_connections: Arc<AtomicUsize>,
    /// A guard listener on loopback that lets every client in, for the
    /// sidecar's trusted parts (the cluster bridge): it speaks 3.1.1 and 5
    /// like the public ones, and keeps what would crash rumqttd from it.
    pub internal_addr: SocketAddr,
    /// Whether the broker still serves.
    pub health: Health,
    /// rumqttd's own MQTT 5 listener on loopback, behind the guard (for
    /// diagnostics and tests that must reach the engine directly).
    pub broker_addr: SocketAddr,
    /// The guard of the public listeners: its clients' sessions (for the
    /// console), and MQTT clients that come over a WebSocket (`/mqtt` on
    /// the HTTP port).
    pub guard: Guard,
}

/// Binds a listener for rumqttd to accept on (`Broker::listener`).
fn bind_for_rumqttd(
    what: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), BrokerError> {
    let listener =
        TcpListener::bind(addr).map_err(|error| BrokerError::Bind { what, addr, error })?;
    let bound = listener
        .local_addr()
        .map_err(|error| BrokerError::Bind { what, addr, error })?;
    Ok((listener, bound))
}

/// Binds a public listener for the guard.
fn bind(
    what: &'static str,
    addr: SocketAddr,
) -> Result<(tokio::net::TcpListener, SocketAddr), BrokerError> {
    let listener =
        crate::listen::bind(addr).map_err(|error| BrokerError::Bind { what, addr, error })?;
    let bound = listener
        .local_addr()
        .map_err(|error| BrokerError::Bind { what, addr, error })?;
    Ok((listener, bound))
}

fn server_settings(name: &str, listen: SocketAddr, config: &MqttConfig) -> ServerSettings {
    ServerSettings {
        name: name.to_owned(),
        listen,
        tls: None,
        // rumqttd sleeps this long after every accept; 1 ms caps accepts at
        // about 480/s.
        next_connection_delay_ms: 0,
        connections: ConnectionSettings {
            connection_timeout_ms: config.connection_timeout_ms,
            max_payload_size: config.max_payload_size,
            max_inflight_count: config.max_inflight_count,
            auth: None,
            external_auth: None,
            dynamic_filters: true,
        },
    }
}

/// A link of the sidecar's own to the router: publish on the bus, read
/// what its subscriptions deliver.
pub type OwnLink = (Bus, mpsc::Receiver<Delivery>);

/// The sidecar's links to the router beside the gateway's, by who reads
/// them (filters going in, links coming out): each its own, so that its
/// deliveries do not queue behind the gateway's.
pub struct SideLinks<T> {
    /// The values mirror's (`topics.value_topics`).
    pub values: Option<T>,
    /// The native NATS link's (`cluster.mode = "nats"`).
    pub cluster: Option<T>,
    /// The console's (`console.enabled`): its topic tree, recent messages
    /// and publishing.
    pub console: Option<T>,
}

impl<T> Default for SideLinks<T> {
    fn default() -> Self {
        SideLinks {
            values: None,
            cluster: None,
            console: None,
        }
    }
}

impl<T> SideLinks<T> {
    fn len(&self) -> usize {
        usize::from(self.values.is_some())
            + usize::from(self.cluster.is_some())
            + usize::from(self.console.is_some())
    }

    /// Each present entry through `f`, values first.
    fn try_map<U, E>(self, mut f: impl FnMut(T) -> Result<U, E>) -> Result<SideLinks<U>, E> {
        Ok(SideLinks {
            values: self.values.map(&mut f).transpose()?,
            cluster: self.cluster.map(&mut f).transpose()?,
            console: self.console.map(&mut f).transpose()?,
        })
    }
}

/// What the broker works with beside its configuration.
pub struct Hooks {
    /// Checked before a guarded connection's first packet reaches rumqttd.
    pub prerequisite: Option<Arc<dyn Prerequisite>>,
    /// Where retained messages are kept across restarts.
    pub store: Store,
    /// To tell agents' presence among the retained messages kept.
    pub topics: Topics,
    /// Per-principal shares (`[quotas] queued_bytes`).
    pub quotas: Arc<crate::quotas::Quotas>,
    pub metrics: crate::telemetry::metrics::Metrics,
}

impl EmbeddedBroker {
    /// Starts the broker, waits until both of its listeners accept
    /// connections, then opens the public listeners through the guard, which
    /// applies `policy`, speaks TLS when `tls` is given, and closes every
    /// client connection once `shutdown` fires. `filters` are subscribed
    /// before the broker is declared ready. Each of `side_filters` gets a
    /// link of its own (see [`SideLinks`]).
    pub async fn start(
        config: &MqttConfig,
        filters: Vec<String>,
        side_filters: SideLinks<Vec<String>>,
        policy: Arc<dyn Policy>,
        hooks: Hooks,
        tls: Option<TlsAcceptor>,
        shutdown: CancellationToken,
    ) -> Result<EmbeddedBroker, BrokerError> {
        let public = bind("MQTT 3.1.1", config.listen)?;
        let public_v5 = bind("MQTT 5", config.listen_v5)?;
        let local = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let trusted_listener = bind("MQTT (internal, trusted)", local)?;
        let (internal_listener, internal_v5) = bind_for_rumqttd("MQTT 5 (internal)", local)?;

        let rumqttd_config = rumqttd_config(config, internal_v5);
        let Hooks {
            prerequisite,
            store,
            topics,
            quotas,
            metrics,
        } = hooks;
        let retained = RetainedBook::new(
            quotas.clone(),
            RetainedLimits {
                count: config.max_retained,
                bytes: config.max_retained_bytes,
            },
        );
        // The broker's writes (what it keeps, the guard's session records)
        // are what its acknowledgements wait for; nothing else in the store.
        let store = store.scoped();
        let owners = crate::broker::kept::Owners::default();
        let limits = crate::broker::kept::QueueLimits {
            per_session: config.max_queued_bytes_per_session,
            total: config.max_queued_bytes,
            quotas: quotas.clone(),
            owners: owners.clone(),
            metrics,
        };
        let Recovered {
            persistence,
            stale_presence,
            kept_sessions,
            wills_due,
        } = recover(&store, &topics, &retained, limits).await?;
        let own_links = 1 + side_filters.len();
        let (mut broker, engine, mqtt_connections) =
            open_broker(rumqttd_config, persistence, internal_listener, own_links)?;
        crate::broker::kept::schedule_wills(broker.will_trigger(), wills_due);

        let probe_topic = format!("lmos-sidecar/probe/{}", uuid::Uuid::new_v4().simple());
        let (probe_tx, mut probes) = mpsc::unbounded_channel();
        // Once the probe arrives through the link, the subscriptions queued
        // before it are live too.
        let main_filters = filters.into_iter().chain([probe_topic.clone()]).collect();
        let (bus, deliveries) = open_link(
            &mut broker,
            main_filters,
            Some((probe_topic.clone(), probe_tx)),
        )?;
        let side_links = side_filters.try_map(|filters| open_link(&mut broker, filters, None))?;

        spawn_router(broker)?;
        if !wait_ready(&engine, &probe_topic, &mut probes, READY_TIMEOUT).await {
            return Err(BrokerError::NotReady { addr: internal_v5 });
        }
        // The probe's topic stays subscribed: the dispatcher's barrier
        // (`Bus::with_barrier`) once the probe is done.
        drop(probes);
        let bus = bus.with_barrier(probe_topic.into());
        for offline in stale_presence {
            bus.publish(offline)
                .await
                .map_err(|e| BrokerError::Link(e.to_string()))?;
        }
        super::health::watch_broker_panics();
        let health = Health::default();
        tokio::spawn(health.clone().watch(engine.clone(), shutdown.clone()));

        let (mqtt_addr, mqtt5_addr) = (public.1, public_v5.1);
        let listeners = Listeners {
            public: public.0,
            public_v5: public_v5.0,
            trusted: trusted_listener.0,
        };
        let guarded = Guarded {
            prerequisite,
            store,
            owners,
            kept_sessions,
            keeps: Keeps {
                retained,
                wills: WillBook::new(quotas, config.max_will_bytes),
                own: false,
            },
        };
        let guard = serve_guards(engine, config, (policy, tls), guarded, listeners, shutdown);
        info!(mqtt = %mqtt_addr, mqtt5 = %mqtt5_addr, "Embedded MQTT broker listening.");

        Ok(EmbeddedBroker {
            mqtt_addr,
            mqtt5_addr,
            bus,
            deliveries,
            side_links,
            mqtt_connections,
            internal_addr: trusted_listener.1,
            health,
            broker_addr: internal_v5,
            guard,
        })
    }
}

/// rumqttd with what was recovered, listening on `internal_listener`,
/// reached by the guard through an [`Engine`]; its connections counted
/// without the sidecar's `own_links`.
fn open_broker(
    rumqttd_config: rumqttd::Config,
    persistence: Option<rumqttd::Persistence>,
    internal_listener: TcpListener,
    own_links: usize,
) -> Result<(Broker, Engine, Arc<AtomicUsize>), BrokerError> {
    let mut broker = Broker::with_persistence(rumqttd_config, persistence);
    // What recovery read and let go goes back to the system, so that a
    // restart does not leave the sidecar bigger than before it.
    crate::telemetry::memory::trim();
    let engine = Engine::new(
        broker
            .direct(V5_SERVER)
            .ok_or_else(|| BrokerError::Link("no MQTT 5 server for the guard".to_owned()))?,
    );
    broker.listener(V5_SERVER, internal_listener);
    let alerts = broker
        .alerts()
        .map_err(|e| BrokerError::Link(e.to_string()))?;
    tokio::spawn(log_alerts(alerts));
    let meters = broker
        .meters()
        .map_err(|e| BrokerError::Link(e.to_string()))?;
    let mqtt_connections = Arc::new(AtomicUsize::new(0));
    tokio::spawn(count_connections(
        meters,
        mqtt_connections.clone(),
        own_links,
    ));
    Ok((broker, engine, mqtt_connections))
}

/// rumqttd blocks the thread that starts it and never stops: one of its own.
fn spawn_router(broker: Broker) -> Result<(), BrokerError> {
    std::thread::Builder::new()
        .name("rumqttd".into())
        .spawn(move || {
            let mut broker = broker;
            if let Err(e) = broker.start() {
                error!(error = %e, "Embedded MQTT broker stopped.");
            }
        })
        .map_err(BrokerError::Thread)?;
    Ok(())
}

/// rumqttd's configuration: one MQTT 5 server on `internal_v5`, behind
/// the guard, with meters every second.
fn rumqttd_config(config: &MqttConfig, internal_v5: SocketAddr) -> rumqttd::Config {
    rumqttd::Config {
        id: 0,
        router: RouterConfig {
            max_connections: config.max_connections.saturating_add(ROUTER_SLACK),
            max_outgoing_packet_count: config.max_outgoing_packet_count,
            max_segment_size: config.segment_size,
            max_segment_count: config.segment_count,
            custom_segment: None,
            initialized_filters: None,
            shared_subscriptions_strategy: Default::default(),
        },
        // Every client reaches rumqttd as MQTT 5 through the guard; its
        // 3.1.1 listener would panic on MQTT 5 properties.
        v4: None,
        v5: Some(HashMap::from([(
            "v5".to_owned(),
            server_settings(V5_SERVER, internal_v5, config),
        )])),
        // rumqttd's metrics timer unwraps the meters interval whether or
        // not meters are configured, so both are set.
        metrics: Some(HashMap::from([
            (MetricType::Alerts, every_second()),
            (MetricType::Meters, every_second()),
        ])),
        ..Default::default()
    }
}

/// What the store kept for the broker, read back before it starts.
struct Recovered {
    persistence: Option<rumqttd::Persistence>,
    /// Presence of agents that were connected when the sidecar stopped:
    /// published "offline" once the broker is ready.
    stale_presence: Vec<super::Publication>,
    kept_sessions: Vec<KeptSession>,
    /// Wills of connections the last run did not see end, and when due.
    wills_due: Vec<(String, std::time::Duration)>,
}

async fn recover(
    store: &Store,
    topics: &Topics,
    retained: &Arc<RetainedBook>,
    limits: crate::broker::kept::QueueLimits,
) -> Result<Recovered, BrokerError> {
    let started = std::time::Instant::now();
    let recovered = crate::broker::kept::recover(store, topics, retained, limits)?;
    let (stale_presence, kept_sessions) = match &recovered {
        Some(r) => (r.stale_presence.clone(), r.sessions.clone()),
        None => (Vec::new(), Vec::new()),
    };
    let wills_due = recovered
        .as_ref()
        .map(|r| r.wills_due.clone())
        .unwrap_or_default();
    let persistence = match recovered {
        Some(r) => {
            r.run_saved.durable().await?;
            store.note_recovered("retained", r.retained as u64);
            store.note_recovered("sessions", r.sessions.len() as u64);
            store.note_recovered("queued", r.queued as u64);
            info!(
                retained = r.retained,
                sessions = r.sessions.len(),
                queued = r.queued,
                ms = started.elapsed().as_millis() as u64,
                "Recovered what the embedded MQTT broker kept."
            );
            Some(r.persistence)
        }
        None => None,
    };
    Ok(Recovered {
        persistence,
        stale_presence,
        kept_sessions,
        wills_due,
    })
}

/// The guard's listeners: the public ones and the trusted loopback one.
struct Listeners {
    public: tokio::net::TcpListener,
    public_v5: tokio::net::TcpListener,
    trusted: tokio::net::TcpListener,
}

/// What the guards carry over from the store and the hooks.
struct Guarded {
    prerequisite: Option<Arc<dyn Prerequisite>>,
    store: Store,
    /// The kept sessions' owners, for the keeper to charge.
    owners: crate::broker::kept::Owners,
    kept_sessions: Vec<KeptSession>,
    keeps: Keeps,
}

/// The public listeners through the guard applying `policy` (TLS with
/// `tls`), the trusted one letting every client in; all close their
/// connections once `shutdown` fires. The public guard, for the clients
/// that come another way (MQTT over WebSocket).
fn serve_guards(
    engine: Engine,
    config: &MqttConfig,
    (policy, tls): (Arc<dyn Policy>, Option<TlsAcceptor>),
    Guarded {
        prerequisite,
        store,
        owners,
        kept_sessions,
        keeps,
    }: Guarded,
    listeners: Listeners,
    shutdown: CancellationToken,
) -> Guard {
    let limits = Limits::from_config(config);
    let guard = Guard::new(
        engine.clone(),
        policy,
        prerequisite.clone(),
        limits.clone(),
        tls,
        shutdown.clone(),
        (store.clone(), keeps.clone(), owners.clone()),
    );
    guard.restore_sessions(kept_sessions);
    guard.serve(listeners.public);
    guard.serve(listeners.public_v5);
    let trusted = Guard::new(
        engine,
        Arc::new(AllowAll),
        prerequisite,
        limits,
        None,
        shutdown,
        (store, Keeps { own: true, ..keeps }, owners),
    );
    trusted.serve(listeners.trusted);
    guard
}

/// A link of the sidecar's own to the router: a thread that sends its
/// commands, a task that receives its deliveries (and answers `probe`).
/// Its subscriptions are queued first, so they are live before anything
/// published through the link after them.
fn open_link(
    broker: &mut Broker,
    filters: Vec<String>,
    probe: Option<(String, mpsc::UnboundedSender<String>)>,
) -> Result<OwnLink, BrokerError> {
    // A client ID no MQTT client will pick by accident: a duplicate would
    // make rumqttd drop the sidecar's own link.
    let link_id = format!("lmos-sidecar-{}", uuid::Uuid::new_v4().simple());
    let (link_tx, link_rx) = broker
        .link(&link_id)
        .map_err(|e| BrokerError::Link(e.to_string()))?;
    let (command_tx, command_rx) = mpsc::channel(COMMAND_QUEUE);
    for filter in filters {
        command_tx
            .try_send(BusCommand::Subscribe(filter))
            .map_err(|e| BrokerError::Link(e.to_string()))?;
    }
    std::thread::Builder::new()
        .name("bus-publisher".into())
        .spawn(move || run_link_tx(link_tx, command_rx))
        .map_err(BrokerError::Thread)?;
    let (delivery_tx, deliveries) = mpsc::channel(DELIVERY_QUEUE);
    tokio::spawn(run_link_rx(link_rx, delivery_tx, probe));
    Ok((Bus::new(command_tx), deliveries))
}

fn subscribe_packet(filter: String) -> Packet {
    let filter = Filter {
        path: filter,
        qos: QoS::AtMostOnce,
        nolocal: false,
        preserve_retain: false,
        retain_forward_rule: RetainForwardRule::OnEverySubscribe,
    };
    Packet::Subscribe(
        Subscribe {
            pkid: 0,
            filters: vec![filter],
        },
        None,
    )
}

/// Owns the sending half of the link. `LinkTx::send` is async in name only: it
/// blocks on the router's bounded queue, hence a thread of its own.
fn run_link_tx(mut link_tx: LinkTx, mut commands: mpsc::Receiver<BusCommand>) {
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(r) => r,
        Err(e) => {
            error!(error = %e, "Cannot start the bus publisher.");
            return;
        }
    };
    runtime.block_on(async move {
        while let Some(command) = commands.recv().await {
            let packet = match command {
                // rumqttd writes a topic's length as 16 bits without
                // checking: a longer topic would corrupt the stream of every
                // subscriber. The gateway refuses such messages first; this
                // is the last line for any other path.
                BusCommand::Publish(p) if !crate::topics::fits(&p.topic) => {
                    warn!(
                        topic_bytes = p.topic.len(),
                        "Dropped a publication whose topic is longer than MQTT allows."
                    );
                    continue;
                }
                BusCommand::Publish(p) => {
                    let properties = publish_properties(p.correlation_data, p.trace, p.chunk);
                    Packet::Publish(Publish::new(Bytes::from(p.topic), p.payload, p.retain), properties)
                }
                BusCommand::Subscribe(filter) => {
                    debug!(%filter, "Subscribing the gateway.");
                    subscribe_packet(filter)
                }
                BusCommand::Unsubscribe(filter) => {
                    debug!(%filter, "Unsubscribing the gateway.");
                    Packet::Unsubscribe(
                        Unsubscribe {
                            pkid: 0,
                            filters: vec![filter],
                        },
                        None,
                    )
                }
            };
            if let Err(e) = link_tx.send(packet).await {
                error!(error = %e, "Embedded MQTT broker refused the sidecar's message; the bus is stopping.");
                return;
            }
        }
    });
}

async fn run_link_rx(
    mut link_rx: LinkRx,
    deliveries: mpsc::Sender<Delivery>,
    probe: Option<(String, mpsc::UnboundedSender<String>)>,
) {
    loop {
        match link_rx.next().await {
            // The readiness probe, until it is done; then the same topic
            // carries the dispatcher's barriers, delivered as any message.
            Ok(Some(Notification::Forward(forward)))
                if probe.as_ref().is_some_and(|(topic, probes)| {
                    forward.publish.topic == topic.as_bytes() && !probes.is_closed()
                }) =>
            {
                if let Some((_, probes)) = &probe {
                    let _ =
                        probes.send(String::from_utf8_lossy(&forward.publish.payload).into_owned());
                }
            }
            Ok(Some(Notification::Forward(forward))) => {
                let (response, trace, publisher) = match forward.properties {
                    Some(p) => {
                        let trace = trace_from_user_properties(&p.user_properties);
                        let publisher = super::guard::publisher(&p.user_properties);
                        let response = p.response_topic.map(|topic| ResponseInfo {
                            topic,
                            correlation_data: p.correlation_data,
                        });
                        (response, trace, publisher)
                    }
                    None => (None, None, None),
                };
                let delivery = Delivery {
                    topic: forward.publish.topic,
                    payload: forward.publish.payload,
                    response,
                    trace,
                    publisher,
                };
                if deliveries.send(delivery).await.is_err() {
                    return;
                }
            }
            // The router stops sending once our buffer is full and waits to be
            // told we drained it; without this delivery would stall for good.
            Ok(Some(Notification::Unschedule)) => {
                if link_rx.wake().await.is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(e) => {
                error!(error = %e, "Lost the link to the embedded MQTT broker.");
                return;
            }
        }
    }
}

/// rumqttd only pushes alerts on a timer configured through its metrics
/// settings, whose fields are private; serde is the one way to build them.
fn every_second() -> MetricSettings {
    serde_json::from_value(serde_json::json!({ "push_interval": 1 }))
        .expect("valid metric settings")
}

/// rumqttd drops messages silently when a subscriber falls further behind
/// than its filter's ring; its alerts are the only trace, so they are logged.
async fn log_alerts(alerts: AlertsLink) {
    while let Ok(batch) = alerts.next().await {
        for alert in batch {
            let kind = format!("{:?}", alert.kind);
            if kind.starts_with("CursorJump") {
                warn!(
                    client_id = %alert.client_id,
                    alert = %kind,
                    "Subscriber fell behind further than the broker buffers (mqtt.segment_size x mqtt.segment_count) and missed messages."
                );
            } else {
                warn!(client_id = %alert.client_id, alert = %kind, "Broker alert.");
            }
        }
    }
}

/// MQTT 5 properties of a publication: Correlation Data for replies to MQTT
/// 5 requesters, trace context as user properties when asked for, a raw
/// stream chunk's content type and place. (The guard takes them off for
/// MQTT 3.1.1 subscribers.)
fn publish_properties(
    correlation_data: Option<Bytes>,
    trace: Option<TraceContext>,
    chunk: Option<Box<super::ChunkProperties>>,
) -> Option<PublishProperties> {
    if correlation_data.is_none() && trace.is_none() && chunk.is_none() {
        return None;
    }
    let mut user_properties = Vec::new();
    let mut content_type = None;
    if let Some(chunk) = chunk {
        content_type = chunk.content_type;
        user_properties.push(("seq".to_owned(), chunk.seq.to_string()));
        if chunk.end {
            user_properties.push(("end".to_owned(), "true".to_owned()));
        }
    }
    if let Some(t) = trace {
        user_properties.push(("traceparent".to_owned(), t.traceparent));
        if let Some(s) = t.tracestate {
            user_properties.push(("tracestate".to_owned(), s));
        }
    }
    Some(PublishProperties {
        correlation_data,
        user_properties,
        content_type,
        ..Default::default()
    })
}

fn trace_from_user_properties(properties: &[(String, String)]) -> Option<TraceContext> {
    let find = |name: &str| {
        properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    Some(TraceContext {
        traceparent: find("traceparent")?,
        tracestate: find("tracestate"),
    })
}

/// rumqttd counts the router's connections, the sidecar's own links
/// (`own_links`) included; the rest are MQTT clients.
async fn count_connections(
    meters: MetersLink,
    mqtt_connections: Arc<AtomicUsize>,
    own_links: usize,
) {
    while let Ok(batch) = meters.next().await {
        for meter in batch {
            if let rumqttd::Meter::Router(_, router) = meter {
                mqtt_connections.store(
                    router.total_connections.saturating_sub(own_links),
                    Ordering::Relaxed,
                );
            }
        }
    }
}
