//! What waits for the store: a [`Ticket`] resolves once the changes of its
//! window are decided, and fails if one of them failed.

use tokio::sync::watch;

use super::failures::Failures;
use super::{Committed, StoreError};

/// Resolves once its change, and every change queued before it, is
/// decided; fails if a change of its window failed: its own change (a
/// put's or delete's ticket), or any change queued after the mark it was
/// taken since ([`super::Store::barrier_since`]).
#[must_use = "a ticket says when a change is on disk; drop it only when nothing waits for that"]
pub struct Ticket {
    /// The window: changes after `from` up to and including `seq`.
    pub(super) seq: u64,
    from: u64,
    committed: Option<watch::Receiver<Committed>>,
}

/// What the writer had decided when a ticket resolved: which changes of
/// its window failed, asked per mark (the guard asks once per
/// acknowledgement in a chunk).
#[derive(Debug, Default)]
pub struct Settled {
    seq: u64,
    /// Cloned only when something failed; empty otherwise.
    failures: Failures,
    stopped: Option<StoreError>,
}

impl Settled {
    /// The failure of a change after `mark` (up to the ticket's own), if
    /// one failed.
    pub fn failed_since(&self, mark: u64) -> Option<StoreError> {
        if let Some(e) = self.failures.within(mark, self.seq) {
            return Some(e.clone());
        }
        self.stopped.clone()
    }

    /// Whether the store has stopped for good (nothing more will be
    /// written until a restart).
    pub fn stopped(&self) -> bool {
        self.stopped.is_some()
    }
}

impl Ticket {
    pub(super) fn new(seq: u64, from: u64, committed: watch::Receiver<Committed>) -> Ticket {
        Ticket {
            seq,
            from,
            committed: Some(committed),
        }
    }

    pub(super) fn done() -> Ticket {
        Ticket {
            seq: 0,
            from: 0,
            committed: None,
        }
    }

    pub(super) fn failed(error: StoreError) -> Ticket {
        let (_tx, rx) = watch::channel(Committed {
            seq: 0,
            failures: Failures::default(),
            stopped: Some(error),
        });
        Ticket {
            seq: u64::MAX,
            from: 0,
            committed: Some(rx),
        }
    }

    /// Already durable (no need to wait).
    pub fn is_durable(&self) -> bool {
        match &self.committed {
            None => true,
            Some(rx) => {
                let c = rx.borrow();
                c.seq >= self.seq && c.failures.within(self.from, self.seq).is_none()
            }
        }
    }

    /// Once every change of the window is decided: what failed, to ask
    /// about marks within it.
    pub async fn settle(self) -> Settled {
        let Some(mut rx) = self.committed else {
            return Settled::default();
        };
        let (seq, from) = (self.seq, self.from);
        let Ok(reached) = rx.wait_for(|c| c.stopped.is_some() || c.seq >= seq).await else {
            return Settled {
                seq,
                failures: Failures::default(),
                stopped: Some(StoreError::Stopped),
            };
        };
        Settled {
            seq,
            failures: reached.failures.window(from, seq),
            // Stopped before this window was written: nothing of it is.
            stopped: match reached.seq >= seq {
                true => None,
                false => reached.stopped.clone(),
            },
        }
    }

    pub async fn durable(self) -> Result<(), StoreError> {
        let from = self.from;
        match self.settle().await.failed_since(from) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
