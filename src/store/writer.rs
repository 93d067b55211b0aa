//! The store's one writing thread: takes everything queued since its last
//! commit, writes it as one transaction, syncs once, and tells the tickets.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redb::Durability;
use tokio::sync::watch;

use super::{definition, file_len, Bytes, Committed, StoreError, StoreStats, SyncMode};

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

    fn table(&self) -> &'static str {
        match self {
            Op::Put { table, .. } | Op::Delete { table, .. } | Op::DeletePrefix { table, .. } => {
                table
            }
        }
    }
}

pub(super) struct Writer {
    db: Arc<redb::Database>,
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
}

impl Writer {
    pub(super) fn new(
        db: Arc<redb::Database>,
        path: PathBuf,
        committed: watch::Sender<Committed>,
        stats: Arc<StoreStats>,
        mode: SyncMode,
        interval: Duration,
    ) -> Writer {
        Writer {
            db,
            path,
            committed,
            stats,
            mode,
            interval,
            last_sync: Instant::now(),
            unsynced: false,
        }
    }

    /// Until every sender is gone: what is left is written and synced.
    pub(super) fn run(mut self, rx: Receiver<Op>) {
        loop {
            let first = match self.unsynced {
                true => {
                    match rx.recv_timeout(self.interval.saturating_sub(self.last_sync.elapsed())) {
                        Ok(op) => op,
                        Err(RecvTimeoutError::Timeout) => {
                            self.commit(Vec::new(), true);
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
            self.stats
                .queued_bytes
                .fetch_sub(bytes as u64, Ordering::Relaxed);
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
    }

    fn commit(&mut self, batch: Vec<Op>, sync: bool) {
        if self.committed.borrow().failed.is_some() {
            return;
        }
        let started = Instant::now();
        let last = batch.last().map(Op::seq);
        let changes = batch.len() as u64;
        match self.write(batch, sync) {
            Ok(()) => {
                let micros = started.elapsed().as_micros() as u64;
                self.stats.commits.fetch_add(1, Ordering::Relaxed);
                self.stats.changes.fetch_add(changes, Ordering::Relaxed);
                self.stats
                    .commit_micros
                    .fetch_add(micros, Ordering::Relaxed);
                self.stats
                    .max_commit_micros
                    .fetch_max(micros, Ordering::Relaxed);
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
                if let Some(seq) = last {
                    self.committed.send_modify(|c| c.seq = seq);
                }
            }
            Err(e) => {
                // Nothing acknowledged after this point: every waiting and
                // later ticket fails, and the health check says why.
                tracing::error!(path = %self.path.display(), error = %e, "the store cannot write; nothing more will be acknowledged as durable");
                self.committed.send_modify(|c| c.failed = Some(e));
            }
        }
    }

    fn write(&self, batch: Vec<Op>, sync: bool) -> Result<(), StoreError> {
        let fail = |e: &dyn std::fmt::Display| StoreError::Write(e.to_string());
        let mut txn = self.db.begin_write().map_err(|e| fail(&e))?;
        let durability = if sync {
            Durability::Immediate
        } else {
            Durability::None
        };
        txn.set_durability(durability).map_err(|e| fail(&e))?;
        // Quick repair: a crash costs no full scan at the next start.
        txn.set_quick_repair(true);
        {
            let mut open: Vec<(&'static str, redb::Table<'_, Bytes, Bytes>)> = Vec::new();
            for op in &batch {
                let name = op.table();
                let index = match open.iter().position(|(n, _)| *n == name) {
                    Some(i) => i,
                    None => {
                        let t = txn.open_table(definition(name)).map_err(|e| fail(&e))?;
                        open.push((name, t));
                        open.len() - 1
                    }
                };
                let table = &mut open[index].1;
                match op {
                    Op::Put { key, value, .. } => {
                        table
                            .insert(key.as_slice(), value.as_slice())
                            .map_err(|e| fail(&e))?;
                    }
                    Op::Delete { key, .. } => {
                        table.remove(key.as_slice()).map_err(|e| fail(&e))?;
                    }
                    Op::DeletePrefix { prefix, .. } => {
                        let p = prefix.as_slice();
                        let removed = match prefix_end(p) {
                            Some(end) => {
                                table.retain_in::<&[u8], _>(p..end.as_slice(), |_, _| false)
                            }
                            None => table.retain_in::<&[u8], _>(p.., |k, _| !k.starts_with(p)),
                        };
                        removed.map_err(|e| fail(&e))?;
                    }
                }
            }
        }
        txn.commit().map_err(|e| fail(&e))
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
