//! The parts [`super::Application`] is built from, each made in one step.

use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use crate::auth::{AuthError, Authority};
use crate::config::Config;
use crate::directory::{Directory, DirectoryService, Endpoints};
use crate::http::LMOS_PATH;
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
pub(super) fn authority(config: &Config, metrics: &Metrics) -> Result<Authority, AuthError> {
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
