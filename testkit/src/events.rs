//! Events between an MQTT agent and WebSocket consumers, as the event and
//! resume tests exchange them.

use serde_json::Value;

use super::{event, lmos, MqttClient, WsClient};

impl MqttClient {
    /// Publishes event `name` of `thing` as its agent does, on the event
    /// topic; the event's messageID.
    pub async fn publish_event(&mut self, thing: &str, name: &str, data: Value) -> String {
        let topic = lmos_sidecar::topics::Topics::new("lmos")
            .unwrap()
            .event(thing, name);
        let e = event(thing, name, data);
        self.publish(&topic, &e, false).await;
        e["messageID"].as_str().unwrap().to_owned()
    }
}

impl WsClient {
    /// Subscribes to every event of `thing` (`members`: the subscription's
    /// own, a correlation ID or a resume point) and returns once the
    /// subscription is in place.
    pub async fn subscribe_all_events(&mut self, thing: &str, members: Value) {
        self.send(lmos(thing, "subscribeAllEvents", members)).await;
        self.barrier().await;
    }

    /// Subscribes to event `name` of `thing` and returns once the
    /// subscription is in place.
    pub async fn subscribe_event(&mut self, thing: &str, name: &str) {
        let members = serde_json::json!({ "event": name });
        self.send(lmos(thing, "subscribeEvent", members)).await;
        self.barrier().await;
    }

    /// The next `n` messages, which must be events.
    pub async fn recv_events(&mut self, n: usize) -> Vec<Value> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let v = self.recv().await;
            assert_eq!(v["messageType"], "event", "{v}");
            out.push(v);
        }
        out
    }
}

/// The messages' IDs, in either dialect (`messageID`, the Kotlin client's
/// `messageId`).
pub fn message_ids(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| {
            m.get("messageID")
                .or_else(|| m.get("messageId"))
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("no message ID: {m}"))
                .to_owned()
        })
        .collect()
}
