//! Beyond one machine: the sidecar's embedded broker bridged to an external
//! MQTT cluster (NATS with its MQTT listener, EMQX, HiveMQ, ...), or linked
//! to a NATS cluster in NATS's own protocol ([`nats`]).
//!
//! Agents and consumers keep talking to their own sidecar on localhost; the
//! bridge carries across what other hosts need: events, property readings,
//! action statuses, TDs, agent presence, and the requests and replies
//! between a sidecar's request router and an agent on another host.
//! Consumers' own `requests/` and `replies/` topics stay local: each
//! request is routed exactly once, by the consumer's own sidecar.
//!
//! Which file holds which part: `docs/architecture.md`, "Where is what".

pub mod bridge;
pub mod echo;
mod link;
pub mod nats;

pub use bridge::{Bridge, ClusterStatus};
pub use nats::NatsLink;

use tokio_util::sync::CancellationToken;

/// A `cluster` section that cannot work, found before anything starts.
#[derive(Debug, thiserror::Error)]
pub enum ClusterConfigError {
    #[error("`cluster.url` must be mqtt://host:port, or several separated by commas, not `{0}`")]
    MqttUrl(String),
    #[error("`cluster.password_env` names {0}, which is not set")]
    Password(String),
    /// NATS connection options (either mode checks them: see
    /// [`nats::options::check_mqtt_mode`]).
    #[error(transparent)]
    Nats(#[from] nats::OptionsError),
}

/// The sidecar's link to the cluster, by `cluster.mode`: a bridge between
/// MQTT brokers, or a link in NATS's own protocol.
pub enum ClusterLink {
    MqttBridge(Bridge),
    Nats(NatsLink),
}

impl ClusterLink {
    pub fn status(&self) -> ClusterStatus {
        match self {
            ClusterLink::MqttBridge(b) => b.status(),
            ClusterLink::Nats(n) => n.status(),
        }
    }

    /// Carries messages both ways until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        match self {
            ClusterLink::MqttBridge(b) => b.run(shutdown).await,
            ClusterLink::Nats(n) => n.run(shutdown).await,
        }
    }
}

use crate::topics::Topics;

/// The embedded broker's topics that cross to the cluster and back.
pub fn bridged_filters(topics: &Topics) -> Vec<String> {
    let p = topics.prefix();
    vec![
        format!("{p}/+/events/+"),
        format!("{p}/+/properties/+"),
        format!("{p}/+/actions/+/status/+"),
        format!("{p}/+/td"),
        format!("{p}/+/agent/status"),
        format!("{p}/+/agent/requests/+"),
        format!("{p}/+/agent/replies"),
    ]
}

/// Topics whose last message stays with the broker for late subscribers.
/// Brokers need not keep the retain flag on live deliveries, so the bridge
/// decides by the topic, not by the flag it received.
pub fn is_retained(topics: &Topics, topic: &str) -> bool {
    use crate::topics::Route;
    matches!(
        topics.parse(topic),
        Some(Route::Property { .. } | Route::AgentStatus { .. })
    ) || (topic.ends_with("/td") && topic.starts_with(topics.prefix()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_requests_and_replies_stay_local() {
        let t = Topics::new("lmos").unwrap();
        let filters = bridged_filters(&t);
        let crosses = |topic: &str| filters.iter().any(|f| rumqttd::protocol::matches(topic, f));
        assert!(crosses(&t.event("urn:a", "e")));
        assert!(crosses(&t.agent_request("urn:a", "invokeAction")));
        assert!(crosses(&t.agent_replies("urn:a")));
        assert!(crosses(&t.td("urn:a")));
        assert!(!crosses(&t.request("urn:a", "invokeAction")));
        assert!(!crosses(&t.reply("urn:a", "c")));
        assert!(is_retained(&t, &t.property("urn:a", "p")));
        assert!(is_retained(&t, &t.td("urn:a")));
        assert!(!is_retained(&t, &t.event("urn:a", "e")));
    }
}
