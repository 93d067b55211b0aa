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
//!
//! Mirroring costs the broker a delivery and a publication per event, a
//! quarter of an MQTT fan-out's throughput on two cores, so the mirror
//! starts only once a subscription that could read a value topic arrives
//! ([`Mirror`], which the MQTT guard asks before it forwards such a
//! SUBSCRIBE) and then runs for the life of the process. Starting
//! subscribes to every event and property topic: the broker hands over the
//! retained readings, which become the retained values.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::{mpsc, watch, Mutex};
use tracing::{debug, info, warn};

use crate::broker::guard::Prerequisite;
use crate::broker::{Bus, Delivery, Publication};
use crate::topics::{filters_overlap, Route, Topics};

/// How long starting may hold up the SUBSCRIBE that asked for it.
const START_TIMEOUT: Duration = Duration::from_secs(2);

/// What the mirror's link subscribes to once it starts.
fn filters(topics: &Topics) -> Vec<String> {
    vec![topics.all_events_filter(), topics.all_properties_filter()]
}

/// The mirror's switch; cheap to clone. Until [`Mirror::attach`] gives it
/// its link, a start waits for that.
#[derive(Clone)]
pub struct Mirror {
    inner: Arc<Inner>,
}

struct Inner {
    topics: Topics,
    /// Every value topic, as a filter.
    values: String,
    /// A topic only the mirror's link subscribes to: a token published on
    /// it comes back once the subscriptions made before it are live.
    probe_topic: String,
    active: AtomicBool,
    starting: Mutex<()>,
    bus: watch::Sender<Option<Bus>>,
    /// The last probe token that came back.
    probed: watch::Sender<String>,
}

impl Mirror {
    pub fn new(topics: Topics) -> Mirror {
        let probe_topic = format!(
            "lmos-sidecar/values-probe/{}",
            uuid::Uuid::new_v4().simple()
        );
        Mirror {
            inner: Arc::new(Inner {
                values: topics.all_values_filter(),
                topics,
                probe_topic,
                active: AtomicBool::new(false),
                starting: Mutex::new(()),
                bus: watch::channel(None).0,
                probed: watch::channel(String::new()).0,
            }),
        }
    }

    /// What the mirror's link must subscribe to from the start.
    pub fn link_filters(&self) -> Vec<String> {
        vec![self.inner.probe_topic.clone()]
    }

    /// Gives the mirror its link and moves its messages until the link
    /// closes.
    pub async fn attach(self, bus: Bus, deliveries: mpsc::Receiver<Delivery>) {
        self.inner.bus.send_replace(Some(bus.clone()));
        run(self, bus, deliveries).await
    }

    /// Whether the mirror runs.
    pub fn is_active(&self) -> bool {
        self.inner.active.load(Ordering::Acquire)
    }

    /// Starts the mirror unless it runs; returns once its subscriptions are
    /// live (or after [`START_TIMEOUT`], with a warning).
    pub async fn start(&self) {
        if self.is_active() {
            return;
        }
        let _one_at_a_time = self.inner.starting.lock().await;
        if self.is_active() {
            return;
        }
        let started = tokio::time::timeout(START_TIMEOUT, self.subscribe()).await;
        if !matches!(started, Ok(true)) {
            warn!("The value-topic mirror's subscriptions were not confirmed in time; it runs anyway.");
        }
        info!("Value topics are mirrored from now on: a subscription could read them.");
        self.inner.active.store(true, Ordering::Release);
    }

    /// Subscribes the link and waits for a probe to come back through it.
    async fn subscribe(&self) -> bool {
        let mut attached = self.inner.bus.subscribe();
        let bus = match attached.wait_for(Option::is_some).await {
            Ok(bus) => bus.clone(),
            Err(_) => None,
        };
        let Some(bus) = bus else {
            return false;
        };
        let mut probed = self.inner.probed.subscribe();
        let token = uuid::Uuid::new_v4().simple().to_string();
        for filter in filters(&self.inner.topics) {
            if bus.subscribe(filter).await.is_err() {
                return false;
            }
        }
        // The first probe comes back once the subscriptions are live, after
        // the retained readings they brought; the second once the values
        // mirrored from those (published through the link before it) are
        // retained in the broker in turn.
        for round in ["live", "seeded"] {
            let token = format!("{token}-{round}");
            let probe = Publication::new(self.inner.probe_topic.clone(), token.clone(), false);
            if bus.publish(probe).await.is_err() {
                return false;
            }
            if probed.wait_for(|seen| *seen == token).await.is_err() {
                return false;
            }
        }
        true
    }
}

impl Prerequisite for Mirror {
    fn needed_for(&self, filter: &str) -> bool {
        !self.is_active() && filters_overlap(filter, &self.inner.values)
    }

    fn prepare(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.start())
    }
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
    Some(Publication::new(
        value_topic,
        crate::lmos::splice::text(&value),
        retain,
    ))
}

/// Mirrors every delivery until the link or the bus closes.
async fn run(this: Mirror, bus: Bus, mut deliveries: mpsc::Receiver<Delivery>) {
    let inner = &this.inner;
    while let Some(delivery) = deliveries.recv().await {
        let Ok(topic) = std::str::from_utf8(&delivery.topic) else {
            continue;
        };
        if topic == inner.probe_topic {
            let token = String::from_utf8_lossy(&delivery.payload).into_owned();
            inner.probed.send_replace(token);
            continue;
        }
        let Some(mut publication) = mirror(&inner.topics, topic, &delivery.payload) else {
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
