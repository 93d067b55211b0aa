//! Echo suppression for the bridge. MQTT 3.1.1 has no "no local": a
//! message the bridge publishes comes back on its own subscription, on
//! either side. Each publication is remembered by a fingerprint of its
//! topic and payload until its echo arrives (or a while has passed), so
//! every message crosses once and never loops. LMOS messages carry unique
//! message IDs, so two different messages share a fingerprint only by
//! hash collision.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Echoes {
    expected: HashMap<u64, (u32, Instant)>,
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
            ttl,
        }
    }

    /// The bridge is about to publish this; its echo is to be ignored.
    pub fn expect(&mut self, topic: &str, payload: &[u8], now: Instant) {
        let entry = self
            .expected
            .entry(fingerprint(topic, payload))
            .or_insert((0, now));
        entry.0 += 1;
        entry.1 = now;
        if self.expected.len() > 4096 {
            let ttl = self.ttl;
            self.expected
                .retain(|_, (_, at)| now.duration_since(*at) < ttl);
        }
    }

    /// Whether this arrival is the echo of something the bridge published
    /// (and so must not cross again).
    pub fn is_echo(&mut self, topic: &str, payload: &[u8], now: Instant) -> bool {
        let key = fingerprint(topic, payload);
        match self.expected.get_mut(&key) {
            Some((count, at)) if now.duration_since(*at) < self.ttl => {
                *count -= 1;
                if *count == 0 {
                    self.expected.remove(&key);
                }
                true
            }
            Some(_) => {
                self.expected.remove(&key);
                false
            }
            None => false,
        }
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
    fn each_publication_swallows_exactly_one_echo() {
        let mut e = Echoes::new(Duration::from_secs(60));
        let now = Instant::now();
        e.expect("t", b"x", now);
        e.expect("t", b"x", now);
        assert!(e.is_echo("t", b"x", now));
        assert!(e.is_echo("t", b"x", now));
        assert!(!e.is_echo("t", b"x", now), "a third copy is a real message");
        assert!(!e.is_echo("u", b"x", now));
        assert!(e.is_empty());
    }

    #[test]
    fn expectations_expire() {
        let mut e = Echoes::new(Duration::from_secs(1));
        let now = Instant::now();
        e.expect("t", b"x", now);
        assert!(!e.is_echo("t", b"x", now + Duration::from_secs(2)));
        assert!(e.is_empty());
    }
}
