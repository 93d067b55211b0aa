//! The bridge: one MQTT session with the embedded broker (on its internal
//! listener, behind the guard: the bridge is part of the sidecar) and one
//! persistent session with the cluster, and the messages between them.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rumqttc::{AsyncClient, MqttOptions, QoS, SubscribeFilter};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use super::echo::Echoes;
use super::link::{Link, LinkEvent, FIRST_BACKOFF};
use super::ClusterConfigError;
use super::{bridged_filters, is_retained};
use crate::config::ClusterConfig;
use crate::topics::Topics;

/// How long a publication's echo is waited for, and how long a unique
/// message's tombstone swallows retransmitted copies (see `echo`): longer
/// than a failover takes (NATS stalls a few seconds, plus the backoff).
const ECHO_TTL: Duration = Duration::from_secs(30);
const MAX_PACKET: usize = 16 * 1024 * 1024;

/// What the rest of the sidecar may know about the cluster link.
#[derive(Debug, Clone, Default)]
pub struct ClusterStatus {
    connected: Arc<AtomicBool>,
    reconnects: Arc<AtomicU64>,
    jetstream: Arc<super::nats::jetstream::JetStreamCounters>,
}

impl ClusterStatus {
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }

    /// What crossed through JetStream (native mode with `cluster.jetstream`).
    pub fn jetstream(&self) -> &Arc<super::nats::jetstream::JetStreamCounters> {
        &self.jetstream
    }

    pub(crate) fn set_connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::Relaxed);
    }

    pub(crate) fn reconnected(&self) {
        self.reconnects.fetch_add(1, Ordering::Relaxed);
    }
}

/// A message on its way to one side, held while that side's queue is full.
struct Held {
    topic: String,
    payload: Bytes,
    retain: bool,
}

/// Hands held messages to a client until its queue is full.
fn flush(client: &AsyncClient, held: &mut VecDeque<Held>) {
    while let Some(h) = held.pop_front() {
        let payload = h.payload.clone();
        match client.try_publish(&h.topic, QoS::AtLeastOnce, h.retain, payload) {
            Ok(()) => {}
            Err(rumqttc::ClientError::TryRequest(_)) => {
                held.push_front(h);
                return;
            }
            // A topic the client library refuses outright will never go.
            Err(e) => warn!(error = %e, "The bridge dropped a message it cannot publish."),
        }
    }
}

/// `mqtt://host:port` (IPv6 hosts in brackets).
fn parse_url(url: &str) -> Option<(String, u16)> {
    let rest = url.strip_prefix("mqtt://")?.trim_end_matches('/');
    let (host, port) = rest.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    (!host.is_empty()).then_some(())?;
    Some((host.to_owned(), port.parse().ok()?))
}

pub struct Bridge {
    topics: Topics,
    local: MqttOptions,
    /// One per node named in `cluster.url`, tried in turn.
    remotes: Vec<MqttOptions>,
    buffer: usize,
    reconnect_max: Duration,
    status: ClusterStatus,
}

impl Bridge {
    pub fn new(
        config: &ClusterConfig,
        topics: Topics,
        local: SocketAddr,
        sidecar_id: &str,
    ) -> Result<Bridge, ClusterConfigError> {
        let client_id = match config.client_id.as_str() {
            "" => format!("lmos-bridge-{sidecar_id}"),
            id => id.to_owned(),
        };
        let password = match (config.username.as_str(), config.password_env.as_str()) {
            ("", _) | (_, "") => String::new(),
            (_, var) => {
                std::env::var(var).map_err(|_| ClusterConfigError::Password(var.to_owned()))?
            }
        };
        let mut remotes = Vec::new();
        for url in config.url.split(',').map(str::trim) {
            let (host, port) =
                parse_url(url).ok_or_else(|| ClusterConfigError::MqttUrl(url.to_owned()))?;
            let mut remote = MqttOptions::new(client_id.clone(), host, port);
            // A persistent session: the cluster keeps what arrives for the
            // sidecar while the link is down, on whichever node it returns to.
            remote.set_clean_session(false);
            remote.set_keep_alive(Duration::from_secs(config.keep_alive_s.max(5)));
            remote.set_max_packet_size(MAX_PACKET, MAX_PACKET);
            if !config.username.is_empty() {
                remote.set_credentials(config.username.clone(), password.clone());
            }
            remotes.push(remote);
        }
        // Unique to this process, kept across reconnections: a persistent
        // session, so what the embedded broker holds for the bridge survives
        // the bridge starting its session again (see `link`).
        let local_id = format!("lmos-bridge-local-{}", uuid::Uuid::new_v4().simple());
        let mut local_options = MqttOptions::new(local_id, local.ip().to_string(), local.port());
        local_options.set_clean_session(false);
        local_options.set_keep_alive(Duration::from_secs(30));
        local_options.set_max_packet_size(MAX_PACKET, MAX_PACKET);
        Ok(Bridge {
            topics,
            local: local_options,
            remotes,
            buffer: config.buffer.max(1),
            reconnect_max: Duration::from_millis(config.reconnect_max_ms.max(100)),
            status: ClusterStatus::default(),
        })
    }

    pub fn status(&self) -> ClusterStatus {
        self.status.clone()
    }

