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
}

#[derive(Debug, Default)]
struct Book {
    /// By the connection's socket, unique among open connections and
    /// released before it closes: a connection taking a client ID over
    /// counts apart from the one it replaces until that one ends, and a
    /// connection refused after admission cannot give back another's.
    by_socket: HashMap<RawFd, Held>,
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

    /// A CONNECT on `socket` by `owner` with a will of `bytes`: charged,
    /// or refused with the bound it would pass.
    pub fn charge(&self, socket: RawFd, owner: &str, bytes: u64) -> Result<(), Over> {
        let mut book = self.lock();
        if self.limit > 0 && book.total + bytes > self.limit {
            return Err(Over::Sidecar {
                key: "mqtt.max_will_bytes",
                limit: self.limit,
            });
        }
        let usage = book.by.get(owner).copied().unwrap_or(0);
        self.quotas
            .check(owner, Quota::WillBytes, usage, bytes)
            .map_err(Over::Quota)?;
        let owner = match book.by.get_key_value(owner) {
            Some((known, _)) => known.clone(),
            None => Arc::from(owner),
        };
        if book.remove(socket).is_none() {
            self.held.fetch_add(1, Ordering::Relaxed);
        }
        book.total += bytes;
        *book.by.entry(owner.clone()).or_insert(0) += bytes;
        book.by_socket.insert(socket, Held { owner, bytes });
        Ok(())
    }

    /// The connection on `socket` ended (or was refused after admission):
    /// its will is published or dropped.
    pub fn release(&self, socket: RawFd) {
        if self.held.load(Ordering::Relaxed) == 0 {
            return;
        }
        if self.lock().remove(socket).is_some() {
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
    fn remove(&mut self, socket: RawFd) -> Option<Held> {
        let held = self.by_socket.remove(&socket)?;
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
        b.charge(7, "bob", 60).unwrap();
        let e = b.charge(8, "bob", 60).unwrap_err();
        assert_eq!(e.key(), "quotas.will_bytes");
        b.charge(9, "alice", 60).unwrap();
        b.release(7);
        b.charge(8, "bob", 60).unwrap();
        assert_eq!(b.usage("bob"), (60, 120));
    }

    #[test]
    fn each_connection_counts_until_it_ends_whatever_its_client_id() {
        let b = book(150);
        b.charge(7, "bob", 60).unwrap();
        // The same client ID on another connection, refused later: its
        // release gives back its own will only.
        b.charge(8, "bob", 30).unwrap();
        b.release(8);
        assert_eq!(b.usage("bob"), (60, 60));
        let e = b.charge(9, "alice", 91).unwrap_err();
        assert_eq!(e.key(), "mqtt.max_will_bytes");
        b.release(7);
        b.release(7);
        assert_eq!(b.usage("bob"), (0, 0));
        assert_eq!(b.held.load(Ordering::Relaxed), 0);
    }
}
