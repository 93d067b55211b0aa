//! The embedded store: what must survive a restart, in one redb file in the
//! data directory (`[store]`), written by one thread that commits whatever
//! has queued up as one transaction (group commit), so that many
//! publishers waiting for "on disk" share one sync.
//!
//! Callers never block: [`Table::put`] and [`Table::delete`] queue the
//! change and return a [`Ticket`], which resolves once the change (and
//! everything queued before it) is durable. What waits for it is what
//! acknowledges: a PUBACK, a 201. `Store::memory()` keeps nothing and its
//! tickets are resolved at once.
//!
//! Why redb: measured against fjall and SQLite (WAL) on this workload
//! (small records, group commits, a delete for each insert;
//! benches/store-engines, summed up in docs/benchmarks.md "The store"): it
//! stays small under churn (0.4 MiB for a 1 000-record queue, where fjall
//! keeps a 64 MiB journal), reopens in milliseconds, refuses a second
//! process, reports damage as an error, and is pure Rust. fjall is faster
//! per commit, but lost a third of its records silently on a damaged
//! journal; SQLite lets two processes share a file.

mod bounds;
mod failures;
mod room;
mod stats;
mod ticket;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::watch;

pub use crate::config::{StoreConfig, SyncMode};
use failures::Failures;
pub use stats::StoreStats;
pub use ticket::{Settled, Ticket};
use writer::{Op, Writer};

/// The database, shared by the writer and the readers (start-up's scans);
/// empty while the writer opens it again after an I/O error.
type DbSlot = Arc<Mutex<Option<Arc<redb::Database>>>>;

/// The file in the data directory.
pub const FILE_NAME: &str = "store.redb";

/// Why the store cannot start or has stopped writing. Start-up errors name
/// the path and the reason; the sidecar refuses to start rather than run
/// silently empty.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("the data directory {path} cannot be used: {reason}")]
    Directory { path: PathBuf, reason: String },
    #[error("the store {path} is in use by another process (one sidecar per data directory; set store.dir to another directory)")]
    Locked { path: PathBuf },
    #[error(
        "the store {path} is damaged: {reason} (move it away to start empty, or restore a backup)"
    )]
    Corrupt { path: PathBuf, reason: String },
    #[error("the store {path} cannot be opened: {reason}")]
    Open { path: PathBuf, reason: String },
    #[error("the store could not write: {0}")]
    Write(String),
    /// `store.max_file_bytes` or `store.min_free_bytes` reached: puts are
    /// refused until there is room again (deletes still go through).
    #[error("the store is full ({reason}): writes are refused until space returns")]
    Full { reason: String },
    #[error("the store has stopped")]
    Stopped,
}

/// What the writer decided: changes up to `seq` are durable, except those
/// in `failures`; once `stopped`, nothing more will be.
#[derive(Debug, Clone, Default)]
struct Committed {
    seq: u64,
    failures: Failures,
    stopped: Option<StoreError>,
}

/// Handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Option<Arc<Inner>>,
    /// A scoped handle's ([`Store::scoped`]): the last ticket taken through
    /// it or its tables.
    scope: Option<Arc<AtomicU64>>,
}

struct Inner {
    db: DbSlot,
    path: PathBuf,
    /// Sequence numbers and the channel under one lock, so that the writer
    /// sees changes in ticket order and "committed up to n" is exact.
    queue: Mutex<Queue>,
    committed: watch::Receiver<Committed>,
    stats: Arc<StoreStats>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// `store.max_queued_bytes`.
    max_queued_bytes: u64,
}

struct Queue {
    next: u64,
    tx: Option<std::sync::mpsc::Sender<Op>>,
}

impl Store {
    /// Keeps nothing; every ticket is resolved at once.
    pub fn memory() -> Store {
        Store {
            inner: None,
            scope: None,
        }
    }

