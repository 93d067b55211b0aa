//! A wake-up for one waiter: a flag and a waker.
//!
//! Every idle connection's task waits on three of these at once (what the
//! guard owes the broker, what it queued for the client, a handover). A
//! `Notify` takes the same room where it lives, but its waiting future
//! holds a waiter node of 64 bytes in the waiting task; this one's holds a
//! reference (issue 48). The price: one waiter at a time. A second task
//! waiting would take the first one's place and leave it unwoken, so a
//! bell belongs to one task's loop.

use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;

#[derive(Debug, Default)]
pub(super) struct Bell {
    /// [`RUNG`], and the marks rings left above it.
    rung: AtomicU8,
    waker: AtomicWaker,
}

const RUNG: u8 = 1;

impl Bell {
    /// Wakes the waiter, or the next wait if none is waiting; rings before
    /// a wait make one wake-up.
    pub(super) fn ring(&self) {
        self.ring_marked(0);
    }

    /// Rings, leaving `mark` (bits of 7) for [`Bell::marks`]: what a bell
    /// rung once rang for.
    pub(super) fn ring_marked(&self, mark: u8) {
        self.rung.fetch_or(RUNG | (mark << 1), Ordering::AcqRel);
        self.waker.wake();
    }

    /// The marks rings have left (until heard).
    pub(super) fn marks(&self) -> u8 {
        self.rung.load(Ordering::Acquire) >> 1
    }

    /// Whether it rang since it was last heard, hearing it.
    pub(super) fn heard(&self) -> bool {
        self.rung.swap(0, Ordering::AcqRel) & RUNG != 0
    }

    /// Ready once it has rung since it was last heard.
    pub(super) fn rung(&self) -> impl Future<Output = ()> + Send + '_ {
        std::future::poll_fn(move |cx| self.poll_rung(cx))
    }

    fn poll_rung(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_until(cx, Bell::heard)
    }

    /// Ready once `ready` says so, registered to be woken by a ring.
    fn poll_until(&self, cx: &mut Context<'_>, ready: fn(&Bell) -> bool) -> Poll<()> {
        if ready(self) {
            return Poll::Ready(());
        }
        // Registered before the second look: a ring in between still wakes.
        self.waker.register(cx.waker());
        match ready(self) {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    }

    /// Ready once it has rung, ever: for a bell rung once, as a handover
    /// is asked for once.
    #[cfg(test)]
    pub(super) fn rang(&self) -> impl Future<Output = ()> + Send + '_ {
        std::future::poll_fn(move |cx| self.poll_rang(cx))
    }

    /// [`Bell::rang`], polled.
    pub(super) fn poll_rang(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_until(cx, Bell::has_rung)
    }

    /// Whether it has rung, without hearing it.
    pub(super) fn has_rung(&self) -> bool {
        self.rung.load(Ordering::Acquire) & RUNG != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[tokio::test]
    async fn a_ring_before_the_wait_is_heard_once() {
        let bell = Bell::default();
        assert!(bell.rung().now_or_never().is_none(), "not rung yet");
        bell.ring();
        bell.ring();
        assert!(bell.rung().now_or_never().is_some());
        assert!(
            bell.rung().now_or_never().is_none(),
            "two rings, one wake-up"
        );
    }

    #[tokio::test]
    async fn a_ring_wakes_the_waiting_task() {
        let bell = std::sync::Arc::new(Bell::default());
        let waiter = tokio::spawn({
            let bell = bell.clone();
            async move { bell.rung().await }
        });
        tokio::task::yield_now().await;
        bell.ring();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("no panic");
    }

    #[tokio::test]
    async fn rang_stays_ready_once_rung() {
        let bell = Bell::default();
        assert!(bell.rang().now_or_never().is_none());
        bell.ring();
        assert!(bell.rang().now_or_never().is_some());
        assert!(bell.rang().now_or_never().is_some(), "still rung");
    }
}
