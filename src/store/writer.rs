//! The store's one writing thread: takes everything queued since its last
//! commit, writes it as one transaction, syncs once, and tells the tickets.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redb::Durability;
use tokio::sync::watch;

use super::bounds::{Bounds, Limit};
use super::failures::Failures;
use super::{definition, file_len, Bytes, Committed, DbSlot, StoreError, StoreStats, SyncMode};

/// Most changes in one transaction, so a flood does not hold every ticket
/// until one huge commit ends.
const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// How long the writer lets lazy changes gather after committing a batch
/// of nothing else.
const LAZY_GATHER: Duration = Duration::from_millis(1);

/// One change; `lazy`: of a [`super::Store::lazy_table`].
pub(super) enum Op {
    Put {
        table: &'static str,
        key: Vec<u8>,
        value: Vec<u8>,
        seq: u64,
        lazy: bool,
    },
    Delete {
        table: &'static str,
        key: Vec<u8>,
        seq: u64,
        lazy: bool,
    },
    /// Every key that starts with `prefix`.
    DeletePrefix {
        table: &'static str,
        prefix: Vec<u8>,
        seq: u64,
        lazy: bool,
    },
}

impl Op {
    pub(super) fn bytes(&self) -> usize {
        match self {
            Op::Put { key, value, .. } => key.len() + value.len(),
            Op::Delete { key, .. } => key.len(),
            Op::DeletePrefix { prefix, .. } => prefix.len(),
        }
    }

    pub(super) fn with_seq(mut self, n: u64) -> Op {
        match &mut self {
            Op::Put { seq, .. } | Op::Delete { seq, .. } | Op::DeletePrefix { seq, .. } => *seq = n,
        }
        self
    }

    fn seq(&self) -> u64 {
        match self {
            Op::Put { seq, .. } | Op::Delete { seq, .. } | Op::DeletePrefix { seq, .. } => *seq,
        }
    }

    fn lazy(&self) -> bool {
        match self {
            Op::Put { lazy, .. } | Op::Delete { lazy, .. } | Op::DeletePrefix { lazy, .. } => *lazy,
        }
    }

    fn is_put(&self) -> bool {
        matches!(self, Op::Put { .. })
    }

    fn table(&self) -> &'static str {
        match self {
            Op::Put { table, .. } | Op::Delete { table, .. } | Op::DeletePrefix { table, .. } => {
                table
            }
        }
    }
}

pub(super) struct Writer {
    /// `None` once it could not be opened again.
    db: Option<Arc<redb::Database>>,
    /// Shares `db` with the readers; emptied while it is reopened.
    slot: DbSlot,
    path: PathBuf,
    committed: watch::Sender<Committed>,
    stats: Arc<StoreStats>,
    /// `store.sync`.
    mode: SyncMode,
    /// `store.sync_interval_ms`: how often `periodic` syncs, and how soon
    /// lazy changes are synced in `every_batch`.
    interval: Duration,
    last_sync: Instant,
    /// Committed without sync since `last_sync`.
    unsynced: bool,
    /// `store.max_file_bytes`, `store.min_free_bytes`.
    bounds: Bounds,
    /// Set when the database could not be reopened after an I/O error:
    /// every later change fails.
    stopped: Option<StoreError>,
}