    /// Opens (or creates) the store of `config`, or a memory-only one.
    pub fn open(config: &StoreConfig) -> Result<Store, StoreError> {
        if config.memory_only {
            return Ok(Store::memory());
        }
        let dir = &config.dir;
        prepare_directory(dir)?;
        let path = dir.join(FILE_NAME);
        let opened = Arc::new(open_database(&path)?);
        let db: DbSlot = Arc::new(Mutex::new(Some(opened.clone())));
        let stats = Arc::new(StoreStats::default());
        stats.file_bytes.store(file_len(&path), Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::channel();
        let (committed_tx, committed) = watch::channel(Committed::default());
        let interval = Duration::from_millis(config.sync_interval_ms.max(1));
        let bounds = bounds::Bounds::new(
            path.clone(),
            dir.clone(),
            config.max_file_bytes,
            config.min_free_bytes,
            interval,
        );
        let writer = Writer::new(
            opened,
            db.clone(),
            path.clone(),
            committed_tx,
            stats.clone(),
            config.sync,
            interval,
            bounds,
        );
        let handle = std::thread::Builder::new()
            .name("lmos-store".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| StoreError::Open {
                path: path.clone(),
                reason: format!("cannot start its writer thread: {e}"),
            })?;
        Ok(Store {
            scope: None,
            inner: Some(Arc::new(Inner {
                db,
                path,
                queue: Mutex::new(Queue {
                    next: 0,
                    tx: Some(tx),
                }),
                committed,
                stats,
                writer: Mutex::new(Some(handle)),
                max_queued_bytes: config.max_queued_bytes.max(1),
            })),
        })
    }

    pub fn is_durable(&self) -> bool {
        self.inner.is_some()
    }

    /// The store file, when there is one.
    pub fn path(&self) -> Option<&Path> {
        self.inner.as_deref().map(|i| i.path.as_path())
    }

    /// For the log: the file, or that nothing is kept.
    pub fn describe(&self) -> String {
        match self.path() {
            Some(path) => path.display().to_string(),
            None => "memory only".to_owned(),
        }
    }

    /// An acknowledgement was refused for a change that failed (counted
    /// for the metrics).
    pub fn note_refused_acknowledgement(&self) {
        if let Some(inner) = &self.inner {
            inner.stats.refused_acks.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts what start-up recovered of `what`, for the metrics.
    pub fn note_recovered(&self, what: &'static str, count: u64) {
        if let Some(inner) = &self.inner {
            let mut recovered = inner
                .stats
                .recovered
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            *recovered.entry(what).or_default() += count;
        }
    }

    pub fn stats(&self) -> Option<&Arc<StoreStats>> {
        self.inner.as_deref().map(|i| &i.stats)
    }

    pub fn table(&self, name: &'static str) -> Table {
        Table {
            store: self.clone(),
            name,
            lazy: false,
        }
    }

    /// A table whose changes nothing waits for (the resume history,
    /// invocation records): a batch of nothing else is committed without
    /// a sync, and synced within `store.sync_interval_ms` or with the next
    /// change something waits for, whichever comes first. A crash can lose
    /// that much of it; a graceful stop loses none. Syncing each batch of
    /// history was a fifth of the CPU of a WebSocket fan-out (issue 32).
    pub fn lazy_table(&self, name: &'static str) -> Table {
        Table {
            lazy: true,
            ..self.table(name)
        }
    }

    /// The same store, whose [`Store::barrier`] covers only what was
    /// queued through this handle, its clones and their tables. The
    /// broker's part writes through one: an MQTT acknowledgement waits for
    /// what the broker keeps, not for the gateway's resume history, which
    /// nothing waits for (every event's PUBACK waited for a commit of the
    /// history with WebSocket consumers; issue 32).
    pub fn scoped(&self) -> Store {
        Store {
            inner: self.inner.clone(),
            scope: Some(Arc::new(AtomicU64::new(0))),
        }
    }

    /// Where the queue stands (through this handle, when scoped): a
    /// barrier taken later with [`Store::barrier_since`] this mark fails
    /// only if a change queued after it failed. The guard takes one as it
    /// hands the broker a publication, for the acknowledgement to come.
    pub fn mark(&self) -> u64 {
        match (&self.inner, &self.scope) {
            (None, _) => 0,
            (Some(_), Some(scope)) => scope.load(Ordering::Acquire),
            (Some(inner), None) => inner.lock_queue().next,
        }
    }

    /// A ticket for everything queued so far (through this handle, when
    /// scoped): resolves once all of it is decided, and fails if a change
    /// queued after `mark` failed. What failed before is someone else's
    /// news: one failure must not fail every later acknowledgement.
    pub fn barrier_since(&self, mark: u64) -> Ticket {
        match &self.inner {
            None => Ticket::done(),
            Some(inner) => Ticket::new(self.mark(), mark, inner.committed.clone()),
        }
    }

    /// A ticket for everything queued so far and not yet decided (through
    /// this handle, when scoped).
    pub fn barrier(&self) -> Ticket {
        match &self.inner {
            None => Ticket::done(),
            Some(inner) => {
                let decided = inner.committed.borrow().seq;
                self.barrier_since(decided)
            }
        }
    }

    /// Whether the writer's queue is under `store.max_queued_bytes` (see
    /// [`Store::room`]).
    pub fn has_room(&self) -> bool {
        self.inner.as_deref().is_none_or(|inner| inner.has_room(0))
    }

    /// Resolves once the writer's queue is under `store.max_queued_bytes`
    /// (or the store stopped): what an async producer awaits before it
    /// takes more input, since [`Table::put`] never waits on a tokio
    /// worker.
    pub async fn room(&self) {
        let Some(inner) = &self.inner else { return };
        inner.stats.room.wait(|| inner.has_room(0)).await;
    }

    /// Writes what is queued, syncs and stops the writer; later changes
    /// fail their tickets. Called once at shutdown, after everything that
    /// writes has stopped.
    pub fn close(&self) {
        let Some(inner) = &self.inner else { return };
        inner.lock_queue().tx = None;
        let handle = inner
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
        // The file's lock goes with the last handle: the same directory
        // can be opened again at once (a restart within the process).
        inner.db.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn submit(&self, op: Op) -> Ticket {
        let Some(inner) = &self.inner else {
            return Ticket::done();
        };
        let bytes = op.bytes() as u64;
        inner.wait_for_room(bytes);
        let mut q = inner.lock_queue();
        let seq = q.next + 1;
        let Some(tx) = &q.tx else {
            return Ticket::failed(StoreError::Stopped);
        };
        // Counted before the writer can take it: counted after, the
        // writer's subtraction could come first and wrap the count past
        // every bound, leaving whoever checked it then waiting for a wake-up
        // an idle writer never sends.
        inner.stats.queued_bytes.fetch_add(bytes, Ordering::Relaxed);
        let sent = tx.send(op.with_seq(seq)).is_ok();
        q.next = seq;
        if let Some(scope) = &self.scope {
            // Under the queue's lock: a barrier taken after this returns
            // covers it. A failed send counts too, so that what waits on
            // it fails.
            scope.fetch_max(seq, Ordering::Release);
        }
        if !sent {
            inner.stats.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
            return Ticket::failed(StoreError::Stopped);
        }
        drop(q);
        Ticket::new(seq, seq - 1, inner.committed.clone())
    }
}

impl Inner {
    /// Whether `bytes` more fit in the writer's queue (one change always
    /// does), or the writer is gone and nothing will make room.
    fn has_room(&self, bytes: u64) -> bool {
        let queued = self.stats.queued_bytes.load(Ordering::Relaxed);
        queued == 0
            || queued.saturating_add(bytes) <= self.max_queued_bytes
            || self.writer_stopped()
    }

    /// Past `max_queued_bytes`, a std thread (rumqttd's router, writing
    /// through the keeper) waits until the writer has taken some of the
    /// queue, as a broker without memory to spare must. A tokio worker
    /// never does: it would stall every task on it; async producers await
    /// [`Store::room`] before taking more input instead, so the queue
    /// passes the bound by what they had in hand at most.
    fn wait_for_room(&self, bytes: u64) {
        if self.has_room(bytes) {
            return;
        }
        self.stats.waits.fetch_add(1, Ordering::Relaxed);
        if tokio::runtime::Handle::try_current().is_ok() {
            return;
        }
        self.stats.room.block(|| self.has_room(bytes));
    }

    fn writer_stopped(&self) -> bool {
        self.committed.borrow().stopped.is_some()
            || self
                .writer
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .is_none_or(|h| h.is_finished())
    }

    fn lock_queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        // A panic while holding it leaves a consistent queue (a counter and a
        // sender).
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A key and its value.
pub type Entry = (Vec<u8>, Vec<u8>);

/// One named table of byte keys and values.
#[derive(Clone)]
pub struct Table {
    store: Store,
    name: &'static str,
    /// See [`Store::lazy_table`].
    lazy: bool,
}

impl Table {
    /// Queued for the next group commit; never blocks. Later changes of the
    /// same key win.
    pub fn put(&self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Ticket {
        self.store.submit(Op::Put {
            table: self.name,
            lazy: self.lazy,
            key: key.into(),
            value: value.into(),
            seq: 0,
        })
    }

    pub fn delete(&self, key: impl Into<Vec<u8>>) -> Ticket {
        self.store.submit(Op::Delete {
            table: self.name,
            lazy: self.lazy,
            key: key.into(),
            seq: 0,
        })
    }

    /// Every key that starts with `prefix`.
    pub fn delete_prefix(&self, prefix: impl Into<Vec<u8>>) -> Ticket {
        self.store.submit(Op::DeletePrefix {
            table: self.name,
            lazy: self.lazy,
            prefix: prefix.into(),
            seq: 0,
        })
    }

    /// Everything in the table, ordered by key: for start-up, before
    /// anything writes to it.
    pub fn load(&self) -> Result<Vec<Entry>, StoreError> {
        let mut out = Vec::new();
        self.scan(|k, v| out.push((k.to_vec(), v.to_vec())))?;
        Ok(out)
    }

    /// Each entry in key order, without holding them all: for start-up.
    pub fn scan(&self, mut each: impl FnMut(&[u8], &[u8])) -> Result<(), StoreError> {
        let Some(inner) = &self.store.inner else {
            return Ok(());
        };
        let read_error = |e: &dyn std::fmt::Display| StoreError::Corrupt {
            path: inner.path.clone(),
            reason: format!("reading table {}: {e}", self.name),
        };
        let db = inner.db.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let db = db.ok_or(StoreError::Stopped)?;
        let txn = db.begin_read().map_err(|e| read_error(&e))?;
        let table = match txn.open_table(definition(self.name)) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(e) => return Err(read_error(&e)),
        };
        for entry in table.iter().map_err(|e| read_error(&e))? {
            let (k, v) = entry.map_err(|e| read_error(&e))?;
            each(k.value(), v.value());
        }
        Ok(())
    }
}

pub(crate) type Bytes = &'static [u8];

fn definition(name: &str) -> TableDefinition<'_, Bytes, Bytes> {
    TableDefinition::new(name)
}

fn prepare_directory(dir: &Path) -> Result<(), StoreError> {
    let problem = |reason: String| StoreError::Directory {
        path: dir.to_path_buf(),
        reason,
    };
    std::fs::create_dir_all(dir).map_err(|e| problem(format!("cannot create it: {e}")))?;
    // redb would only find out at its first commit; say it now.
    let probe = dir.join(".lmos-write-check");
    std::fs::write(&probe, b"ok").map_err(|e| problem(format!("cannot write in it: {e}")))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

fn open_database(path: &Path) -> Result<redb::Database, StoreError> {
    let open = redb::Database::builder()
        // Start-up reads everything once and the writer touches recent
        // pages: a small cache (redb's default grows to 1 GiB).
        .set_cache_size(16 * 1024 * 1024)
        // A damaged page is a typed error instead of a panic later (about
        // 0.5 s per 300 MB at start-up, benches/store-engines).
        .set_check_integrity_on_open(true)
        .create(path);
    open.map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Locked {
            path: path.to_path_buf(),
        },
        redb::DatabaseError::Storage(redb::StorageError::Corrupted(reason)) => {
            StoreError::Corrupt {
                path: path.to_path_buf(),
                reason,
            }
        }
        redb::DatabaseError::Storage(redb::StorageError::Io(io))
            if io.kind() == std::io::ErrorKind::WouldBlock =>
        {
            StoreError::Locked {
                path: path.to_path_buf(),
            }
        }
        other => StoreError::Open {
            path: path.to_path_buf(),
            reason: other.to_string(),
        },
    })
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

#[cfg(test)]
mod tests;
