//! The bounded queue between the dispatcher and one WebSocket connection.
//!
//! The dispatcher never waits on a consumer: it offers each message and, when
//! the consumer is too slow, applies the slow-consumer policy to that
//! consumer only. Too slow is its queue past `outbound_queue_bytes` (each
//! message counted with [`PER_MESSAGE`] on top of its bytes) or not moved
//! for `outbound_stall_ms` (see [`super::slow`]); every queue's bytes also
//! count in the gateway's `max_outbound_bytes` budget (see
//! [`super::dispatcher`], which closes the slowest connection when it is
//! reached).
//!
//! Messages go over in batches (a dispatcher turn's for the connection),
//! counted once per batch: a channel operation and three shared counters per
//! message, on both sides, were a tenth of a WebSocket fan-out's CPU.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;

use super::budget::Budget;
use super::queue;

use tokio_util::sync::CancellationToken;

use crate::config::SlowConsumerPolicy;

pub use super::frame::{Frame, RecipientCopy};
pub use super::inbox::Inbox;
pub use super::slow::TooSlow;
use super::slow::{Bounds, PER_MESSAGE};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    Queued,
    /// The queue was full and the policy is to drop.
    Dropped,
    /// The queue was full and the connection is now being closed.
    Disconnected,
    /// The connection is gone.
    Closed,
}

/// What a queue holds, shared by both its ends.
#[derive(Debug)]
pub struct Account {
    /// Bytes queued.
    queued: AtomicUsize,
    /// Messages queued.
    messages: AtomicUsize,
    /// When the queue last moved, on the global budget's clock: the
    /// connection took messages off it (or was opened), or the dispatcher
    /// found it empty and queued onto it. The one that has not moved for the
    /// longest is the slowest; one that has not for `outbound_stall_ms` is
    /// stalled. Without the second, a consumer idle for a minute would look
    /// stalled to the second message of the next burst.
    last_taken: AtomicU64,
    /// A [`TooSlow::code`] once found too slow; 0 until then.
    too_slow: AtomicU8,
    /// Never closed for the global budget nor for a stall: a queue the
    /// sidecar drains itself (an HTTP binding consumer's, an in-process
    /// agent's), which nothing could reopen.
    exempt: AtomicBool,
    global: Arc<Budget>,
}

impl Account {
    /// Bytes waiting in the queue.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Whether the global budget may close this connection.
    pub fn sheddable(&self) -> bool {
        !self.exempt.load(Ordering::Relaxed)
    }

    /// Keeps the global budget from closing this connection.
    pub fn exempt(&self) {
        self.exempt.store(true, Ordering::Relaxed);
    }

    /// The [`Budget::now_ms`] of the last message taken.
    pub fn last_taken(&self) -> u64 {
        self.last_taken.load(Ordering::Relaxed)
    }

    /// Counts `messages` more, of `bytes` in all (before they are queued:
    /// the connection may take them at once).
    fn count(&self, bytes: usize, messages: usize) {
        self.queued.fetch_add(bytes, Ordering::Relaxed);
        self.messages.fetch_add(messages, Ordering::Relaxed);
        self.global.add(bytes);
    }

    pub(super) fn taken(&self, bytes: usize, messages: usize) {
        self.last_taken
            .store(self.global.now_ms(), Ordering::Relaxed);
        self.release(bytes, messages);
    }

    pub(super) fn release(&self, bytes: usize, messages: usize) {
        if messages > 0 {
            self.queued.fetch_sub(bytes, Ordering::Relaxed);
            self.messages.fetch_sub(messages, Ordering::Relaxed);
            self.global.sub(bytes);
        }
    }

    pub fn too_slow(&self) -> Option<TooSlow> {
        TooSlow::from_code(self.too_slow.load(Ordering::Relaxed))
    }

