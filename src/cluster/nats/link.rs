//! The native link: a link of the sidecar's own to the embedded broker (in
//! process, subscribed to the cluster filters) on one side, one NATS
//! connection on the other, and [`super::relay::Relay`] deciding what crosses.
//!
//! Loops: NATS does not echo this connection's publications (`no_echo`);
//! the embedded broker does deliver what the link publishes there back to
//! its own subscriptions (MQTT has no "no local" for it), so those are
//! remembered by fingerprint ([`crate::cluster::echo::Echoes`]) and dropped when they return.

use async_nats::ServerAddr;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::options::{self, OptionsError};
use crate::broker::{Bus, Delivery};
use crate::cluster::ClusterStatus;
use crate::config::ClusterConfig;
use crate::topics::Topics;

/// A link configured, not yet connected; [`NatsLink::run`] connects and
/// carries (see [`super::carrier`]).
pub struct NatsLink {
    pub(super) topics: Topics,
    pub(super) nodes: Vec<ServerAddr>,
    pub(super) config: ClusterConfig,
    pub(super) name: String,
    pub(super) bus: Bus,
    pub(super) deliveries: mpsc::Receiver<Delivery>,
    pub(super) status: ClusterStatus,
}

impl NatsLink {
    /// `bus`/`deliveries`: a link to the embedded broker subscribed to
    /// [`crate::cluster::bridged_filters`].
    pub fn new(
        config: &ClusterConfig,
        topics: Topics,
        bus: Bus,
        deliveries: mpsc::Receiver<Delivery>,
        sidecar_id: &str,
    ) -> Result<NatsLink, OptionsError> {
        let name = match config.client_id.as_str() {
            "" => format!("lmos-bridge-{sidecar_id}"),
            id => id.to_owned(),
        };
        Ok(NatsLink {
            topics,
            nodes: options::nodes(&config.url)?,
            config: config.clone(),
            name,
            bus,
            deliveries,
            status: ClusterStatus::default(),
        })
    }

    pub fn status(&self) -> ClusterStatus {
        self.status.clone()
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let span = tracing::info_span!("cluster_nats", name = %self.name);
        super::carrier::carry(self, shutdown).instrument(span).await
    }
}

/// The filters whose messages every sidecar gets; requests and replies go
/// by request/reply instead, events (with `jetstream`) through the stream.
pub(super) fn broadcast_filters(topics: &Topics, jetstream: bool) -> Vec<String> {
    crate::cluster::bridged_filters(topics)
        .into_iter()
        .filter(|f| !f.ends_with("/agent/requests/+") && !f.ends_with("/agent/replies"))
        .filter(|f| !(jetstream && f.ends_with("/events/+")))
        .collect()
}

/// The filters of events (what the stream carries with JetStream).
pub(super) fn event_filters(topics: &Topics) -> Vec<String> {
    crate::cluster::bridged_filters(topics)
        .into_iter()
        .filter(|f| f.ends_with("/events/+"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_are_not_broadcast() {
        let t = Topics::new("lmos").unwrap();
        let f = broadcast_filters(&t, false);
        assert_eq!(f.len(), crate::cluster::bridged_filters(&t).len() - 2);
        let f = broadcast_filters(&t, true);
        assert!(
            !f.iter().any(|f| f.contains("/events/")),
            "through the stream"
        );
        assert!(!f.iter().any(|f| f.contains("agent/re")));
        let mut all = f;
        all.extend(event_filters(&t));
        assert_eq!(
            all.len(),
            broadcast_filters(&t, false).len(),
            "the events are the rest"
        );
    }
}
