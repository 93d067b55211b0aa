//! The parts [`super::Application`] is built from, each made in one step.

use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use super::drain::Drain;
use crate::auth::{AuthError, Authority};
use crate::cluster::ClusterStatus;
use crate::config::Config;
use crate::directory::{Directory, DirectoryService, Endpoints};
use crate::gateway::Gateway;
use crate::http::auth::HttpAuth;
use crate::http::server::ServeOptions;
use crate::http::{self, HttpState, LMOS_PATH};
use crate::quotas::Quotas;
use crate::telemetry::metrics::Metrics;

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

/// The canonical URL of `/mcp` (RFC 8707 resource, RFC 9728 metadata):
/// `mcp.oauth.resource`, else derived from the bound HTTP address as the
/// directory's forms are.
pub(super) fn mcp_resource(config: &Config, http: SocketAddr) -> String {
    if !config.mcp.oauth.resource.is_empty() {
        return config.mcp.oauth.resource.clone();
    }
    let web = if config.http.tls_cert.is_empty() {
        "http"
    } else {
        "https"
    };
    format!("{web}://{}:{}/mcp", public_host(config, http), http.port())
}

pub(super) fn directory_service(
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
/// JWTs issued for the MCP endpoint (`http`: the bound HTTP address) are
/// accepted besides `auth.jwt.audience`.
pub(super) fn authority(
    config: &Config,
    metrics: &Metrics,
    http: SocketAddr,
) -> Result<Authority, AuthError> {
    let resource = mcp_resource(config, http);
    let authority = Authority::with_mcp_resource(&config.auth, metrics.clone(), &resource)?;
    if authority.is_empty() {
        if !config.http.authentication.is_empty() {
            return Err(AuthError::NoOne("http.authentication"));
        }
        if config.mqtt.authentication {
            return Err(AuthError::NoOne("mqtt.authentication"));
        }
    }
    // A certificate names a configured entry; with none, every client
    // certificate is refused where no other credentials come with it.
    for (key, ca) in [
        ("http.tls_client_ca", &config.http.tls_client_ca),
        ("mqtt.tls_client_ca", &config.mqtt.tls_client_ca),
    ] {
        if !ca.is_empty() && config.auth.principals.is_empty() {
            warn!(key, "Client certificates are asked for, but no [[auth.principals]] entry exists for one to name; they are refused.");
        }
    }
    let open = |addr: SocketAddr| !addr.ip().is_loopback();
    // A required client certificate authenticates too.
    let certified = |ca: &str, auth| !ca.is_empty() && auth == crate::config::ClientAuth::Required;
    let http_certified = certified(&config.http.tls_client_ca, config.http.tls_client_auth);
    let mqtt_certified = certified(&config.mqtt.tls_client_ca, config.mqtt.tls_client_auth);
    if config.http.authentication.is_empty() && !http_certified && open(config.http.listen) {
        warn!(listen = %config.http.listen, "The HTTP port is reachable from other hosts without authentication (http.authentication).");
    }
    let mqtt_open = open(config.mqtt.listen) || open(config.mqtt.listen_v5);
    if !config.mqtt.authentication && !mqtt_certified && mqtt_open {
        warn!("The MQTT listeners are reachable from other hosts without authentication (mqtt.authentication).");
    }
    Ok(authority)
}

/// Trims the allocator once a wave of connections (WebSocket and HTTP, and
/// MQTT) has left; see [`crate::telemetry::memory`].
pub(super) async fn give_memory_back(
    http: TaskTracker,
    mqtt: Arc<AtomicUsize>,
    shutdown: CancellationToken,
) {
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

pub(super) fn serve_options(
    config: &Config,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> ServeOptions {
    ServeOptions {
        tls,
        max_connections: config.http.max_connections,
        handshake_timeout: Duration::from_millis(config.http.handshake_timeout_ms),
        body: http::slow::BodyLimits {
            timeout: Duration::from_millis(config.http.body_timeout_ms),
            min_rate: config.http.body_min_rate,
        },
    }
}

/// What the HTTP port serves with, taken from the application as it runs.
pub(super) struct Serving<'a> {
    pub(super) config: &'a Config,
    pub(super) gateway: Gateway,
    pub(super) directory: DirectoryService,
    pub(super) metrics: Metrics,
    pub(super) mqtt_connections: Arc<AtomicUsize>,
    pub(super) console_link: http::console::BrokerView,
    pub(super) broker: crate::broker::health::Health,
    pub(super) authority: Authority,
    pub(super) http_addr: SocketAddr,
    pub(super) mqtt_guard: Option<crate::broker::guard::Guard>,
}

impl Serving<'_> {
    pub(super) fn http_state(
        self,
        drain: &Drain,
        connections: &TaskTracker,
        closing: &CancellationToken,
        cluster: Option<ClusterStatus>,
    ) -> HttpState {
        let config = self.config;
        // The console's traffic history fills from the start, so a page
        // opened later shows the minutes before it.
        let history = http::console::History::default();
        if config.console.enabled {
            tokio::spawn(http::console::sample_traffic(
                history.clone(),
                self.metrics.clone(),
                drain.token(),
            ));
        }
        let jaeger_ui_url = config.tracing.jaeger_ui_url.trim_end_matches('/');
        HttpState {
            gateway: self.gateway,
            connections: connections.clone(),
            shutdown: drain.token(),
            closing: closing.clone(),
            directory: self.directory,
            metrics: self.metrics.clone(),
            mqtt_connections: self.mqtt_connections,
            broker: self.broker,
            mqtt: self.mqtt_guard,
            cluster,
            request_timeout: config.requests.timeout(),
            console: http::console::ConsoleSettings {
                enabled: config.console.enabled,
                jaeger_ui_url: jaeger_ui_url.to_owned(),
                history,
                clients: http::console::Clients::default(),
                broker: self.console_link,
                administrators: config.console.administrators.clone(),
            },
            guard: http::guard::Guard::new(
                &config.http,
                &config.discovery.public_host,
                self.http_addr,
                self.metrics.clone(),
            ),
            mcp: http::mcp::Mcp::new(&config.mcp, config.gateway.max_message_size),
            a2a: http::a2a::A2a::new(&config.a2a),
            oauth: http::oauth::OAuthResource::new(config, mcp_resource(config, self.http_addr)),
            agent_protocols: http::AgentProtocols {
                mcp: config.mcp.enabled,
                a2a: config.a2a.enabled,
            },
            auth: HttpAuth {
                authority: self.authority,
                schemes: config.http.authentication.clone(),
                metrics: self.metrics,
            },
        }
    }
}
