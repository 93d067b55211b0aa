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
use super::jetstream::{JetStreamCounters, Seen, ORIGIN};
use super::kv::Staleness;
use super::relay::{self, ToLocal};
use crate::topics::Topics;

/// What the link makes of what JetStream brings in.
pub(super) struct JetStreamIn {
    /// Events this sidecar published come back through its consumer.
    origin: String,
    seen: Seen,
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
                let own = m
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(ORIGIN))
                    .is_some_and(|o| o.as_str() == self.origin);
                let news = match m.info() {
                    Ok(info) => {
                        if info.delivered > 1 {
                            counters.redelivered.inc();
                        }
                        self.seen.first(info.stream_sequence)
                    }
                    Err(_) => true,
                };
                if own || !news {
                    if !news {
                        counters.duplicates.inc();
                    }
                    return (Vec::new(), Some(m));
                }
                let Ok(topic) = super::subjects::topic(m.subject.as_str()) else {
                    return (Vec::new(), Some(m));
                };
                let count = m.headers.as_ref().and_then(|h| h.get(BATCH));
                let payloads = match count {
                    None => vec![m.payload.clone()],
                    Some(count) => match batch::unpack(count.as_str(), &m.payload) {
                        Ok(payloads) => payloads,
                        Err(e) => {
                            // No delivery of it will be any better.
                            debug!(error = %e, subject = %m.subject, "Dropped a damaged batch of events.");
                            return (Vec::new(), Some(m));
                        }
                    },
                };
                counters.received.add(payloads.len() as u64);
                let local = payloads
                    .into_iter()
                    .map(|payload| ToLocal {
                        topic: topic.clone(),
                        payload,
                        retain: false,
                    })
                    .collect();
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

#[cfg(test)]
mod tests {
    use super::*;

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
