//! The connection's side of its outbound queue ([`super::outbound`]): it
//! takes what the dispatcher queued, in batches, gives the bytes back once
//! per batch of writes, and under `drop_oldest` drops the oldest of a batch
//! while its queue is over the budget.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;

use super::outbound::{Account, Frame, Queued};
use super::queue;

/// The connection's side.
pub struct Inbox {
    rx: queue::Receiver<Vec<Queued>>,
    /// The batch being taken, still counted as queued.
    batch: std::vec::IntoIter<Queued>,
    /// Bytes and messages taken off the queue and not yet given back: given
    /// back once per batch of writes (when the connection asks for more, or
    /// finds the queue empty), not per message. Per message, the shared
    /// counters' atomics cost a tenth of a 64-consumer fan-out's throughput
    /// on two cores. Until then they still count, as the connection still
    /// holds them.
    taken: usize,
    taken_messages: usize,
    /// Under `drop_oldest`: the byte budget the connection brings its
    /// queue back within, dropping the oldest, as it takes a batch.
    shed_above: Option<(usize, Counter)>,
    pub too_slow: CancellationToken,
    pub dropped: Arc<AtomicU64>,
    pub account: Arc<Account>,
}

impl Inbox {
    pub(super) fn new(
        rx: queue::Receiver<Vec<Queued>>,
        shed_above: Option<(usize, Counter)>,
        too_slow: CancellationToken,
        dropped: Arc<AtomicU64>,
        account: Arc<Account>,
    ) -> Inbox {
        Inbox {
            rx,
            batch: Vec::new().into_iter(),
            taken: 0,
            taken_messages: 0,
            shed_above,
            too_slow,
            dropped,
            account,
        }
    }
}

impl Inbox {
    /// The next message; what the last batch of writes took is given back
    /// first. Cancel-safe.
    pub async fn recv(&mut self) -> Option<Frame> {
        self.give_back();
        loop {
            if let Some(frame) = self.take() {
                return Some(frame);
            }
            self.batch = self.rx.recv().await?.into_iter();
            self.shed();
        }
    }

    /// The next message if one is queued; `None` ends a batch of writes.
    pub fn try_recv(&mut self) -> Option<Frame> {
        loop {
            if let Some(frame) = self.take() {
                return Some(frame);
            }
            match self.rx.try_recv() {
                Some(batch) => {
                    self.batch = batch.into_iter();
                    self.shed();
                }
                None => {
                    self.give_back();
                    return None;
                }
            }
        }
    }

    fn take(&mut self) -> Option<Frame> {
        let Some(queued) = self.batch.next() else {
            // The batch's slots go back: an idle connection holds none.
            self.batch = Vec::new().into_iter();
            return None;
        };
        self.taken += queued.bytes;
        self.taken_messages += 1;
        Some(queued.frame)
    }

    /// Under `drop_oldest`, once per batch taken: drops its first (the
    /// queue's oldest) messages while the queue, less what was taken, is
    /// over the byte budget.
    fn shed(&mut self) {
        let Some((budget, counter)) = &self.shed_above else {
            return;
        };
        let held = self.account.queued().saturating_sub(self.taken);
        let mut excess = held.saturating_sub(*budget);
        let mut dropped = 0;
        while excess > 0 {
            let Some(q) = self.batch.next() else { break };
            excess = excess.saturating_sub(q.bytes);
            self.taken += q.bytes;
            self.taken_messages += 1;
            dropped += 1;
        }
        if dropped > 0 {
            counter.inc_by(dropped);
            self.dropped.fetch_add(dropped, Ordering::Relaxed);
        }
    }

    fn give_back(&mut self) {
        let bytes = std::mem::take(&mut self.taken);
        let messages = std::mem::take(&mut self.taken_messages);
        // Also when nothing was taken: the connection is ready for more.
        self.account.taken(bytes, messages);
    }
}

impl Drop for Inbox {
    /// What was still queued no longer counts.
    fn drop(&mut self) {
        self.give_back();
        self.rx.close();
        let (mut bytes, mut messages) = (0, 0);
        let mut count = |q: Queued| {
            bytes += q.bytes;
            messages += 1;
        };
        self.batch.by_ref().for_each(&mut count);
        while let Some(batch) = self.rx.try_recv() {
            batch.into_iter().for_each(&mut count);
        }
        self.account.release(bytes, messages);
    }
}
