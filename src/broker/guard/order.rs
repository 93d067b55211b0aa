//! Subscriptions before the publications that follow them, across
//! connections (issue 32). A client that sends SUBSCRIBE, and another that
//! publishes a moment later, expect the subscription to get the publication,
//! as it does on a single-threaded broker (Mosquitto serves sockets in the
//! order they became readable; the Paho suite's `test_request_response` and
//! `test_subscribe_options` rely on it). Here each connection has its own
//! task, and a SUBSCRIBE takes longer in the guard (authorization, one
//! filter at a time) than a PUBLISH, so a publication read after a
//! SUBSCRIBE could reach the router first and miss it.
//!
//! Two things keep that order. A connection about to hand the router a
//! publication after a quiet spell ([`QUIET`]) first yields ([`YIELDS`]), which has
//! the runtime poll for readable sockets and run the tasks woken for them:
//! a SUBSCRIBE that arrived with or just before the publication, on
//! another connection, is read first. (Without it, a task woken later could
//! run first: tokio runs the most recently woken task next.) And a
//! SUBSCRIBE holds a [`Ticket`] from its inspection until it is in the
//! router's queue (or until its connection must wait for something else:
//! room for the guard's answers to a client that does not read, the
//! cluster's prerequisite), and a connection about to hand publications to the
//! router first waits, briefly, for every SUBSCRIBE in flight at that moment
//! (the router then takes them in that order); a connection with a SUBSCRIBE
//! of its own in the same read does not wait (its own order is kept anyway,
//! and two such would wait for each other). The wait is bounded by
//! [`MAX_WAIT`], so a client flooding SUBSCRIBEs can slow publishers by at
//! most that per batch; with none in flight it is one atomic load.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// A publication that follows its connection's previous one within this
/// is part of a stream and does not yield first.
pub(super) const QUIET: Duration = Duration::from_millis(1);

/// How often it yields: a second time lets a SUBSCRIBE that another
/// worker thread is reading reach its ticket (measured: one yield missed
/// 0-3 of 50 such races on a loaded machine, two 0-1, none 23).
pub(super) const YIELDS: usize = 2;

/// How long a publication waits at most for SUBSCRIBEs read before it; a
/// SUBSCRIBE takes tens of microseconds in the guard.
pub(super) const MAX_WAIT: Duration = Duration::from_millis(5);

/// The SUBSCRIBEs read and not yet in the router's queue, over all
/// connections.
#[derive(Default)]
pub(super) struct SubscribeOrder {
    in_flight: AtomicUsize,
    passed: Notify,
}

/// One SUBSCRIBE (or several in one read) on its way to the router; dropping
/// it says it is there (or will never be).
pub(super) struct Ticket(Arc<SubscribeOrder>);

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.passed.notify_waiters();
        }
    }
}

impl SubscribeOrder {
    pub(super) fn begin(self: &Arc<Self>) -> Ticket {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Ticket(Arc::clone(self))
    }

    /// A SUBSCRIBE is in flight.
    pub(super) fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    /// Waits until no SUBSCRIBE is in flight, or [`MAX_WAIT`] passed. Not
    /// for a connection that holds a ticket itself: two such would wait for
    /// each other.
    pub(super) async fn settled(&self) {
        let others = |order: &Self| order.in_flight.load(Ordering::Acquire) > 0;
        if !others(self) {
            return;
        }
        let _ = tokio::time::timeout(MAX_WAIT, async {
            loop {
                let passed = self.passed.notified();
                tokio::pin!(passed);
                passed.as_mut().enable();
                if !others(self) {
                    return;
                }
                passed.await;
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_publication_waits_for_subscribes_in_flight_and_no_longer() {
        let order = Arc::new(SubscribeOrder::default());
        order.settled().await;
        let ticket = order.begin();
        let waiting = tokio::spawn({
            let order = Arc::clone(&order);
            async move { order.settled().await }
        });
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "waits while a SUBSCRIBE is on its way"
        );
        drop(ticket);
        waiting.await.unwrap();
        // A ticket never dropped holds no one longer than MAX_WAIT.
        let stuck = order.begin();
        let started = tokio::time::Instant::now();
        order.settled().await;
        assert_eq!(started.elapsed(), MAX_WAIT);
        drop(stuck);
    }
}
