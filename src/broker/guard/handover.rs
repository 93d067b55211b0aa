//! How a connection holding a client ID is asked to hand it over to a new
//! connection of the same client ID, or to end at shutdown, and tells that
//! it has.
//!
//! A client that sends DISCONNECT and at once connects again can have its
//! new CONNECT read before the old connection reads the DISCONNECT (two
//! sockets, two tasks). The session must then end as the DISCONNECT said,
//! so the new connection asks the old one to finish reading what its client
//! sent before and waits until it has closed.
//!
//! At shutdown the sessions table asks every live connection to end the
//! same way (`Sessions::shut_down`): each connection waits on one bell for
//! both, where a wait on the shutdown token took a 72-byte waiter in every
//! idle client's task (issue 48).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Poll};

use tokio::sync::Notify;

use super::bell::Bell;

/// Both signals in one allocation: every live session holds one (two
/// cancellation tokens were some 250 bytes per idle client, issue 32).
#[derive(Debug, Clone, Default)]
pub struct Handover(Arc<Signals>);

#[derive(Debug, Default)]
struct Signals {
    /// Rung once for a handover, marked [`SHUTDOWN`] for shutdown; one
    /// waiter, the connection holding the session.
    asked: Bell,
    done: Signal,
}

/// The mark on [`Signals::asked`] at shutdown.
const SHUTDOWN: u8 = 1;

/// Why a connection was asked to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// By the next connection of its client ID.
    HandOver,
    /// By the sidecar, stopping (it wins over a handover asked as well).
    Shutdown,
}

impl Handover {
    /// The next connection asks this one to hand the session over.
    pub fn ask(&self) {
        self.0.asked.ring();
    }

    /// The sidecar is stopping.
    pub fn shut_down(&self) {
        self.0.asked.ring_marked(SHUTDOWN);
    }

    /// Ready once asked, saying why. Every idle connection's task holds
    /// this future: a reference, nothing more.
    pub fn asked(&self) -> impl Future<Output = Asked> + Send + '_ {
        let asked = &self.0.asked;
        std::future::poll_fn(move |cx| {
            ready!(asked.poll_rang(cx));
            Poll::Ready(match asked.marks() & SHUTDOWN {
                0 => Asked::HandOver,
                _ => Asked::Shutdown,
            })
        })
    }

    /// This connection has closed.
    pub fn finish(&self) {
        self.0.done.set();
    }

    pub async fn finished(&self) {
        self.0.done.wait().await
    }

    #[cfg(test)]
    pub fn is_asked(&self) -> bool {
        self.0.asked.has_rung()
    }
}

/// Set once; waited for by anyone.
#[derive(Debug, Default)]
struct Signal {
    set: AtomicBool,
    notify: Notify,
}

impl Signal {
    fn set(&self) {
        self.set.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    async fn wait(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        // Registered before the check: a `set` in between wakes it. Only
        // `set` notifies, so the wake-up means it is set.
        notified.as_mut().enable();
        if self.set.load(Ordering::Acquire) {
            return;
        }
        notified.await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[tokio::test]
    async fn asked_says_why() {
        let handover = Handover::default();
        assert!(handover.asked().now_or_never().is_none());
        handover.ask();
        assert_eq!(handover.asked().now_or_never(), Some(Asked::HandOver));
        handover.shut_down();
        assert_eq!(handover.asked().now_or_never(), Some(Asked::Shutdown));
        let stopping = Handover::default();
        stopping.shut_down();
        assert_eq!(stopping.asked().now_or_never(), Some(Asked::Shutdown));
    }

    #[tokio::test]
    async fn finished_is_ready_after_finish_even_if_waited_for_late() {
        let handover = Handover::default();
        assert!(handover.finished().now_or_never().is_none());
        handover.finish();
        assert!(handover.finished().now_or_never().is_some());
    }
}
