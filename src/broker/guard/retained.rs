//! What retained messages each principal makes the broker keep (issue 43):
//! topic → owner and bytes, for all the guard's connections, with the
//! per-principal quotas (`quotas.retained`, `quotas.retained_bytes`) and the
//! sidecar-wide caps (`mqtt.max_retained`, `mqtt.max_retained_bytes`).
//!
//! The guard charges a retained PUBLISH before the broker gets it, the check
//! and the charge under one lock, so two connections cannot both take the
//! last slot. A publication replacing another principal's message on the
//! same topic charges the new owner and credits the old; an empty payload
//! deletes and credits. The broker's keeper ([`crate::broker::kept`]) tells
//! the book what the guard cannot see (a message expired, one set by the
//! sidecar's own links) and writes each message's owner next to it, so that
//! a restart counts again what was kept. No I/O here.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::quotas::{Quota, Quotas};

/// The sidecar-wide caps; 0: none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetainedLimits {
    pub count: u64,
    pub bytes: u64,
}

/// Why a retained message is refused: the key whose bound it would pass,
/// for the Reason String, the metric and the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Over {
    /// `mqtt.max_retained`, `mqtt.max_retained_bytes`, `mqtt.max_will_bytes`.
    Sidecar { key: &'static str, limit: u64 },
    /// A principal's quota (its own or the default).
    Quota(crate::quotas::Exceeded),
}

impl Over {
    /// The configuration key, as the client's Reason String names it.
    pub fn key(&self) -> String {
        match self {
            Over::Sidecar { key, .. } => (*key).to_owned(),
            Over::Quota(e) => e.key(),
        }
    }

