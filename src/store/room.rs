//! Waiting for room in the writer's queue (`store.max_queued_bytes`)
//! without polling: async producers await [`Room::notified`]; std threads
//! (rumqttd's router writes through the keeper) block on a condition
//! variable. The writer wakes both after each batch it takes, and only
//! when something waits, so a commit pays an atomic load for it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// A std thread waits at most this long between checks: a wake-up missed
/// between its check and its wait costs no more.
const BLOCKED_CHECK: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
pub(super) struct Room {
    waiters: AtomicUsize,
    notify: Notify,
    lock: Mutex<()>,
    condvar: Condvar,
}

/// Counts a waiter while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Room {
    fn waiting(&self) -> Waiting<'_> {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        Waiting(&self.waiters)
    }

    /// Resolves once `has_room` holds.
    pub(super) async fn wait(&self, has_room: impl Fn() -> bool) {
        if has_room() {
            return;
        }
        let _waiting = self.waiting();
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check: a wake-up after it is not lost.
            notified.as_mut().enable();
            if has_room() {
                return;
            }
            notified.await;
        }
    }

    /// Blocks this (non-async) thread until `has_room` holds.
    pub(super) fn block(&self, has_room: impl Fn() -> bool) {
        if has_room() {
            return;
        }
        let _waiting = self.waiting();
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        while !has_room() {
            guard = match self.condvar.wait_timeout(guard, BLOCKED_CHECK) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// The writer took some of the queue, or stopped.
    pub(super) fn wake(&self) {
        if self.waiters.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.notify.notify_waiters();
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.condvar.notify_all();
    }
}
