//! The MQTT guard: a thin MQTT-aware proxy in front of rumqttd, which only
//! authenticates at CONNECT, has no hook to authorize topics, and keeps
//! only part of what MQTT 5 promises.
//!
//! The guard owns the public MQTT listeners. Each client connection gets one
//! connection to rumqttd's internal MQTT 5 listener, whatever the client
//! speaks ([`v4`] translates 3.1.1). The guard decides on CONNECT,
//! SUBSCRIBE, UNSUBSCRIBE, PUBLISH and acknowledgements from the client and
//! on CONNACK, SUBACK, UNSUBACK and PUBLISH from the broker, and forwards
//! the rest as it came. Which file holds which step is in
//! `docs/architecture.md`, "Where is what" (the MQTT guard row and the
//! `src/broker/guard/` entry under "Design"), kept there rather than here so
//! that one list stays true.

mod admission;
mod bell;
mod connection;
mod delivery;
mod downstream;
mod filter_set;
mod handover;
mod handshake;
mod inspect;
mod live;
mod order;
pub mod packet;
mod properties;
mod publication;
mod reason;
mod relay;
pub mod retained;
mod sessions;
mod sparse;
pub use sessions::SessionView;
mod stored;
mod upstream;
mod v4;
pub mod validate;
pub mod websocket;
pub mod wills;

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::store::Store;
use tracing::{debug, warn, Instrument, Span};

use crate::broker::engine::Engine;
use crate::config::MqttConfig;
use connection::Connection;

/// Room for a PUBLISH's topic, packet identifier and MQTT 5 properties on
/// top of `mqtt.max_payload_size`.
pub const PACKET_HEADROOM: usize = 64 * 1024;

/// What [`Policy::connect`] decides, in time: checking a password may
/// wait for a verifier thread.
pub type Verdict<'a> = Pin<Box<dyn Future<Output = Result<Box<dyn Session>, Refusal>> + Send + 'a>>;

/// Decides who may connect and, per connection, what it may do.
pub trait Policy: Send + Sync + 'static {
    /// At CONNECT, from `peer`; `certificate`: the identity of the
    /// client's TLS certificate, verified in the handshake (empty: the
    /// certificate names no one); username/password as sent (password raw
    /// bytes). Must not block: slow checks belong on other threads.
    fn connect<'a>(
        &'a self,
        peer: SocketAddr,
        certificate: Option<&'a str>,
        client_id: &'a str,
        username: Option<&'a str>,
        password: Option<&'a [u8]>,
    ) -> Verdict<'a>;

    /// Whether a publication's payload may go out on its topic (an LMOS
    /// message must name the Thing whose topic it is on). `Err` says why
    /// not. Default: any payload.
    fn payload_fits(&self, _topic: &str, _payload: &[u8]) -> Result<(), String> {
        Ok(())
    }

    /// Counting/metrics hook, called for every refusal, denial and limit
    /// hit. Default: nothing.
    fn observe(&self, _event: GuardEvent) {}
}

/// One authenticated connection's rights.
pub trait Session: Send + Sync {
    /// Principal name, for logs.
    fn name(&self) -> &str;
    fn may_subscribe(&self, filter: &str) -> bool;
    fn may_publish(&self, topic: &str) -> bool;
    /// Whether the broker's subscribers learn who published on this topic
    /// (the sidecar's router, on request topics: an invocation is its
    /// principal's).
    fn names_publisher(&self, _topic: &str) -> bool {
        false
    }
    /// Time left until the credentials expire (a JWT's `exp`); the guard
    /// then closes the connection (MQTT 5: DISCONNECT 0xA0, maximum
    /// connect time). `None`: never.
    fn expires_in(&self) -> Option<std::time::Duration> {
        None
    }
}

