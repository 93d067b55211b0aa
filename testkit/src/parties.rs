//! The parties of an invocation test, connected in one call.

use super::{MqttClient, TestSidecar, WsClient};

/// A WebSocket agent, a WebSocket consumer, and an MQTT client following
/// the invocation's status topic.
pub struct Parties {
    pub agent: WsClient,
    pub consumer: WsClient,
    pub follower: MqttClient,
}

impl TestSidecar {
    /// A WebSocket agent hosting `thing`, a consumer, and a follower
    /// subscribed to `status` (an invocation's status topic, or a filter
    /// over several), in that order.
    pub async fn invocation_parties(&self, thing: &str, status: &str) -> Parties {
        let agent = self.ws_agent(thing).await;
        let consumer = self.ws().await;
        let mut follower = self.mqtt("follower").await;
        follower.subscribe(status).await;
        Parties {
            agent,
            consumer,
            follower,
        }
    }
}
