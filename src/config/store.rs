//! `[store]`: where the sidecar keeps what must survive a restart (retained
//! messages, persistent MQTT sessions and their queued messages, the resume
//! history, invocation records, TDs registered over HTTP), and how hard it
//! syncs (see [`crate::store`] and docs/operations.md's Durability).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// The data directory (created if missing; relative paths are from the
    /// working directory). One sidecar process at a time: a second one on
    /// the same directory refuses to start.
    pub dir: PathBuf,
    /// Keep nothing on disk: everything above is lost on restart.
    pub memory_only: bool,
    /// `every_batch`: nothing is acknowledged before it is on disk (each
    /// group commit is synced). `periodic`: commits are written at once but
    /// synced only every `sync_interval_ms`, so a crash can lose up to that
    /// long of acknowledged changes.
    pub sync: SyncMode,
    /// How often `periodic` syncs, in milliseconds; in either mode, how
    /// soon changes of lazy tables (nothing waits for them) are synced.
    pub sync_interval_ms: u64,
    /// Bytes of changes queued for the writer and not yet taken: past it,
    /// whatever writes (the broker, the gateway) waits for the disk, so that
    /// a flood of changes nobody awaits (retained QoS 0 messages, events for
    /// the history) cannot fill memory faster than the disk empties it.
    pub max_queued_bytes: u64,
    /// The store file's largest size, in bytes (0: no bound). Past it, new
    /// writes (retained messages, kept sessions and their queues, TDs) are
    /// refused, MQTT 5 clients get reason 0x97 and HTTP writes 507, until
    /// deletes make room; deletes and reads go on. The durability bench's
    /// 100 000 retained / 10 000 sessions / 1 000 000 queued is 272 MiB.
    pub max_file_bytes: u64,
    /// Free space the data directory's filesystem must keep, in bytes (0:
    /// none): below it, writes are refused as past `max_file_bytes`, and
    /// accepted again, without a restart, once twice this is free (so a
    /// full store does not flap between full and not).
    pub min_free_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncMode {
    EveryBatch,
    Periodic,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            dir: PathBuf::from("lmos-data"),
            memory_only: false,
            sync: SyncMode::EveryBatch,
            sync_interval_ms: 1_000,
            max_queued_bytes: 256 * 1024 * 1024,
            max_file_bytes: 8 * 1024 * 1024 * 1024,
            min_free_bytes: 64 * 1024 * 1024,
        }
    }
}