    /// Carries messages both ways until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let span = tracing::info_span!("cluster_bridge", client_id = %self.remotes[0].client_id());
        self.carry(shutdown).instrument(span).await
    }

    async fn carry(self, shutdown: CancellationToken) {
        let filters = bridged_filters(&self.topics);
        let subscriptions = || {
            filters
                .iter()
                .map(|f| SubscribeFilter::new(f.clone(), QoS::AtLeastOnce))
                .collect::<Vec<_>>()
        };
        // Loopback: no reason to wait for more bytes (Nagle) on this hop.
        let mut local = Link::start(vec![self.local.clone()], self.buffer, FIRST_BACKOFF, true);
        // Left to Nagle: NATS 2.9 moved several times fewer messages with
        // TCP_NODELAY clients in the cross-sidecar bench.
        let mut remote = Link::start(self.remotes.clone(), self.buffer, self.reconnect_max, false);
        // What each side will echo back: messages the bridge published there.
        let mut local_echoes = Echoes::new(ECHO_TTL);
        let mut remote_echoes = Echoes::new(ECHO_TTL);
        // Messages whose destination's queue was full. Past `buffer` of
        // them, their source is no longer read, so a longer backlog stays
        // where it was (for the embedded broker: its per-filter buffers).
        let mut held_for_remote: VecDeque<Held> = VecDeque::new();
        let mut held_for_local: VecDeque<Held> = VecDeque::new();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(event) = local.events.recv(), if held_for_remote.len() < self.buffer => match event {
                    LinkEvent::Connected { .. } => {
                        let _ = local.client.try_subscribe_many(subscriptions());
                    }
                    LinkEvent::Message(p) => {
                        if local_echoes.is_echo(&p.topic, &p.payload, Instant::now()) {
                            continue;
                        }
                        let retain = is_retained(&self.topics, &p.topic);
                        remote_echoes.remember(&p.topic, &p.payload, !retain, Instant::now());
                        held_for_remote.push_back(Held { topic: p.topic, payload: p.payload, retain });
                    }
                    LinkEvent::Lost { error, .. } => {
                        warn!(error, "The bridge lost the embedded broker; reconnecting.");
                    }
                    LinkEvent::Subscribed | LinkEvent::Acked => {}
                },
                Some(event) = remote.events.recv(), if held_for_local.len() < self.buffer => match event {
                    // Connected means usable: only once the cluster has
                    // acknowledged the subscriptions does a message from
                    // another host reach this one.
                    LinkEvent::Subscribed => {
                        self.status.connected.store(true, Ordering::Relaxed);
                    }
                    LinkEvent::Connected { node, session_present, again } => {
                        if again {
                            self.status.reconnects.fetch_add(1, Ordering::Relaxed);
                            info!(node, session_present, "Reconnected to the cluster.");
                        } else {
                            info!(node, "Connected to the cluster.");
                        }
                        // Even a resumed session is subscribed again: NATS
                        // was seen to report a session present for a client
                        // ID it had never seen, and subscribing twice is
                        // harmless in MQTT.
                        let _ = remote.client.try_subscribe_many(subscriptions());
                    }
                    LinkEvent::Message(p) => {
                        if remote_echoes.is_echo(&p.topic, &p.payload, Instant::now()) {
                            continue;
                        }
                        let retain = is_retained(&self.topics, &p.topic);
                        local_echoes.remember(&p.topic, &p.payload, !retain, Instant::now());
                        held_for_local.push_back(Held { topic: p.topic, payload: p.payload, retain });
                    }
                    LinkEvent::Lost { error, retry, first } => {
                        self.status.connected.store(false, Ordering::Relaxed);
                        if first {
                            warn!(error, retry_ms = retry.as_millis() as u64, "Cannot reach the cluster; local traffic goes on, reconnecting.");
                        } else {
                            debug!(error, "The cluster is still unreachable.");
                        }
                    }
                    LinkEvent::Acked => {}
                },
            }
            flush(&remote.client, &mut held_for_remote);
            flush(&local.client, &mut held_for_local);
        }
        self.status.connected.store(false, Ordering::Relaxed);
        if !held_for_remote.is_empty() {
            warn!(
                messages = held_for_remote.len(),
                "Stopped with messages the cluster never got."
            );
        }
        tokio::join!(
            remote.close(Duration::from_millis(500)),
            local.close(Duration::from_millis(100))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_name_one_node_or_several() {
        assert_eq!(parse_url("mqtt://n1:1883"), Some(("n1".into(), 1883)));
        assert_eq!(parse_url("mqtt://[::1]:1883/"), Some(("::1".into(), 1883)));
        assert_eq!(parse_url("tcp://n1:1883"), None);
        assert_eq!(parse_url("mqtt://n1"), None);
        assert_eq!(parse_url("mqtt://:1883"), None);
        let config = |url: &str| ClusterConfig {
            url: url.into(),
            ..ClusterConfig::default()
        };
        let topics = Topics::new("lmos").unwrap();
        let local: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let bridge = Bridge::new(
            &config("mqtt://a:1, mqtt://b:2"),
            topics.clone(),
            local,
            "s",
        )
        .expect("two nodes");
        assert_eq!(bridge.remotes[1].broker_address(), ("b".to_owned(), 2));
        let e = Bridge::new(&config("mqtt://a:1,b:2"), topics, local, "s").err();
        assert!(e.unwrap().to_string().contains("`b:2`"));
    }
}
