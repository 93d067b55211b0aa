//! Echo suppression for the bridge. MQTT 3.1.1 has no "no local": a
//! message the bridge publishes comes back on its own subscription, on
//! either side. Each publication is remembered by a fingerprint of its
//! topic and payload until its echo arrives (or a while has passed), so
//! every message crosses once and never loops.
//!
//! A QoS 1 publication retransmitted after the link broke may echo twice.
//! Messages that never recur legitimately (events, action statuses,
//! requests and replies: each carries its own message ID) therefore leave a
//! tombstone after their first echo that swallows further copies for a
//! while; otherwise a retransmitted request would reach its agent twice.
//! Retained state (presence, readings, TDs) may legitimately repeat the same
//! bytes, e.g. an agent coming back online, so it leaves none.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Expected {
    /// Echoes still to come.
    count: u32,
    /// Swallow copies beyond `count` too.
    unique: bool,
    /// Last `remember`; the entry lives `ttl` from then.
    at: Instant,
}

#[derive(Debug)]
pub struct Echoes {
    expected: HashMap<u64, Expected>,
    /// Fingerprints in the order they were last expected, for expiry; an
    /// entry refreshed since is skipped when its old position comes up.
    order: VecDeque<(Instant, u64)>,
    ttl: Duration,
}

fn fingerprint(topic: &str, payload: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    topic.hash(&mut h);
    payload.hash(&mut h);
    h.finish()
}

impl Echoes {
    pub fn new(ttl: Duration) -> Echoes {
        Echoes {
            expected: HashMap::new(),
            order: VecDeque::new(),
            ttl,
        }
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&(at, key)) = self.order.front() {
            if now.duration_since(at) < self.ttl {
                break;
            }
            self.order.pop_front();
            if self.expected.get(&key).is_some_and(|e| e.at == at) {
                self.expected.remove(&key);
            }
        }
    }

    /// The bridge is about to publish this; its echo is to be ignored.
    /// `unique`: the message never legitimately recurs (see the module doc).
    pub fn remember(&mut self, topic: &str, payload: &[u8], unique: bool, now: Instant) {
        self.expire(now);
        let key = fingerprint(topic, payload);
        let entry = self.expected.entry(key).or_insert(Expected {
            count: 0,
            unique,
            at: now,
        });
        entry.count += 1;
        entry.unique |= unique;
        entry.at = now;
        self.order.push_back((now, key));
    }

    /// Whether this arrival is the echo of something the bridge published
    /// (and so must not cross again).
    pub fn is_echo(&mut self, topic: &str, payload: &[u8], now: Instant) -> bool {
        self.expire(now);
        let key = fingerprint(topic, payload);
        let Some(e) = self.expected.get_mut(&key) else {
            return false;
        };
        if e.count > 0 {
            e.count -= 1;
            if e.count == 0 && !e.unique {
                self.expected.remove(&key);
            }
            return true;
        }
        e.unique
    }

    pub fn len(&self) -> usize {
        self.expected.len()
    }

    pub fn is_empty(&self) -> bool {
        self.expected.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_publication_of_retained_state_swallows_exactly_one_echo() {
        let mut e = Echoes::new(Duration::from_secs(60));
        let now = Instant::now();
        e.remember("t", b"x", false, now);
        e.remember("t", b"x", false, now);
        assert!(e.is_echo("t", b"x", now));
        assert!(e.is_echo("t", b"x", now));
        assert!(!e.is_echo("t", b"x", now), "a third copy is a real message");
        assert!(!e.is_echo("u", b"x", now));
        assert!(e.is_empty());
    }

    #[test]
    fn a_unique_message_swallows_retransmitted_copies_until_it_expires() {
        let mut e = Echoes::new(Duration::from_secs(10));
        let now = Instant::now();
        e.remember("t", b"x", true, now);
        assert!(e.is_echo("t", b"x", now));
        assert!(
            e.is_echo("t", b"x", now + Duration::from_secs(5)),
            "a retransmission"
        );
        assert!(!e.is_echo("t", b"x", now + Duration::from_secs(11)));
        assert!(e.is_empty());
    }

    #[test]
    fn expectations_expire_in_order_and_refreshing_keeps_one_alive() {
        let mut e = Echoes::new(Duration::from_secs(1));
        let now = Instant::now();
        e.remember("t", b"x", false, now);
        e.remember("u", b"y", false, now);
        e.remember("u", b"y", false, now + Duration::from_millis(900));
        let later = now + Duration::from_millis(1500);
        assert!(!e.is_echo("t", b"x", later));
        assert!(e.is_echo("u", b"y", later), "refreshed at 900 ms");
        assert!(!e.is_echo("u", b"y", now + Duration::from_secs(3)));
        assert!(e.is_empty());
    }
}
