//! Value-only topics: `{prefix}/{thing}/values/events/{event}` carries an
//! event's `data`, `{prefix}/{thing}/values/properties/{name}` a property's
//! `value` (retained), beside the LMOS envelope topics.
//!
//! A WoT consumer follows a TD form and expects the payload to be what the
//! affordance's data schema describes; the envelope topics carry the whole
//! LMOS message. The sidecar keeps the value topics in step from one place:
//! a link of its own to the broker subscribed to every event and property
//! topic, so messages from WebSocket agents, MQTT agents and other sidecars
//! (through the cluster bridge) are all mirrored, in the order the broker
//! delivers them. [`mirror`] decides; [`run`] only moves messages.

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tracing::debug;

use crate::broker::{Bus, Delivery, Publication};
use crate::topics::{Route, Topics};

/// What the mirror's link subscribes to.
pub fn filters(topics: &Topics) -> Vec<String> {
    vec![topics.all_events_filter(), topics.all_properties_filter()]
}

/// The value-only copy of a message on an envelope topic, or `None` when
/// there is nothing to mirror (another topic, no JSON object, no value).
///
/// An empty payload on a property topic clears its retained reading; the
/// value topic is cleared with it.
pub fn mirror(topics: &Topics, topic: &str, payload: &[u8]) -> Option<Publication> {
    let (value_topic, member, retain) = match topics.parse(topic)? {
        Route::Event { thing, event } => (topics.event_value(&thing, &event), "data", false),
        Route::Property { thing, name } => (topics.property_value(&thing, &name), "value", true),
        _ => return None,
    };
    if payload.is_empty() {
        return retain.then(|| Publication::new(value_topic, Vec::new(), true));
    }
    let mut map: Map<String, Value> = serde_json::from_slice(payload).ok()?;
    // A reading in the Kotlin stack's spelling carries its value as `data`.
    let value = map.remove(member).or_else(|| map.remove("data"))?;
    Some(Publication::new(value_topic, value.to_string(), retain))
}

/// Mirrors every delivery until the link or the bus closes.
pub async fn run(topics: Topics, bus: Bus, mut deliveries: mpsc::Receiver<Delivery>) {
    while let Some(delivery) = deliveries.recv().await {
        let Ok(topic) = std::str::from_utf8(&delivery.topic) else {
            continue;
        };
        let Some(mut publication) = mirror(&topics, topic, &delivery.payload) else {
            debug!(%topic, "Nothing to mirror to a value topic.");
            continue;
        };
        // The trace continues on the value topic for MQTT 5 subscribers.
        publication.trace = delivery.trace;
        if bus.publish(publication).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Topics {
        Topics::new("lmos").unwrap()
    }

    #[test]
    fn an_event_becomes_its_data() {
        let p = mirror(
            &t(),
            "lmos/urn:a/events/feedback",
            br#"{"thingID":"urn:a","messageID":"m","messageType":"event","event":"feedback","data":{"rating":4},"timestamp":"2025-01-20T19:00:00Z"}"#,
        )
        .unwrap();
        assert_eq!(p.topic, "lmos/urn:a/values/events/feedback");
        assert_eq!(&p.payload[..], br#"{"rating":4}"#);
        assert!(!p.retain);
    }

    #[test]
    fn a_reading_becomes_its_value_retained() {
        let p = mirror(
            &t(),
            "lmos/urn:a/properties/temp",
            br#"{"thingID":"urn:a","messageID":"m","messageType":"propertyReading","name":"temp","value":21.5,"timestamp":"2025-01-20T19:00:00Z"}"#,
        )
        .unwrap();
        assert_eq!(p.topic, "lmos/urn:a/values/properties/temp");
        assert_eq!(&p.payload[..], b"21.5");
        assert!(p.retain);
    }

    #[test]
    fn a_reading_in_the_kotlin_spelling_is_mirrored_too() {
        let p = mirror(
            &t(),
            "lmos/urn:a/properties/temp",
            br#"{"thingId":"urn:a","messageType":"propertyReading","property":"temp","data":"x"}"#,
        )
        .unwrap();
        assert_eq!(&p.payload[..], br#""x""#);
    }

    #[test]
    fn a_cleared_reading_clears_the_value_and_escapes_stay_as_they_are() {
        let p = mirror(&t(), "lmos/urn:a%2Fb/properties/temp", b"").unwrap();
        assert_eq!(p.topic, "lmos/urn:a%2Fb/values/properties/temp");
        assert!(p.payload.is_empty() && p.retain);
        assert!(mirror(&t(), "lmos/urn:a/events/e", b"").is_none());
    }

    #[test]
    fn null_data_is_mirrored_and_what_is_no_message_is_not() {
        let p = mirror(&t(), "lmos/urn:a/events/e", br#"{"data":null}"#).unwrap();
        assert_eq!(&p.payload[..], b"null");
        assert!(mirror(&t(), "lmos/urn:a/events/e", b"[1]").is_none());
        assert!(mirror(&t(), "lmos/urn:a/events/e", br#"{"x":1}"#).is_none());
        assert!(mirror(&t(), "lmos/urn:a/td", br#"{"data":1}"#).is_none());
        assert!(mirror(&t(), "other/urn:a/events/e", br#"{"data":1}"#).is_none());
    }
}