    /// The `limit` label of `lmos_sidecar_limit_hits_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Over::Sidecar { key, .. } => key.strip_prefix("mqtt.").unwrap_or(key),
            Over::Quota(e) => e.quota.label(),
        }
    }

    pub fn reason_string(&self) -> String {
        match self {
            Over::Sidecar { key, limit } => {
                format!("the sidecar holds no more of these ({key} = {limit}); try again later")
            }
            Over::Quota(e) => e.to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Usage {
    count: u64,
    bytes: u64,
}

#[derive(Debug)]
struct Entry {
    /// `None`: set by the sidecar itself, or kept before messages had
    /// owners: counted in the sidecar-wide totals only.
    owner: Option<Arc<str>>,
    bytes: u64,
}

#[derive(Debug, Default)]
struct Book {
    /// By the topic's hash under this process's random keys: a topic's
    /// accounts take no copy of its name (the durability bench keeps
    /// 100 000 retained messages), and no one can aim at a collision.
    topics: HashMap<u64, Entry>,
    by: HashMap<Arc<str>, Usage>,
    total: Usage,
}

/// The retained messages' accounts, shared by the guards and the keeper.
#[derive(Debug)]
pub struct RetainedBook {
    book: Mutex<Book>,
    keys: RandomState,
    quotas: Arc<Quotas>,
    limits: RetainedLimits,
}

/// A retained message's bytes as counted: topic, properties and payload.
pub fn size(topic: &str, properties: &[u8], payload: &[u8]) -> u64 {
    (topic.len() + properties.len() + payload.len()) as u64
}

impl RetainedBook {
    pub fn new(quotas: Arc<Quotas>, limits: RetainedLimits) -> Arc<RetainedBook> {
        Arc::new(RetainedBook {
            book: Mutex::default(),
            keys: RandomState::new(),
            quotas,
            limits,
        })
    }

    /// No bounds (tests, tools).
    pub fn unbounded() -> Arc<RetainedBook> {
        RetainedBook::new(Quotas::none(), RetainedLimits::default())
    }

    fn lock(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn key(&self, topic: &str) -> u64 {
        self.keys.hash_one(topic)
    }

    /// A retained PUBLISH of `bytes` on `topic` by `owner` (`None`: the
    /// sidecar's own, never refused): charged, or refused with the bound it
    /// would pass. Only what grows is checked: a message replacing a larger
    /// one always passes.
    pub fn charge(&self, owner: Option<&str>, topic: &str, bytes: u64) -> Result<(), Over> {
        let topic = self.key(topic);
        let mut book = self.lock();
        let old = book.topics.get(&topic).map(|e| (e.owner.clone(), e.bytes));
        let (old_owner, old_bytes) = match &old {
            Some((o, b)) => (o.as_deref(), *b),
            None => (None, 0),
        };
        if let Some(owner) = owner {
            let total = Usage {
                count: book.total.count + u64::from(old.is_none()),
                bytes: book.total.bytes - old_bytes + bytes,
            };
            self.check_sidecar(book.total, total)?;
            let now = book.by.get(owner).copied().unwrap_or_default();
            let mut then = now;
            if old_owner == Some(owner) {
                then.bytes = then.bytes - old_bytes + bytes;
            } else {
                then.count += 1;
                then.bytes += bytes;
            }
            self.check_quota(owner, now, then)?;
        }
        let owner = owner.map(|o| match book.by.get_key_value(o) {
            Some((known, _)) => known.clone(),
            None => Arc::from(o),
        });
        book.remove(topic);
        book.insert(topic, owner, bytes);
        Ok(())
    }

    fn check_sidecar(&self, now: Usage, then: Usage) -> Result<(), Over> {
        let RetainedLimits { count, bytes } = self.limits;
        if count > 0 && then.count > count && then.count > now.count {
            return Err(Over::Sidecar {
                key: "mqtt.max_retained",
                limit: count,
            });
        }
        if bytes > 0 && then.bytes > bytes && then.bytes > now.bytes {
            return Err(Over::Sidecar {
                key: "mqtt.max_retained_bytes",
                limit: bytes,
            });
        }
        Ok(())
    }

    fn check_quota(&self, owner: &str, now: Usage, then: Usage) -> Result<(), Over> {
        let grows = |quota, now: u64, then: u64| match then > now {
            true => self.quotas.check(owner, quota, now, then - now),
            false => Ok(()),
        };
        grows(Quota::Retained, now.count, then.count).map_err(Over::Quota)?;
        grows(Quota::RetainedBytes, now.bytes, then.bytes).map_err(Over::Quota)
    }

    /// The retained message on `topic` is gone (an empty payload, expiry):
    /// its owner credited.
    pub fn remove(&self, topic: &str) {
        let topic = self.key(topic);
        self.lock().remove(topic);
    }

    /// The broker set a retained message of `bytes` on `topic`: its owner,
    /// for the keeper to write beside it. One the guard did not charge
    /// (the sidecar's own links) is counted in the sidecar-wide totals as
    /// nobody's. One lock, on the router's thread.
    pub fn observed(&self, topic: &str, bytes: u64) -> Option<Arc<str>> {
        let topic = self.key(topic);
        let mut book = self.lock();
        match book.topics.get(&topic) {
            Some(entry) => entry.owner.clone(),
            None => {
                book.insert(topic, None, bytes);
                None
            }
        }
    }

    /// A retained message kept by an earlier run, counted again at start.
    pub fn restore(&self, topic: &str, owner: Option<&str>, bytes: u64) {
        let topic = self.key(topic);
        let mut book = self.lock();
        let owner = owner.map(|o| match book.by.get_key_value(o) {
            Some((known, _)) => known.clone(),
            None => Arc::from(o),
        });
        book.remove(topic);
        book.insert(topic, owner, bytes);
    }

    /// Who owns the retained message on `topic`.
    pub fn owner(&self, topic: &str) -> Option<Arc<str>> {
        let topic = self.key(topic);
        self.lock().topics.get(&topic)?.owner.clone()
    }

    /// A principal's retained messages and their bytes.
    pub fn usage(&self, principal: &str) -> (u64, u64) {
        let u = self.lock().by.get(principal).copied().unwrap_or_default();
        (u.count, u.bytes)
    }

    /// All retained messages and their bytes.
    pub fn total(&self) -> (u64, u64) {
        let t = self.lock().total;
        (t.count, t.bytes)
    }
}

impl Book {
    fn remove(&mut self, topic: u64) {
        let Some(old) = self.topics.remove(&topic) else {
            return;
        };
        self.total.count -= 1;
        self.total.bytes -= old.bytes;
        let Some(owner) = old.owner else { return };
        if let Some(u) = self.by.get_mut(&owner) {
            u.count = u.count.saturating_sub(1);
            u.bytes = u.bytes.saturating_sub(old.bytes);
            if u.count == 0 {
                self.by.remove(&owner);
            }
        }
    }

    fn insert(&mut self, topic: u64, owner: Option<Arc<str>>, bytes: u64) {
        self.total.count += 1;
        self.total.bytes += bytes;
        if let Some(owner) = &owner {
            let u = self.by.entry(owner.clone()).or_default();
            u.count += 1;
            u.bytes += bytes;
        }
        self.topics.insert(topic, Entry { owner, bytes });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{QuotaOverrides, QuotasConfig};

    fn book(count: u64, bytes: u64) -> Arc<RetainedBook> {
        let mut config = QuotasConfig {
            retained: 2,
            retained_bytes: 100,
            ..QuotasConfig::default()
        };
        config.principals.insert(
            "carol".into(),
            QuotaOverrides {
                retained: Some(0),
                retained_bytes: Some(0),
                ..QuotaOverrides::default()
            },
        );
        RetainedBook::new(Quotas::new(&config, true), RetainedLimits { count, bytes })
    }

    #[test]
    fn a_principal_at_its_count_is_refused_and_others_are_not() {
        let b = book(0, 0);
        b.charge(Some("bob"), "a", 10).unwrap();
        b.charge(Some("bob"), "b", 10).unwrap();
        let e = b.charge(Some("bob"), "c", 10).unwrap_err();
        assert_eq!(e.key(), "quotas.retained");
        // Replacing its own message takes no slot.
        b.charge(Some("bob"), "a", 20).unwrap();
        b.charge(Some("alice"), "c", 10).unwrap();
        assert_eq!(b.usage("bob"), (2, 30));
        assert_eq!(b.total(), (3, 40));
    }

    #[test]
    fn bytes_are_checked_and_a_smaller_replacement_always_passes() {
        let b = book(0, 0);
        b.charge(Some("bob"), "a", 90).unwrap();
        let e = b.charge(Some("bob"), "b", 11).unwrap_err();
        assert_eq!(e.key(), "quotas.retained_bytes");
        b.charge(Some("bob"), "a", 80).unwrap();
        b.charge(Some("bob"), "b", 20).unwrap();
        assert_eq!(b.usage("bob"), (2, 100));
    }

    #[test]
    fn replacing_anothers_message_moves_the_charge_and_deleting_credits() {
        let b = book(0, 0);
        b.charge(Some("bob"), "a", 50).unwrap();
        b.charge(Some("alice"), "a", 30).unwrap();
        assert_eq!((b.usage("bob"), b.usage("alice")), ((0, 0), (1, 30)));
        assert_eq!(b.owner("a").as_deref(), Some("alice"));
        assert_eq!(b.observed("a", 30).as_deref(), Some("alice"));
        b.remove("a");
        assert_eq!((b.usage("alice"), b.total()), ((0, 0), (0, 0)));
        assert!(b.lock().by.is_empty());
    }

    #[test]
    fn sidecar_wide_caps_count_every_owner_and_none() {
        let b = book(3, 1_000);
        assert_eq!(b.observed("own", 10), None);
        b.restore("old", None, 10);
        b.charge(Some("carol"), "x", 10).unwrap();
        let e = b.charge(Some("carol"), "y", 10).unwrap_err();
        assert_eq!(e.key(), "mqtt.max_retained");
        assert_eq!(e.label(), "max_retained");
        // The sidecar's own are never refused.
        b.charge(None, "y", 2_000).unwrap();
        let e = b.charge(Some("carol"), "x", 20).unwrap_err();
        assert_eq!(e.key(), "mqtt.max_retained_bytes");
        assert_eq!(b.total(), (4, 2_030));
    }

    #[test]
    fn restored_owners_are_at_their_bound() {
        let b = book(0, 0);
        b.restore("a", Some("bob"), 10);
        b.restore("b", Some("bob"), 10);
        assert!(b.charge(Some("bob"), "c", 1).is_err());
        assert_eq!(b.owner("a").as_deref(), Some("bob"));
    }
}
