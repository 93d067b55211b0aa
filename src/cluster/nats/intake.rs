//! What the native link makes of what JetStream brings in: events from
//! the stream (skipping its own and those already handed over), the
//! buckets' state read at start (unless heard fresher live), and remote
//! presence nobody renews any more. No I/O: the link publishes what this
//! returns and acknowledges the event afterwards.

use std::collections::HashSet;

use bytes::Bytes;

use tracing::debug;

use super::batch::{self, BATCH};
use super::durable::FromDurable;
use super::jetstream::{Crossed, JetStreamCounters, Seen, MSG_ID, ORIGIN};
use super::kv::Staleness;
use super::relay::{self, ToLocal};
use crate::topics::Topics;

/// What the link makes of what JetStream brings in.
pub(super) struct JetStreamIn {
    /// Events this sidecar published come back through its consumer.
    origin: String,
    seen: Seen,
    /// Stream messages handed over, live or from the stream.
    crossed: Crossed,
    /// The buckets' state was handed over.
    loaded: bool,
    /// Retained topics heard live while the buckets were read: their
    /// entries are older.
    fresh: HashSet<String>,
    staleness: Staleness,
}

impl JetStreamIn {
    /// `origin`: this connection's unique token (see [`ORIGIN`]).
    pub(super) fn new(origin: String) -> JetStreamIn {
        JetStreamIn {
            origin,
            seen: Seen::default(),
            crossed: Crossed::default(),
            loaded: false,
            fresh: HashSet::new(),
            staleness: Staleness::default(),
        }
    }

    /// The buckets are read again: what is heard live from now on is
    /// fresher than their entries.
    pub(super) fn reload(&mut self) {
        self.loaded = false;
        self.fresh.clear();
    }

    /// A retained message from another sidecar, live.
    pub(super) fn live(&mut self, topics: &Topics, topic: &str, payload: &[u8]) {
        if !self.loaded {
            self.fresh.insert(topic.to_owned());
        }
        if let Some(crate::topics::Route::AgentStatus { .. }) = topics.parse(topic) {
            self.staleness.heard(topic, relay::is_online(payload));
        }
    }

    /// Whether a message with these headers is this sidecar's own event.
    fn is_own(&self, headers: Option<&async_nats::HeaderMap>) -> bool {
        headers
            .and_then(|h| h.get(ORIGIN))
            .is_some_and(|o| o.as_str() == self.origin)
    }

    /// A publication on an event subject, as core NATS delivered it: what
    /// goes to the embedded broker unless the stream's copy came first.
    /// Only a sidecar's stream publications (with a `Nats-Msg-Id`) are
    /// taken live; anything else on the subjects comes from the stream.
    pub(super) fn live_event(
        &mut self,
        message: &async_nats::Message,
        counters: &JetStreamCounters,
    ) -> Vec<ToLocal> {
        let headers = message.headers.as_ref();
        let Some(id) = headers.and_then(|h| h.get(MSG_ID)) else {
            return Vec::new();
        };
        if self.is_own(headers) || !self.crossed.first(id.as_str()) {
            return Vec::new();
        }
        let local = events(&message.subject, headers, &message.payload);
        counters.live.add(local.len() as u64);
        local
    }

    /// A stream message through this sidecar's consumer (`delivery`: its
    /// stream sequence and how often it was delivered): what goes to the
    /// embedded broker unless it is this sidecar's own, was handed over
    /// before, or came live first.
    fn stream_event(
        &mut self,
        m: &async_nats::Message,
        delivery: Option<(u64, i64)>,
        counters: &JetStreamCounters,
    ) -> Vec<ToLocal> {
        let headers = m.headers.as_ref();
        let own = self.is_own(headers);
        let news = match delivery {
            Some((sequence, delivered)) => {
                if delivered > 1 {
                    counters.redelivered.inc();
                }
                self.seen.first(sequence)
            }
            None => true,
        };
        if !news {
            counters.duplicates.inc();
        }
        if own || !news {
            return Vec::new();
        }
        let id = headers.and_then(|h| h.get(MSG_ID));
        if id.is_some_and(|id| !self.crossed.first(id.as_str())) {
            return Vec::new(); // it came live
        }
        let local = events(&m.subject, headers, &m.payload);
        counters.received.add(local.len() as u64);
        local
    }

    /// What goes to the embedded broker, and the event to acknowledge
    /// once it is there.
    pub(super) fn take(
        &mut self,
        topics: &Topics,
        from: FromDurable,
        counters: &JetStreamCounters,
    ) -> (Vec<ToLocal>, Option<Box<async_nats::jetstream::Message>>) {
        match from {
            FromDurable::Event(m) => {
                let delivery = m.info().ok().map(|i| (i.stream_sequence, i.delivered));
                let local = self.stream_event(&m.message, delivery, counters);
                (local, Some(m))
            }
            FromDurable::State { topic, payload } => {
                if self.fresh.contains(&topic) {
                    return (Vec::new(), None);
                }
                if let Some(crate::topics::Route::AgentStatus { .. }) = topics.parse(&topic) {
                    self.staleness.heard(&topic, relay::is_online(&payload));
                }
                let local = ToLocal {
                    topic,
                    payload,
                    retain: true,
                };
                (vec![local], None)
            }
            FromDurable::Ready | FromDurable::NoJetStream => (Vec::new(), None),
            FromDurable::Loaded => {
                self.loaded = true;
                self.fresh = HashSet::new();
                (Vec::new(), None)
            }
            FromDurable::Present(present) => {
                let mut local = Vec::new();
                for topic in self.staleness.listed(&present) {
                    let Some(crate::topics::Route::AgentStatus { thing }) = topics.parse(&topic)
                    else {
                        continue;
                    };
                    counters.stale_presence.inc();
                    // Its sidecar stopped renewing it: gone with it.
                    let payload = serde_json::json!({
                        "thingID": thing,
                        "status": "offline",
                        "reason": "its sidecar left the cluster",
                    });
                    local.push(ToLocal {
                        topic,
                        payload: Bytes::from(payload.to_string()),
                        retain: true,
                    });
                }
                (local, None)
            }
        }
    }
}