/// Work that must be under way before some subscriptions are live (the
/// value-topic mirror, which starts on the first subscription that could
/// read a value topic). The guard holds such a SUBSCRIBE back until
/// [`Prerequisite::prepare`] resolves, so that nothing published after its
/// SUBACK is missed.
pub trait Prerequisite: Send + Sync + 'static {
    /// Whether a subscription to `filter` (`$share/group/` taken off) must
    /// wait for [`Prerequisite::prepare`]. Called for every filter: cheap.
    fn needed_for(&self, filter: &str) -> bool;
    fn prepare(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// Why a CONNECT is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// CONNACK 4 (3.1.1) / 0x86 (5).
    BadCredentials,
    /// CONNACK 5 (3.1.1) / 0x87 (5).
    NotAuthorized,
    /// A client certificate naming no principal (or refused in the TLS
    /// handshake, then without a CONNACK): CONNACK 5 (3.1.1) / 0x87 (5).
    Certificate,
    /// Credentials not checked, every check being taken: CONNACK 3 "server
    /// unavailable" (3.1.1) / 0x89 "server busy" (5).
    Busy,
    /// Credentials not checked after repeated failures from the client's
    /// address: CONNACK 3 (3.1.1) / 0x9F "connection rate exceeded" (5).
    Throttled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardEvent {
    Refused(Refusal),
    SubscribeDenied,
    PublishDenied,
    /// A publication refused by [`Policy::payload_fits`].
    PayloadRefused,
    /// A CONNECT naming another principal's session (its client ID).
    SessionDenied,
    Limit(GuardLimit),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardLimit {
    /// `mqtt.max_connections` reached.
    Connections,
    /// `mqtt.max_subscriptions` reached on one connection.
    Subscriptions,
    /// A packet larger than `mqtt.max_payload_size` plus headroom.
    PacketSize,
    /// No CONNECT within `mqtt.connection_timeout_ms`.
    HandshakeTimeout,
    /// `mqtt.max_kept_sessions` or `mqtt.max_kept_sessions_per_principal`
    /// reached by a CONNECT asking for a session to be kept.
    KeptSessions,
    /// A retained message or a will past a bound of what the broker keeps
    /// (issue 43): the label, `max_retained`, `quotas.retained`, ...
    Keep(&'static str),
    /// A CONNECT's client ID longer than `mqtt.max_client_id_length`.
    ClientIdLength,
}

/// What the guard's connections may make the broker keep besides their
/// sessions: retained messages and wills, counted across connections (and,
/// for retained messages, across the guards and the broker's own links).
#[derive(Clone)]
pub struct Keeps {
    pub retained: Arc<retained::RetainedBook>,
    pub wills: Arc<wills::WillBook>,
    /// The sidecar's own connections (the trusted listener): their retained
    /// messages are counted as nobody's and never refused, their wills not
    /// counted.
    pub own: bool,
}

impl Keeps {
    /// Nothing bounded (tests, tools).
    pub fn unbounded() -> Keeps {
        Keeps {
            retained: retained::RetainedBook::unbounded(),
            wills: wills::WillBook::new(crate::quotas::Quotas::none(), 0),
            own: false,
        }
    }
}

/// Who published a delivery, when the guard named them (see
/// [`Session::names_publisher`]).
pub fn publisher(user_properties: &[(String, String)]) -> Option<String> {
    properties::Marker::among(user_properties)?.principal
}

/// Lets every client in and do anything.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

struct Anonymous;

impl Session for Anonymous {
    fn name(&self) -> &str {
        "anonymous"
    }

    fn may_subscribe(&self, _filter: &str) -> bool {
        true
    }

    fn may_publish(&self, _topic: &str) -> bool {
        true
    }
}

impl Policy for AllowAll {
    fn connect<'a>(
        &'a self,
        _peer: SocketAddr,
        _certificate: Option<&'a str>,
        _client_id: &'a str,
        _username: Option<&'a str>,
        _password: Option<&'a [u8]>,
    ) -> Verdict<'a> {
        Box::pin(std::future::ready(Ok(
            Box::new(Anonymous) as Box<dyn Session>
        )))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Client connections past CONNECT, over all listeners.
    pub max_connections: usize,
    /// Subscription filters per connection.
    pub max_subscriptions: usize,
    /// Largest packet, fixed header included.
    pub max_packet_size: usize,
    /// Unacknowledged QoS 1 and 2 publications an MQTT 5 client may have
    /// (its CONNACK's Receive Maximum).
    pub receive_maximum: u16,
    /// Time from accept (TLS handshake included) to a complete CONNECT.
    pub handshake_timeout: Duration,
    /// The longest keep-alive an MQTT 5 client may use (its CONNACK's
    /// Server Keep Alive when it asks for more, or for none); 0: any.
    pub max_keep_alive: u16,
    /// Filters no client may subscribe to (`mqtt.refused_filters`).
    pub refused_filters: Vec<String>,
    /// Sessions that may outlive their connection, in all and per
    /// principal (`mqtt.max_kept_sessions`, `..._per_principal`).
    pub kept: sessions::KeptLimits,
    /// The longest client ID, in bytes (`mqtt.max_client_id_length`).
    pub max_client_id_length: usize,
}

impl Limits {
    pub fn from_config(config: &MqttConfig) -> Limits {
        Limits {
            max_connections: config.max_connections,
            max_subscriptions: config.max_subscriptions,
            max_packet_size: config.max_payload_size.saturating_add(PACKET_HEADROOM),
            receive_maximum: u16::try_from(config.max_inflight_count.max(1)).unwrap_or(u16::MAX),
            handshake_timeout: Duration::from_millis(u64::from(config.connection_timeout_ms)),
            max_keep_alive: config.max_keep_alive_s,
            refused_filters: config.refused_filters.clone(),
            kept: sessions::KeptLimits {
                total: config.max_kept_sessions,
                per_principal: config.max_kept_sessions_per_principal,
            },
            max_client_id_length: config.max_client_id_length,
        }
    }
}

/// What every connection of one guard shares.
struct Shared {
    /// rumqttd's MQTT 5 server: every client reaches the broker as MQTT 5
    /// ([`v4`] translates 3.1.1 clients), through a direct link of its own.
    upstream: Engine,
    sessions: sessions::Sessions,
    policy: Arc<dyn Policy>,
    prerequisite: Option<Arc<dyn Prerequisite>>,
    limits: Limits,
    connections: Arc<Semaphore>,
    shutdown: CancellationToken,
    /// Where the broker keeps what survives a restart: a publisher's
    /// PUBACK (PUBREC, PUBCOMP) and a SUBACK wait until it is durable.
    store: Store,
    /// The expiry of the sessions rumqttd keeps, for the next run.
    records: crate::broker::kept::SessionRecords,
    /// SUBSCRIBEs go to the router before publications read after them.
    order: Arc<order::SubscribeOrder>,
    /// Retained messages and wills, per principal and in all.
    keeps: Keeps,
}

/// At shutdown, asks every live connection to end: each waits on its
/// handover, not on the token (see [`handover`]).
async fn ask_to_end_at_shutdown(shared: std::sync::Weak<Shared>) {
    let Some(shutdown) = shared.upgrade().map(|s| s.shutdown.clone()) else {
        return;
    };
    shutdown.cancelled().await;
    if let Some(shared) = shared.upgrade() {
        shared.sessions.shut_down();
    }
}

/// Serves listeners until the cancellation token fires; cheap to clone.
#[derive(Clone)]
pub struct Guard {
    shared: Arc<Shared>,
    tls: Option<TlsAcceptor>,
}

impl Guard {
    pub fn new(
        upstream: Engine,
        policy: Arc<dyn Policy>,
        prerequisite: Option<Arc<dyn Prerequisite>>,
        limits: Limits,
        tls: Option<TlsAcceptor>,
        shutdown: CancellationToken,
        (store, keeps, owners): (Store, Keeps, crate::broker::kept::Owners),
    ) -> Guard {
        let connections = Arc::new(Semaphore::new(
            limits.max_connections.min(Semaphore::MAX_PERMITS),
        ));
        let shared = Arc::new(Shared {
            upstream,
            sessions: sessions::Sessions::new(limits.kept).with_owners(owners),
            policy,
            prerequisite,
            limits,
            connections,
            shutdown,
            records: crate::broker::kept::SessionRecords::new(&store),
            order: Arc::default(),
            store,
            keeps,
        });
        tokio::spawn(ask_to_end_at_shutdown(Arc::downgrade(&shared)));
        Guard { shared, tls }
    }

    /// The sessions of this guard's clients, for the console.
    pub fn sessions(&self) -> Vec<SessionView> {
        self.shared.sessions.list()
    }

    /// Ends the connection of `client_id` (see [`sessions::Sessions::disconnect`]).
    pub fn disconnect(&self, client_id: &str) -> bool {
        self.shared.sessions.disconnect(client_id)
    }

    /// Knows again the sessions an earlier run kept (before serving).
    pub fn restore_sessions(&self, kept: Vec<crate::broker::kept::KeptSession>) {
        for session in kept {
            self.shared.sessions.restore(
                &session.client_id,
                session.filters.into_iter().collect(),
                session.expires_in,
                session.owner.as_deref(),
            );
            if let Some(after) = session.expires_in {
                tokio::spawn(connection::expire(
                    self.shared.clone(),
                    session.client_id,
                    0,
                    after,
                ));
            }
        }
    }

    /// Serves one MQTT client that came over a WebSocket (`/mqtt` on the
    /// HTTP port) until it or the broker ends: the same admission,
    /// authentication (`certified`: the HTTPS connection's client
    /// certificate), rights and limits as on the MQTT listeners. `socket`:
    /// the HTTP connection's, which keys what the guard holds for it.
    pub async fn serve_websocket<S>(
        &self,
        socket: tokio_tungstenite::WebSocketStream<S>,
        (peer, fd): (SocketAddr, RawFd),
        certified: Option<crate::tls::identity::Certified>,
    ) where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let deadline = tokio::time::Instant::now() + self.shared.limits.handshake_timeout;
        let client = websocket::WsBytes::new(socket, certified);
        let shared = self.shared.clone();
        let connection = Connection::new(client, fd, peer, shared, deadline, Span::none());
        Box::pin(Box::new(connection).run()).await
    }

    /// The WebSocket settings for [`Guard::serve_websocket`]'s sockets.
    pub fn websocket_config(&self) -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
        websocket::config(self.shared.limits.max_packet_size)
    }

    /// Accepts connections on an already bound listener until shutdown.
    pub fn serve(&self, listener: TcpListener) -> JoinHandle<()> {
        let guard = self.clone();
        tokio::spawn(async move { guard.accept_loop(listener).await })
    }

    async fn accept_loop(self, listener: TcpListener) {
        loop {
            let accepted = tokio::select! {
                _ = self.shared.shutdown.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, peer)) => {
                    // A debug span: the log layer keeps room for every span
                    // it has seen open at once, and in a burst every
                    // connection's is (some 160 bytes a client, kept after
                    // the burst, issue 48). The lines an admission logs at
                    // info and above name the peer and client ID themselves.
                    let span = tracing::debug_span!(
                        "mqtt_connection",
                        %peer,
                        client_id = tracing::field::Empty,
                        principal = tracing::field::Empty,
                    );
                    self.clone().spawn(stream, peer, span);
                }
                // Out of file descriptors and the like: pause rather than
                // spin; established connections are unaffected.
                Err(e) => {
                    warn!(error = %e, "Cannot accept an MQTT connection.");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// The connection's task. A plain connection's is its `run` itself (a
    /// wrapper would add its own state to every idle client's task, issue
    /// 32); a TLS one first takes its handshake.
    fn spawn(self, stream: tokio::net::TcpStream, peer: SocketAddr, span: tracing::Span) {
        let deadline = tokio::time::Instant::now() + self.shared.limits.handshake_timeout;
        // Acks are small and latency-bound; Nagle would hold them back.
        let _ = stream.set_nodelay(true);
        let socket = std::os::fd::AsRawFd::as_raw_fd(&stream);
        match self.tls.clone() {
            None => {
                let connection = Connection::new(stream, socket, peer, self.shared, deadline, span);
                tokio::spawn(Box::new(connection).run());
            }
            Some(acceptor) => {
                let tls = self.tls_handshake(acceptor, stream, (socket, peer), deadline);
                tokio::spawn(tls.instrument(span));
            }
        }
    }

    /// Boxed in its task: the TLS handshake's and a TLS connection's state
    /// (rustls' buffers and session) are large (issue 16).
    async fn tls_handshake(
        self,
        acceptor: TlsAcceptor,
        stream: tokio::net::TcpStream,
        (socket, peer): (RawFd, SocketAddr),
        deadline: tokio::time::Instant,
    ) {
        let shutdown = self.shared.shutdown.clone();
        let accept = Box::pin(tokio::time::timeout_at(deadline, acceptor.accept(stream)));
        let handshake = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = accept => r,
        };
        match handshake {
            Ok(Ok(tls)) => {
                let connection =
                    Connection::new(tls, socket, peer, self.shared, deadline, Span::none());
                Box::pin(Box::new(connection).run()).await
            }
            Ok(Err(e)) => {
                if crate::tls::refused_certificate(&e) {
                    let refused = GuardEvent::Refused(Refusal::Certificate);
                    self.shared.policy.observe(refused);
                }
                debug!(%peer, error = %e, "TLS handshake failed.");
            }
            Err(_) => admission::handshake_timed_out(&self.shared, peer),
        }
    }
}