    fn set_too_slow(&self, why: TooSlow) {
        let _ = self
            .too_slow
            .compare_exchange(0, why.code(), Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// A frame in a queue, with the bytes it counts as: its own and
/// [`PER_MESSAGE`] for its place in the queue.
#[derive(Debug)]
pub struct Queued {
    pub(super) frame: Frame,
    pub(super) bytes: usize,
}

impl Queued {
    pub fn new(frame: Frame) -> Queued {
        let bytes = frame.wire_len() + PER_MESSAGE;
        Queued { frame, bytes }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// What became of a batch offered.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Offered {
    pub queued: usize,
    /// Dropped for the `drop` policy: the newest, these being offered.
    pub dropped: usize,
    /// The connection is closing (`Disconnected`, `Closed`): nothing after
    /// this was queued.
    pub end: Option<Offer>,
}

/// How a connection's queue is bounded.
#[derive(Debug, Clone)]
pub struct QueueLimits {
    pub bounds: Bounds,
    pub policy: SlowConsumerPolicy,
    /// The gateway's `max_outbound_bytes`.
    pub global: Arc<Budget>,
    /// Counts `outbound_queue_bytes` reached.
    pub bytes_hits: Counter,
    /// Counts messages the connection dropped under `drop_oldest`.
    pub dropped_oldest: Counter,
}

#[cfg(test)]
impl QueueLimits {
    /// `messages`, and no byte bound to speak of.
    pub fn messages_only(messages: usize, policy: SlowConsumerPolicy) -> QueueLimits {
        let metrics = crate::telemetry::metrics::Metrics::new();
        QueueLimits {
            bounds: Bounds {
                messages,
                bytes: usize::MAX,
                stall_ms: 0,
            },
            policy,
            global: Arc::new(Budget::new(&metrics, "outbound", "k", "e", usize::MAX)),
            bytes_hits: metrics.budget_hit_counter("outbound_per_connection"),
            dropped_oldest: metrics.dropped_counter("slow_consumer_oldest"),
        }
    }
}

/// The dispatcher's side of a connection's queue.
#[derive(Debug, Clone)]
pub struct Outbound {
    tx: queue::Sender<Vec<Queued>>,
    policy: SlowConsumerPolicy,
    bounds: Bounds,
    bytes_hits: Counter,
    /// Cancelled when the consumer is too slow under the disconnect policy.
    too_slow: CancellationToken,
    dropped: Arc<AtomicU64>,
    account: Arc<Account>,
}

pub fn channel(limits: &QueueLimits) -> (Outbound, Inbox) {
    // Bounded by the account's message count, not the channel's.
    let (tx, rx) = queue::unbounded();
    let too_slow = CancellationToken::new();
    let dropped = Arc::new(AtomicU64::new(0));
    let account = Arc::new(Account {
        queued: AtomicUsize::new(0),
        messages: AtomicUsize::new(0),
        last_taken: AtomicU64::new(limits.global.now_ms()),
        too_slow: AtomicU8::new(0),
        exempt: AtomicBool::new(false),
        global: limits.global.clone(),
    });
    (
        Outbound {
            tx,
            policy: limits.policy,
            bounds: limits.bounds,
            bytes_hits: limits.bytes_hits.clone(),
            too_slow: too_slow.clone(),
            dropped: dropped.clone(),
            account: account.clone(),
        },
        Inbox::new(
            rx,
            (limits.policy == SlowConsumerPolicy::DropOldest)
                .then(|| (limits.bounds.bytes, limits.dropped_oldest.clone())),
            too_slow,
            dropped,
            account,
        ),
    )
}

impl Outbound {
    pub fn offer(&self, frame: Frame) -> Offer {
        let now = self.account.global.now_ms();
        let offered = self.offer_batch(vec![Queued::new(frame)], now);
        match offered.end {
            Some(end) => end,
            None if offered.dropped > 0 => Offer::Dropped,
            None => Offer::Queued,
        }
    }

    /// Offers frames in their order, each against the queue as the ones
    /// before it left it; the policy applies to each that does not fit, or
    /// to all when the queue has stalled. Once the connection is to close,
    /// the rest go nowhere. `now` is the budget's clock ([`Budget::now_ms`]),
    /// read once per dispatcher turn, not per message.
    pub fn offer_batch(&self, mut batch: Vec<Queued>, now: u64) -> Offered {
        let mut offered = Offered::default();
        // What the queue holds as far as this batch knows: the connection
        // may take some meanwhile, which only makes room.
        let mut bytes = self.account.queued();
        let mut messages = self.account.messages.load(Ordering::Relaxed);
        let (bytes_before, messages_before) = (bytes, messages);
        // Once per batch: one relaxed load, only for a queue not empty. A
        // queue the sidecar drains itself (an in-process agent's, an HTTP
        // binding's) is not a consumer that stopped reading: it may be busy
        // with the request it took for longer than a network peer may.
        let stalled = bytes_before > 0
            && self
                .bounds
                .stalled(bytes_before, self.account.last_taken(), now)
            && self.account.sheddable();
        batch.retain(|q| {
            if offered.end.is_some() {
                return false;
            }
            let mut why = if stalled {
                Some(TooSlow::Stalled)
            } else {
                self.bounds.full(bytes, messages, q.bytes)
            };
            if why == Some(TooSlow::Bytes) {
                self.bytes_hits.inc();
            }
            if self.policy == SlowConsumerPolicy::DropOldest && why.is_some() && !stalled {
                // Room to drop the oldest from: up to twice the bounds.
                let doubled = self.bounds.doubled();
                why = doubled.full(bytes, messages, q.bytes);
            }
            match why.map(|why| self.full(why)) {
                None => {
                    bytes = bytes.saturating_add(q.bytes);
                    messages += 1;
                    true
                }
                Some(Offer::Dropped) => {
                    offered.dropped += 1;
                    false
                }
                Some(end) => {
                    offered.end = Some(end);
                    false
                }
            }
        });
        if batch.is_empty() {
            return offered;
        }
        let (bytes, messages) = (bytes - bytes_before, messages - messages_before);
        if bytes_before == 0 {
            // The stall clock starts when there is something to take.
            self.account.last_taken.store(now, Ordering::Relaxed);
        }
        self.account.count(bytes, messages);
        match self.tx.send(batch) {
            Ok(()) => offered.queued = messages,
            Err(_) => {
                self.account.release(bytes, messages);
                offered.end = Some(Offer::Closed);
            }
        }
        offered
    }

    fn full(&self, why: TooSlow) -> Offer {
        match self.policy {
            SlowConsumerPolicy::Drop | SlowConsumerPolicy::DropOldest => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                Offer::Dropped
            }
            SlowConsumerPolicy::Disconnect => {
                self.disconnect(why);
                Offer::Disconnected
            }
        }
    }

    /// Makes the connection close itself, saying `why`.
    pub fn disconnect(&self, why: TooSlow) {
        self.account.set_too_slow(why);
        self.too_slow.cancel();
    }

    pub fn account(&self) -> &Arc<Account> {
        &self.account
    }
}

#[cfg(test)]
#[path = "outbound_tests.rs"]
mod tests;