/// The events of one stream message (several when packed, [`BATCH`]),
/// for the embedded broker; none when its subject is not an event topic's
/// or its batch is damaged (no copy of it will be any better).
fn events(
    subject: &async_nats::Subject,
    headers: Option<&async_nats::HeaderMap>,
    payload: &Bytes,
) -> Vec<ToLocal> {
    let Ok(topic) = super::subjects::topic(subject.as_str()) else {
        return Vec::new();
    };
    let payloads = match headers.and_then(|h| h.get(BATCH)) {
        None => vec![payload.clone()],
        Some(count) => match batch::unpack(count.as_str(), payload) {
            Ok(payloads) => payloads,
            Err(e) => {
                debug!(error = %e, %subject, "Dropped a damaged batch of events.");
                return Vec::new();
            }
        },
    };
    payloads
        .into_iter()
        .map(|payload| ToLocal {
            topic: topic.clone(),
            payload,
            retain: false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(id: Option<&str>, origin: &str, payload: &'static [u8]) -> async_nats::Message {
        let mut headers = async_nats::HeaderMap::new();
        if let Some(id) = id {
            headers.insert(MSG_ID, id);
        }
        headers.insert(ORIGIN, origin);
        async_nats::Message {
            subject: "lmos.urn:a.events.tick".into(),
            reply: None,
            payload: Bytes::from_static(payload),
            headers: Some(headers),
            status: None,
            description: None,
            length: 0,
        }
    }

    #[test]
    fn an_event_is_handed_over_once_whether_live_or_from_the_stream_comes_first() {
        let counters = JetStreamCounters::default();
        let mut i = JetStreamIn::new("me".into());
        let one = published(Some("other-1"), "other", b"1");
        let two = published(Some("other-2"), "other", b"2");
        // Live first: the stream's copy is acknowledged and dropped.
        let local = i.live_event(&one, &counters);
        assert_eq!(
            (
                local.len(),
                local[0].topic.as_str(),
                &local[0].payload[..],
                local[0].retain
            ),
            (1, "lmos/urn:a/events/tick", &b"1"[..], false)
        );
        assert!(i.stream_event(&one, Some((1, 1)), &counters).is_empty());
        // The live copy lost: the stream's is handed over, a late live one
        // (a publisher's repeat) dropped.
        assert_eq!(i.stream_event(&two, Some((2, 1)), &counters).len(), 1);
        assert!(i.live_event(&two, &counters).is_empty());
        assert!(
            i.stream_event(&two, Some((2, 2)), &counters).is_empty(),
            "a redelivery"
        );
        assert_eq!(
            (
                counters.live.get(),
                counters.received.get(),
                counters.redelivered.get()
            ),
            (1, 1, 1)
        );
        // Own events, and what no sidecar published into the stream, do
        // not come live.
        assert!(i
            .live_event(&published(Some("me-1"), "me", b"3"), &counters)
            .is_empty());
        assert!(i
            .live_event(&published(None, "x", b"4"), &counters)
            .is_empty());
        assert!(i
            .stream_event(
                &published(Some("me-1"), "me", b"3"),
                Some((3, 1)),
                &counters
            )
            .is_empty());
        assert_eq!(
            i.stream_event(&published(None, "x", b"4"), Some((4, 1)), &counters)
                .len(),
            1,
            "from the stream only"
        );
    }

    #[test]
    fn state_heard_fresher_live_is_skipped_and_stale_presence_goes_offline() {
        let t = Topics::new("lmos").unwrap();
        let counters = JetStreamCounters::default();
        let mut i = JetStreamIn::new("me".into());
        let online = Bytes::from_static(br#"{"status":"online"}"#);
        i.live(&t, &t.property("urn:a", "p"), b"{}");
        let state = |topic: String| FromDurable::State {
            topic,
            payload: online.clone(),
        };
        let (local, ack) = i.take(&t, state(t.property("urn:a", "p")), &counters);
        assert!(
            local.is_empty() && ack.is_none(),
            "older than what was heard"
        );
        let (local, _) = i.take(&t, state(t.agent_status("urn:b")), &counters);
        assert_eq!(
            (local[0].retain, local[0].topic.clone()),
            (true, t.agent_status("urn:b"))
        );
        i.take(&t, FromDurable::Loaded, &counters);
        for missed in 0..2 {
            let (local, _) = i.take(&t, FromDurable::Present(HashSet::new()), &counters);
            assert_eq!(local.len(), missed, "stale after two listings");
            if let Some(offline) = local.first() {
                let v: serde_json::Value = serde_json::from_slice(&offline.payload).unwrap();
                assert_eq!(
                    (v["thingID"].as_str(), v["status"].as_str()),
                    (Some("urn:b"), Some("offline"))
                );
            }
        }
        assert_eq!(counters.stale_presence.get(), 1);
    }
}
