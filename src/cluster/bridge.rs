//! The bridge: one MQTT session with the embedded broker (on its internal
//! listener, behind the guard: the bridge is part of the sidecar) and one
//! persistent session with the cluster, and the messages between them.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS, SubscribeFilter};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::echo::Echoes;
use super::{bridged_filters, is_retained};
use crate::config::ClusterConfig;
use crate::topics::Topics;

/// How long a publication's echo is waited for.
const ECHO_TTL: Duration = Duration::from_secs(60);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_PACKET: usize = 16 * 1024 * 1024;

/// What the rest of the sidecar may know about the cluster link.
#[derive(Debug, Clone, Default)]
pub struct ClusterStatus {
    connected: Arc<AtomicBool>,
    reconnects: Arc<AtomicU64>,
}

impl ClusterStatus {
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("`cluster.url` must look like mqtt://host:port, not `{0}`")]
    Url(String),
    #[error("`cluster.password_env` names {0}, which is not set")]
    Password(String),
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

pub struct Bridge {
    topics: Topics,
    local: MqttOptions,
    remote: MqttOptions,
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
    ) -> Result<Bridge, ClusterError> {
        let rest = config
            .url
            .strip_prefix("mqtt://")
            .ok_or_else(|| ClusterError::Url(config.url.clone()))?;
        let (host, port) = rest
            .trim_end_matches('/')
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| ClusterError::Url(config.url.clone()))?;
        let client_id = match config.client_id.as_str() {
            "" => format!("lmos-bridge-{sidecar_id}"),
            id => id.to_owned(),
        };
        let mut remote = MqttOptions::new(client_id, host, port);
        // A persistent session: the cluster keeps what arrives for the
        // sidecar while the link is down.
        remote.set_clean_session(false);
        remote.set_keep_alive(Duration::from_secs(config.keep_alive_s.max(5)));
        remote.set_max_packet_size(MAX_PACKET, MAX_PACKET);
        if !config.username.is_empty() {
            let password = match config.password_env.as_str() {
                "" => String::new(),
                var => std::env::var(var).map_err(|_| ClusterError::Password(var.to_owned()))?,
            };
            remote.set_credentials(config.username.clone(), password);
        }
        let local_id = format!("lmos-bridge-local-{}", uuid::Uuid::new_v4().simple());
        let mut local_options = MqttOptions::new(local_id, local.ip().to_string(), local.port());
        local_options.set_keep_alive(Duration::from_secs(30));
        local_options.set_max_packet_size(MAX_PACKET, MAX_PACKET);
        Ok(Bridge {
            topics,
            local: local_options,
            remote,
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
        let filters = bridged_filters(&self.topics);
        let subscriptions = || {
            filters
                .iter()
                .map(|f| SubscribeFilter::new(f.clone(), QoS::AtLeastOnce))
                .collect::<Vec<_>>()
        };
        let (local, mut local_loop) = AsyncClient::new(self.local.clone(), self.buffer);
        let (remote, mut remote_loop) = AsyncClient::new(self.remote.clone(), self.buffer);
        // What each side will echo back: messages the bridge published there.
        let mut local_echoes = Echoes::new(ECHO_TTL);
        let mut remote_echoes = Echoes::new(ECHO_TTL);
        // Messages whose destination's queue was full. Past `buffer` of
        // them, their source is no longer read, so a longer backlog stays
        // where it was (for the embedded broker: its per-filter buffers).
        let mut held_for_remote: VecDeque<Held> = VecDeque::new();
        let mut held_for_local: VecDeque<Held> = VecDeque::new();
        let mut backoff = FIRST_BACKOFF;
        let mut ever_connected = false;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                event = local_loop.poll(), if held_for_remote.len() < self.buffer => match event {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        let _ = local.try_subscribe_many(subscriptions());
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        if local_echoes.is_echo(&p.topic, &p.payload, Instant::now()) {
                            continue;
                        }
                        let retain = is_retained(&self.topics, &p.topic);
                        remote_echoes.expect(&p.topic, &p.payload, Instant::now());
                        held_for_remote.push_back(Held { topic: p.topic, payload: p.payload, retain });
                    }
                    Ok(_) => {}
                    Err(e) => {
                        warn!(error = %e, "The bridge lost the embedded broker; reconnecting.");
                        tokio::time::sleep(FIRST_BACKOFF).await;
                    }
                },
                event = remote_loop.poll(), if held_for_local.len() < self.buffer => match event {
                    // Connected means usable: only once the cluster has
                    // acknowledged the subscriptions does a message from
                    // another host reach this one.
                    Ok(Event::Incoming(Packet::SubAck(_))) => {
                        self.status.connected.store(true, Ordering::Relaxed);
                    }
                    Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                        backoff = FIRST_BACKOFF;
                        if ever_connected {
                            self.status.reconnects.fetch_add(1, Ordering::Relaxed);
                            info!(session_present = ack.session_present, "Reconnected to the cluster.");
                        } else {
                            info!("Connected to the cluster.");
                        }
                        ever_connected = true;
                        // Even a resumed session is subscribed again: NATS
                        // was seen to report a session present for a client
                        // ID it had never seen, and subscribing twice is
                        // harmless in MQTT.
                        let _ = remote.try_subscribe_many(subscriptions());
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        if remote_echoes.is_echo(&p.topic, &p.payload, Instant::now()) {
                            continue;
                        }
                        let retain = is_retained(&self.topics, &p.topic);
                        local_echoes.expect(&p.topic, &p.payload, Instant::now());
                        held_for_local.push_back(Held { topic: p.topic, payload: p.payload, retain });
                    }
                    Ok(_) => {}
                    Err(e) => {
                        if self.status.connected.swap(false, Ordering::Relaxed) || !ever_connected {
                            warn!(error = %e, retry_ms = backoff.as_millis() as u64, "Cannot reach the cluster; local traffic goes on, reconnecting.");
                        } else {
                            debug!(error = %e, "The cluster is still unreachable.");
                        }
                        tokio::select! {
                            _ = shutdown.cancelled() => break,
                            _ = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(self.reconnect_max);
                    }
                },
            }
            flush(&remote, &mut held_for_remote);
            flush(&local, &mut held_for_local);
        }
        self.status.connected.store(false, Ordering::Relaxed);
        if !held_for_remote.is_empty() {
            warn!(
                messages = held_for_remote.len(),
                "Stopped with messages the cluster never got."
            );
        }
        let _ = remote.try_disconnect();
        let _ = tokio::time::timeout(Duration::from_millis(500), async {
            while remote_loop.poll().await.is_ok() {}
        })
        .await;
    }
}
