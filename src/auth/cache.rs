//! Credentials that passed a check, kept a short while: HTTP Basic sends
//! them with every request and MQTT clients reconnect with them, and each
//! Argon2 verification costs 19 MiB and tens of milliseconds.
//!
//! Entries are found by a keyed hash of the credentials (HMAC-SHA256 under
//! a key drawn at random when the [`super::Authority`] is made), so what
//! the cache holds cannot be turned back into a secret, not even by
//! trying a dictionary against a memory dump, and a new configuration
//! (a new Authority) starts with an empty cache.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use argon2::password_hash::rand_core::{OsRng, RngCore};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

pub(crate) type Key = [u8; 32];

/// HMAC-SHA256 (RFC 2104) under a random key; its two padded states are
/// hashed once and cloned per use.
pub(crate) struct Keyed {
    inner: Sha256,
    outer: Sha256,
}

impl Keyed {
    pub(crate) fn random() -> Keyed {
        let mut key = [0u8; 64];
        OsRng.fill_bytes(&mut key[..32]);
        let pad = |byte: u8| key.map(|k| k ^ byte);
        Keyed {
            inner: Sha256::new_with_prefix(pad(0x36)),
            outer: Sha256::new_with_prefix(pad(0x5c)),
        }
    }

    /// The MAC of `parts`, each length-prefixed so that no two different
    /// lists (`("ab", "c")` and `("a", "bc")`) can collide.
    pub(crate) fn digest(&self, parts: &[&[u8]]) -> Key {
        let mut inner = self.inner.clone();
        for part in parts {
            inner.update((part.len() as u64).to_be_bytes());
            inner.update(part);
        }
        let mut outer = self.outer.clone();
        outer.update(inner.finalize());
        outer.finalize().into()
    }
}

/// At most `capacity` values, each for `ttl` after it was put.
pub(crate) struct Cache<V> {
    ttl: Duration,
    capacity: usize,
    entries: Mutex<HashMap<Key, (V, Instant)>>,
}

impl<V: Clone> Cache<V> {
    pub(crate) fn new(ttl: Duration, capacity: usize) -> Cache<V> {
        Cache {
            ttl,
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn enabled(&self) -> bool {
        !self.ttl.is_zero() && self.capacity > 0
    }

    pub(crate) fn get(&self, key: &Key, now: Instant) -> Option<V> {
        if !self.enabled() {
            return None;
        }
        let mut entries = lock(&self.entries);
        match entries.get(key) {
            Some((value, expires)) if now < *expires => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Only credentials that passed are put, so an attacker cannot fill the
    /// cache; still, when full, the expired entries go first, then the one
    /// closest to expiry.
    #[cfg(test)]
    pub(crate) fn put(&self, key: Key, value: V, now: Instant) {
        self.put_until(key, value, now, None);
    }

    /// As [`Cache::put`], kept no later than `until` (a JWT's `exp`); an
    /// `until` already past keeps nothing.
    pub(crate) fn put_until(
        &self,
        key: Key,
        value: V,
        now: Instant,
        until: Option<std::time::SystemTime>,
    ) {
        let ttl = match until {
            None => self.ttl,
            Some(t) => match t.duration_since(std::time::SystemTime::now()) {
                Ok(left) => left.min(self.ttl),
                Err(_) => return,
            },
        };
        if !self.enabled() || ttl.is_zero() {
            return;
        }
        let mut entries = lock(&self.entries);
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (_, expires)| now < *expires);
            if entries.len() >= self.capacity {
                let first = entries.iter().min_by_key(|(_, (_, e))| *e).map(|(k, _)| *k);
                if let Some(k) = first {
                    entries.remove(&k);
                }
            }
        }
        entries.insert(key, (value, now + ttl));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.entries).len()
    }
}

/// A panic elsewhere cannot leave a map half-changed (every change is one
/// call), so a poisoned lock is taken as it is.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mac_is_keyed_and_separates_its_parts() {
        let (a, b) = (Keyed::random(), Keyed::random());
        assert_eq!(a.digest(&[b"x", b"y"]), a.digest(&[b"x", b"y"]));
        assert_ne!(a.digest(&[b"x", b"y"]), b.digest(&[b"x", b"y"]));
        assert_ne!(a.digest(&[b"ab", b"c"]), a.digest(&[b"a", b"bc"]));
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test case 2: key "Jefe", data "what do ya want for nothing?".
        let mut key = [0u8; 64];
        key[..4].copy_from_slice(b"Jefe");
        let keyed = Keyed {
            inner: Sha256::new_with_prefix(key.map(|k| k ^ 0x36)),
            outer: Sha256::new_with_prefix(key.map(|k| k ^ 0x5c)),
        };
        let mut inner = keyed.inner.clone();
        inner.update(b"what do ya want for nothing?");
        let mut outer = keyed.outer.clone();
        outer.update(inner.finalize());
        let hex: String = outer
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn entries_expire_and_the_cache_stays_bounded() {
        let cache = Cache::new(Duration::from_secs(10), 2);
        let t0 = Instant::now();
        cache.put([1; 32], "a", t0);
        assert_eq!(cache.get(&[1; 32], t0 + Duration::from_secs(9)), Some("a"));
        assert_eq!(cache.get(&[1; 32], t0 + Duration::from_secs(10)), None);
        cache.put([1; 32], "a", t0);
        cache.put([2; 32], "b", t0 + Duration::from_secs(1));
        cache.put([3; 32], "c", t0 + Duration::from_secs(2));
        assert_eq!(cache.len(), 2);
        // The one closest to expiry made room.
        assert_eq!(cache.get(&[1; 32], t0 + Duration::from_secs(2)), None);
        assert_eq!(cache.get(&[3; 32], t0 + Duration::from_secs(2)), Some("c"));
        let off = Cache::new(Duration::ZERO, 2);
        off.put([1; 32], "a", t0);
        assert_eq!(off.get(&[1; 32], t0), None);
    }
}
