//! The bytes of last wills the broker holds (in memory and in the store's
//! `mqtt_wills`) for open connections, per principal (`quotas.will_bytes`)
//! and in all (`mqtt.max_will_bytes`), checked and charged at CONNECT
//! under one lock, credited when the connection ends (its will then
//! published or dropped). No I/O here.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::retained::Over;
use crate::quotas::{Quota, Quotas};

#[derive(Debug)]
struct Held {
    owner: Arc<str>,
    bytes: u64,
    /// The connection's socket: a connection taking the client ID over
    /// holds another, so the one it replaced cannot credit its will.
    socket: RawFd,
}

#[derive(Debug, Default)]
struct Book {
    by_client: HashMap<Box<str>, Held>,
    by: HashMap<Arc<str>, u64>,
    total: u64,
}

/// The wills' accounts, shared by a guard's connections.
#[derive(Debug)]
pub struct WillBook {
    book: Mutex<Book>,
    /// Wills held: a connection without one that ends takes no lock.
    held: AtomicUsize,
    quotas: Arc<Quotas>,
    /// `mqtt.max_will_bytes`; 0: none.
    limit: u64,
}

impl WillBook {
    pub fn new(quotas: Arc<Quotas>, limit: u64) -> Arc<WillBook> {
        Arc::new(WillBook {
            book: Mutex::default(),
            held: AtomicUsize::new(0),
            quotas,
            limit,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A CONNECT of `client_id` on `socket` by `owner` with a will of
    /// `bytes`: charged, or refused with the bound it would pass. A will
    /// the client ID's earlier connection held is replaced (the broker
    /// publishes or drops it at the takeover).
    pub fn charge(
        &self,
        client_id: &str,
        socket: RawFd,
        owner: &str,
        bytes: u64,
    ) -> Result<(), Over> {
        let mut book = self.lock();
        let (old_owner, old_bytes) = match book.by_client.get(client_id) {
            Some(h) => (Some(h.owner.clone()), h.bytes),
            None => (None, 0),
        };
        let total = book.total - old_bytes + bytes;
        if self.limit > 0 && total > self.limit {
            return Err(Over::Sidecar {
                key: "mqtt.max_will_bytes",
                limit: self.limit,
            });
        }
        let mut usage = book.by.get(owner).copied().unwrap_or(0);
        if old_owner.as_deref() == Some(owner) {
            usage -= old_bytes;
        }
        self.quotas
            .check(owner, Quota::WillBytes, usage, bytes)
            .map_err(Over::Quota)?;
        let owner = match book.by.get_key_value(owner) {
            Some((known, _)) => known.clone(),
            None => Arc::from(owner),
        };
        if book.remove(client_id).is_none() {
            self.held.fetch_add(1, Ordering::Relaxed);
        }
        book.total += bytes;
        *book.by.entry(owner.clone()).or_insert(0) += bytes;
        let held = Held {
            owner,
            bytes,
            socket,
        };
        book.by_client.insert(client_id.into(), held);
        Ok(())
    }

    /// The connection of `client_id` on `socket` ended: its will is
    /// published or dropped.
    pub fn release(&self, client_id: &str, socket: RawFd) {
        if self.held.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut book = self.lock();
        if book.by_client.get(client_id).map(|h| h.socket) == Some(socket)
            && book.remove(client_id).is_some()
        {
            self.held.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A principal's will bytes, and all of them.
    pub fn usage(&self, principal: &str) -> (u64, u64) {
        let book = self.lock();
        (book.by.get(principal).copied().unwrap_or(0), book.total)
    }
}

impl Book {
    fn remove(&mut self, client_id: &str) -> Option<Held> {
        let held = self.by_client.remove(client_id)?;
        self.total -= held.bytes;
        if let Some(b) = self.by.get_mut(&held.owner) {
            *b = b.saturating_sub(held.bytes);
            if *b == 0 {
                self.by.remove(&held.owner);
            }
        }
        Some(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::QuotasConfig;

    fn book(limit: u64) -> Arc<WillBook> {
        let config = QuotasConfig {
            will_bytes: 100,
            ..QuotasConfig::default()
        };
        WillBook::new(Quotas::new(&config, true), limit)
    }

    #[test]
    fn a_principal_past_its_will_bytes_is_refused_until_one_ends() {
        let b = book(0);
        b.charge("c1", 7, "bob", 60).unwrap();
        let e = b.charge("c2", 8, "bob", 60).unwrap_err();
        assert_eq!(e.key(), "quotas.will_bytes");
        b.charge("c3", 9, "alice", 60).unwrap();
        b.release("c1", 7);
        b.charge("c2", 8, "bob", 60).unwrap();
        assert_eq!(b.usage("bob"), (60, 120));
    }

    #[test]
    fn a_takeover_replaces_the_will_and_the_old_connection_credits_nothing() {
        let b = book(150);
        b.charge("c", 7, "bob", 90).unwrap();
        b.charge("c", 8, "bob", 90).unwrap();
        b.release("c", 7);
        assert_eq!(b.usage("bob"), (90, 90));
        let e = b.charge("d", 9, "alice", 90).unwrap_err();
        assert_eq!(e.key(), "mqtt.max_will_bytes");
        b.release("c", 8);
        assert_eq!(b.usage("bob"), (0, 0));
        assert_eq!(b.held.load(Ordering::Relaxed), 0);
    }
}
