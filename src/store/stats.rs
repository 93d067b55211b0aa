//! The store's figures: for the metrics endpoint, `/readyz` and
//! `/healthz`, and what wakes producers waiting for room.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::room;

/// Figures for the metrics endpoint.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Commits, synced or not (lazy changes: [`Store::lazy_table`]).
    pub commits: AtomicU64,
    /// Commits synced to disk.
    pub syncs: AtomicU64,
    /// Changes written (puts and deletes).
    pub changes: AtomicU64,
    /// Total microseconds spent in commits (with their sync).
    pub commit_micros: AtomicU64,
    /// The longest commit, in microseconds, since the last scrape.
    pub max_commit_micros: AtomicU64,
    /// Size of the store file, in bytes, after the last commit.
    pub file_bytes: AtomicU64,
    /// Bytes queued and not yet committed.
    pub queued_bytes: AtomicU64,
    /// Times a change waited for the writer to take what was queued
    /// (`store.max_queued_bytes` reached).
    pub waits: AtomicU64,
    /// What start-up found, by kind (retained, sessions, queued, history,
    /// invocations, tds).
    pub recovered: Mutex<std::collections::BTreeMap<&'static str, u64>>,
    /// 1 while puts are refused (`store.max_file_bytes`,
    /// `store.min_free_bytes`), else 0.
    pub full: AtomicU64,
    /// Puts refused for want of room, since start.
    pub refused: AtomicU64,
    /// Times the database was opened again after an I/O error.
    pub reopens: AtomicU64,
    /// Acknowledgements (MQTT PUBACK, PUBREC, SUBACK chunks) refused
    /// because what they covered was not written.
    pub refused_acks: AtomicU64,
    /// Why puts are refused, while they are.
    full_reason: Mutex<Option<&'static str>>,
    /// Why the store stopped for good, if it did.
    stopped: Mutex<Option<String>>,
    /// Wakes what waits for room in the writer's queue.
    pub(super) room: room::Room,
}

impl StoreStats {
    /// While puts are refused: why (for `/readyz`).
    pub fn full_reason(&self) -> Option<&'static str> {
        *self.full_reason.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why the store stopped for good (for `/healthz`).
    pub fn stopped(&self) -> Option<String> {
        self.stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(super) fn set_full(&self, reason: Option<&'static str>) {
        self.full.store(reason.is_some() as u64, Ordering::Relaxed);
        *self.full_reason.lock().unwrap_or_else(|e| e.into_inner()) = reason;
    }

    pub(super) fn set_stopped(&self, why: &str) {
        *self.stopped.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.to_owned());
        self.room.wake();
    }

    /// The writer took `bytes` off the queue.
    pub(super) fn taken(&self, bytes: u64) {
        self.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.room.wake();
    }
}