impl Writer {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        db: Arc<redb::Database>,
        slot: DbSlot,
        path: PathBuf,
        committed: watch::Sender<Committed>,
        stats: Arc<StoreStats>,
        mode: SyncMode,
        interval: Duration,
        bounds: Bounds,
    ) -> Writer {
        Writer {
            db: Some(db),
            slot,
            path,
            committed,
            stats,
            mode,
            interval,
            last_sync: Instant::now(),
            unsynced: false,
            bounds,
            stopped: None,
        }
    }

    /// Until every sender is gone: what is left is written and synced.
    pub(super) fn run(mut self, rx: Receiver<Op>) {
        loop {
            let first = match self.unsynced || self.bounds.full.is_some() {
                true => {
                    let wait = match self.unsynced {
                        true => self.interval.saturating_sub(self.last_sync.elapsed()),
                        false => self.interval,
                    };
                    match rx.recv_timeout(wait) {
                        Ok(op) => op,
                        Err(RecvTimeoutError::Timeout) => {
                            if self.unsynced {
                                self.commit(Vec::new(), true);
                            }
                            // Room comes back without a change to write.
                            let db = self.db.clone();
                            let used = move || used_bytes(db.as_deref());
                            if self.bounds.recheck(&used) {
                                self.room_again();
                            }
                            continue;
                        }
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                false => match rx.recv() {
                    Ok(op) => op,
                    Err(_) => break,
                },
            };
            let mut batch = vec![first];
            let mut bytes = batch[0].bytes();
            while bytes < MAX_BATCH_BYTES {
                match rx.try_recv() {
                    Ok(op) => {
                        bytes += op.bytes();
                        batch.push(op);
                    }
                    Err(_) => break,
                }
            }
            let due = self.last_sync.elapsed() >= self.interval;
            let sync = match self.mode {
                SyncMode::EveryBatch => due || batch.iter().any(|op| !op.lazy()),
                SyncMode::Periodic => due,
            };
            self.stats.taken(bytes as u64);
            let lazy = !sync && batch.iter().all(Op::lazy);
            self.commit(batch, sync);
            if lazy {
                // Lets a stream of lazy changes gather instead of waking
                // this thread for each (its wake-ups were as costly as the
                // commits); a change something waits for waits this much
                // longer at most, and only while such a stream flows.
                std::thread::sleep(LAZY_GATHER);
            }
        }
        if self.unsynced {
            self.commit(Vec::new(), true);
        }
        // Nothing will make room any more: what waits for it goes on (and
        // its changes fail as the store's are stopped).
        self.stats.room.wake();
    }

    /// Writes `batch` (its puts only if there is room), then tells the
    /// tickets up to its last change which of them failed.
    fn commit(&mut self, mut batch: Vec<Op>, sync: bool) {
        let (Some(first), Some(last)) = (batch.first().map(Op::seq), batch.last().map(Op::seq))
        else {
            if self.stopped.is_some() {
                return;
            }
            if let Err(e) = self.write(Vec::new(), sync) {
                self.failed_io(&e);
            } else {
                self.synced(sync);
            }
            return;
        };
        let mut failures = Failures::default();
        if let Some(e) = &self.stopped {
            failures.add(first, last, e);
            return self.tell(last, &failures);
        }
        let put_bytes: u64 = batch
            .iter()
            .filter(|op| op.is_put())
            .map(|op| op.bytes() as u64)
            .sum();
        if put_bytes > 0 {
            self.refuse_puts_without_room(&mut batch, put_bytes, &mut failures);
        }
        let written = if failures.is_empty() { put_bytes } else { 0 };
        let started = Instant::now();
        let changes = batch.len() as u64;
        match self.write(batch, sync) {
            Ok(()) => {
                self.bounds.wrote(written);
                let micros = started.elapsed().as_micros() as u64;
                self.stats.commits.fetch_add(1, Ordering::Relaxed);
                self.stats.changes.fetch_add(changes, Ordering::Relaxed);
                self.stats
                    .commit_micros
                    .fetch_add(micros, Ordering::Relaxed);
                self.stats
                    .max_commit_micros
                    .fetch_max(micros, Ordering::Relaxed);
                self.synced(sync);
            }
            Err(e) => {
                // This batch's changes fail, and only they: the next batch
                // is written to the database opened again.
                failures = Failures::default();
                failures.add(first, last, &e);
                if matches!(e, StoreError::Full { .. }) && self.bounds.full.is_none() {
                    // Past the reserve: refused like a bound until a
                    // reading says there is room.
                    tracing::warn!(path = %self.path.display(), "The store is full: writes are refused until space returns.");
                    self.bounds.full = Some(Limit::Free);
                    self.stats.set_full(Some(Limit::Free.reason()));
                }
                self.failed_io(&e);
            }
        }
        self.tell(last, &failures);
    }

    fn synced(&mut self, sync: bool) {
        if sync {
            self.stats.syncs.fetch_add(1, Ordering::Relaxed);
            // A stat per commit was 5 % of a lazy commit's cost.
            self.stats
                .file_bytes
                .store(file_len(&self.path), Ordering::Relaxed);
            self.last_sync = Instant::now();
            self.unsynced = false;
        } else {
            self.unsynced = true;
        }
    }

    /// Tickets up to `last` are decided; those in `failures` failed.
    fn tell(&self, last: u64, failures: &Failures) {
        self.committed.send_modify(|c| {
            if !failures.is_empty() {
                c.failures.extend(failures);
            }
            c.seq = last;
            if c.stopped.is_none() {
                c.stopped.clone_from(&self.stopped);
            }
        });
    }

    /// Past `store.max_file_bytes` or `store.min_free_bytes`, the batch's
    /// puts are refused (redb is not asked: a write into a full disk
    /// latches its file as failed) and its deletes, which give room back,
    /// are written.
    fn refuse_puts_without_room(&mut self, batch: &mut Vec<Op>, bytes: u64, failed: &mut Failures) {
        let db = self.db.clone();
        let used = move || used_bytes(db.as_deref());
        let Some(limit) = self.bounds.admit(bytes, &used) else {
            if self.bounds.full.is_some() {
                self.room_again();
            }
            return;
        };
        if self.bounds.full != Some(limit) {
            tracing::warn!(path = %self.path.display(), reason = limit.reason(), "The store is full: writes are refused until space returns.");
            self.stats.set_full(Some(limit.reason()));
        }
        self.bounds.full = Some(limit);
        let error = StoreError::Full {
            reason: limit.reason().to_owned(),
        };
        let mut refused = 0;
        batch.retain(|op| {
            if op.is_put() {
                failed.add(op.seq(), op.seq(), &error);
                refused += 1;
            }
            !op.is_put()
        });
        self.stats.refused.fetch_add(refused, Ordering::Relaxed);
    }

    fn room_again(&mut self) {
        self.bounds.full = None;
        tracing::info!(path = %self.path.display(), "The store has room again: writes are accepted.");
        self.stats.set_full(None);
    }

    /// redb latches its file after an I/O error (every later call fails
    /// with `PreviousIo`); the database is opened again, which repairs
    /// what the failed commit left. Only if that fails does the store stop.
    fn failed_io(&mut self, e: &StoreError) {
        tracing::error!(path = %self.path.display(), error = %e, "The store could not write; the changes of that commit are refused and the store is opened again.");
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        // Every handle must be gone before redb lets the file open again.
        slot.take();
        self.db = None;
        match super::open_database(&self.path) {
            Ok(db) => {
                let db = Arc::new(db);
                *slot = Some(db.clone());
                self.db = Some(db);
                self.stats.reopens.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %e, "The store cannot be opened again; nothing more will be acknowledged as durable.");
                self.stats.set_stopped(&e.to_string());
                self.stopped = Some(e);
            }
        }
    }

    fn write(&self, batch: Vec<Op>, sync: bool) -> Result<(), StoreError> {
        let Some(db) = &self.db else {
            return Err(StoreError::Stopped);
        };
        let mut txn = db.begin_write().map_err(write_error)?;
        let durability = if sync {
            Durability::Immediate
        } else {
            Durability::None
        };
        txn.set_durability(durability).map_err(write_error)?;
        // Quick repair: a crash costs no full scan at the next start.
        txn.set_quick_repair(true);
        {
            let mut open: Vec<(&'static str, redb::Table<'_, Bytes, Bytes>)> = Vec::new();
            for op in &batch {
                let name = op.table();
                let index = match open.iter().position(|(n, _)| *n == name) {
                    Some(i) => i,
                    None => {
                        let t = txn.open_table(definition(name)).map_err(write_error)?;
                        open.push((name, t));
                        open.len() - 1
                    }
                };
                let table = &mut open[index].1;
                match op {
                    Op::Put { key, value, .. } => {
                        table
                            .insert(key.as_slice(), value.as_slice())
                            .map_err(write_error)?;
                    }
                    Op::Delete { key, .. } => {
                        table.remove(key.as_slice()).map_err(write_error)?;
                    }
                    Op::DeletePrefix { prefix, .. } => {
                        let p = prefix.as_slice();
                        let removed = match prefix_end(p) {
                            Some(end) => {
                                table.retain_in::<&[u8], _>(p..end.as_slice(), |_, _| false)
                            }
                            None => table.retain_in::<&[u8], _>(p.., |k, _| !k.starts_with(p)),
                        };
                        removed.map_err(write_error)?;
                    }
                }
            }
        }
        txn.commit().map_err(write_error)
    }
}

/// Bytes of the pages `db` uses (its file holds the most it ever used).
fn used_bytes(db: Option<&redb::Database>) -> Option<u64> {
    let txn = db?.begin_write().ok()?;
    let stats = txn.stats().ok()?;
    let bytes = stats
        .allocated_pages()
        .saturating_mul(stats.page_size() as u64);
    txn.abort().ok()?;
    Some(bytes)
}

/// A full disk that slipped past `store.min_free_bytes` (redb grows its
/// file by more than a batch) is what the bound says; other I/O errors
/// say what they are.
fn write_error(e: impl Into<redb::Error>) -> StoreError {
    match e.into() {
        redb::Error::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => StoreError::Full {
            reason: "the disk is full".into(),
        },
        other => StoreError::Write(other.to_string()),
    }
}

/// The first key after every key starting with `prefix`, if there is one.
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}
