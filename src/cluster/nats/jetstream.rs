//! Events through a JetStream stream, decided without I/O: names, message
//! IDs for the stream's deduplication, and which deliveries are news.
//!
//! - One stream per prefix, `{P}-events` ([`super::kv::name`] of the prefix),
//!   on `{p}.*.events.>` (an event topic `{prefix}/{thing}/events/{name}`
//!   maps to `{p}.{thing}.events.{name}`, see [`super::subjects`]), with
//!   `cluster.jetstream_replicas` replicas.
//! - A sidecar publishes its events with a `Nats-Msg-Id` of its own
//!   ([`Outbox`]) and an [`ORIGIN`] header, many at a time, each repeated
//!   until the stream acknowledges it: a repeat of a stored event is
//!   dropped by the stream (its duplicate window), so a repeat after a lost
//!   acknowledgement stores nothing twice.
//! - Each sidecar reads the stream through a durable consumer of its own,
//!   skips its own events (by [`ORIGIN`]) and acknowledges an event once it
//!   is in its embedded broker. A delivery whose acknowledgement was lost
//!   comes again; [`Seen`] drops a stream sequence already handed over, so
//!   consumers see each event once.
//! - Each sidecar also subscribes to the events' subjects in core NATS: a
//!   publication reaches it there as the stream stores it, without waiting
//!   for the stream's replication, acknowledgement and consumer (that wait
//!   was most of the crossing's tail). Whichever copy comes first is handed
//!   over, the other dropped by its `Nats-Msg-Id` ([`Crossed`]); the
//!   stream's copy still comes for every event, so one lost live (a node
//!   died, the link was away) is handed over from the stream.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use super::kv::name;
use crate::topics::Topics;

/// Header naming the sidecar that published an event.
pub const ORIGIN: &str = "Lmos-Origin";

/// JetStream's header of a message's ID, for the stream's deduplication.
pub const MSG_ID: &str = "Nats-Msg-Id";

/// Stream sequences [`Seen`] remembers at most.
pub const SEEN_LIMIT: usize = 100_000;

/// The event stream's name for `topics`' prefix.
pub fn stream_name(topics: &Topics) -> String {
    format!("{}-events", name(topics.prefix()))
}

/// The subjects the event stream takes.
pub fn stream_subject(topics: &Topics) -> String {
    format!("{}.*.events.>", super::subjects::subject(topics.prefix()))
}

/// The durable consumer of the sidecar whose connection is `connection`.
pub fn consumer_name(connection: &str) -> String {
    name(connection)
}

/// A count the metrics read.
#[derive(Debug, Default)]
pub struct Count(AtomicU64);

impl Count {
    pub fn inc(&self) {
        self.add(1);
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What crossed through JetStream and what waited, for the metrics.
#[derive(Debug, Default)]
pub struct JetStreamCounters {
    /// Events handed to JetStream (first attempts).
    pub published: Count,
    /// Stream messages those went in (first attempts; several events
    /// may share one, [`super::batch`]).
    pub messages: Count,
    /// Events the stream acknowledged.
    pub acked: Count,
    /// Publications repeated for want of an acknowledgement.
    pub republished: Count,
    /// Events from the stream handed to the embedded broker (those that
    /// did not come live first).
    pub received: Count,
    /// Events handed to the embedded broker as NATS delivered their
    /// publication, before the stream's copy came.
    pub live: Count,
    /// Deliveries the consumer made more than once.
    pub redelivered: Count,
    /// Deliveries dropped as already handed over ([`Seen`]).
    pub duplicates: Count,
    /// Bucket entries written or deleted.
    pub kv_writes: Count,
    /// Bucket writes that failed (and are tried again).
    pub kv_errors: Count,
    /// Remote presence found stale and turned offline.
    pub stale_presence: Count,
    /// 1 once the link fell back to core NATS for want of JetStream on
    /// the servers.
    pub core_fallback: Count,
}

impl JetStreamCounters {
    /// Published and not yet acknowledged.
    pub fn pending(&self) -> u64 {
        self.published.get().saturating_sub(self.acked.get())
    }

    /// Every count by its name in the metrics.
    pub fn values(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("published", self.published.get()),
            ("messages", self.messages.get()),
            ("acked", self.acked.get()),
            ("pending", self.pending()),
            ("republished", self.republished.get()),
            ("received", self.received.get()),
            ("live", self.live.get()),
            ("redelivered", self.redelivered.get()),
            ("duplicates", self.duplicates.get()),
            ("kv_writes", self.kv_writes.get()),
            ("kv_errors", self.kv_errors.get()),
            ("stale_presence", self.stale_presence.get()),
            ("core_fallback", self.core_fallback.get()),
        ]
    }
}

/// Message IDs for one sidecar's publications: unique per process run
/// (`origin` is the connection's unique inbox token), counted.
#[derive(Debug)]
pub struct Outbox {
    origin: String,
    next: u64,
}

impl Outbox {
    pub fn new(origin: String) -> Outbox {
        Outbox { origin, next: 0 }
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The next message's `Nats-Msg-Id`.
    pub fn next_id(&mut self) -> String {
        self.next += 1;
        format!("{}-{}", self.origin, self.next)
    }
}

/// Stream sequences already handed to the embedded broker (the last
/// [`SEEN_LIMIT`]; below those, everything counts as seen).
#[derive(Debug, Default)]
pub struct Seen {
    recent: BTreeSet<u64>,
    /// Every sequence up to this one is taken as seen.
    floor: u64,
}

impl Seen {
    /// Whether `sequence` is news; remembers it.
    pub fn first(&mut self, sequence: u64) -> bool {
        if sequence <= self.floor || !self.recent.insert(sequence) {
            return false;
        }
        while self.recent.len() > SEEN_LIMIT {
            if let Some(oldest) = self.recent.pop_first() {
                self.floor = oldest;
            }
        }
        true
    }
}

/// Stream messages (by their `Nats-Msg-Id`) already handed over, from
/// either way an event comes: live, as NATS delivers the publication to
/// every subscriber of its subject, or from the stream through this
/// sidecar's consumer. Whichever comes first is handed over; the other is
/// dropped. The last [`SEEN_LIMIT`] are remembered, as 64-bit keyed hashes
/// (SipHash with this process's random keys): two IDs among them sharing
/// one is a chance of about 1 in 10^9, for a lost event.
#[derive(Debug)]
pub struct Crossed {
    hasher: std::hash::RandomState,
    recent: HashSet<u64>,
    order: VecDeque<u64>,
}

impl Default for Crossed {
    fn default() -> Crossed {
        Crossed {
            hasher: std::hash::RandomState::new(),
            recent: HashSet::new(),
            order: VecDeque::new(),
        }
    }
}

impl Crossed {
    /// Whether the message `id` is news; remembers it.
    pub fn first(&mut self, id: &str) -> bool {
        let key = self.hasher.hash_one(id);
        if !self.recent.insert(key) {
            return false;
        }
        self.order.push_back(key);
        if self.order.len() > SEEN_LIMIT {
            if let Some(oldest) = self.order.pop_front() {
                self.recent.remove(&oldest);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_news_once_whichever_way_it_comes_first() {
        let mut c = Crossed::default();
        assert!(c.first("a-1"));
        assert!(!c.first("a-1"), "the stream's copy of a live message");
        assert!(c.first("b-1"), "another sidecar's first message");
        for n in 0..SEEN_LIMIT {
            assert!(c.first(&format!("x-{n}")));
        }
        assert!(c.first("a-1"), "forgotten past the window");
        assert!(!c.first(&format!("x-{}", SEEN_LIMIT - 1)));
    }

    #[test]
    fn names_and_subjects_follow_the_prefix() {
        let t = Topics::new("acme/lmos").unwrap();
        assert_eq!(stream_name(&t), "acme_2Flmos-events");
        assert_eq!(stream_subject(&t), "acme.lmos.*.events.>");
        assert_eq!(consumer_name("lmos-bridge-urn:x"), "lmos-bridge-urn_3Ax");
        let mut o = Outbox::new("abc".into());
        assert_eq!((o.next_id(), o.next_id()), ("abc-1".into(), "abc-2".into()));
    }

    #[test]
    fn a_redelivery_is_no_news() {
        let mut s = Seen::default();
        assert!(s.first(2));
        assert!(s.first(1), "out of order is news");
        assert!(!s.first(2));
        for n in 3..(SEEN_LIMIT as u64 + 10) {
            assert!(s.first(n));
        }
        assert!(!s.first(5), "below the window counts as seen");
    }
}
