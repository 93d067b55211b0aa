//! Tests of `gateway/outbound.rs`.

use super::*;
use crate::telemetry::metrics::Metrics;

fn limits(messages: usize, bytes: usize, policy: SlowConsumerPolicy) -> QueueLimits {
    let metrics = Metrics::new();
    QueueLimits {
        messages,
        bytes,
        policy,
        global: Arc::new(Budget::new(&metrics, "outbound", "k", "e", 1 << 30)),
        bytes_hits: metrics.budget_hit_counter("outbound_per_connection"),
    }
}

#[test]
fn a_full_queue_applies_the_policy() {
    let (out, inbox) = channel(&limits(1, 1000, SlowConsumerPolicy::Drop));
    assert_eq!(out.offer(String::from("a").into()), Offer::Queued);
    assert_eq!(out.offer(String::from("b").into()), Offer::Dropped);
    assert_eq!(inbox.dropped.load(Ordering::Relaxed), 1);
    assert!(!inbox.too_slow.is_cancelled());

    let (out, inbox) = channel(&limits(1, 1000, SlowConsumerPolicy::Disconnect));
    out.offer(String::from("a").into());
    assert_eq!(out.offer(String::from("b").into()), Offer::Disconnected);
    assert!(inbox.too_slow.is_cancelled());
    assert_eq!(inbox.account.too_slow(), Some(TooSlow::Messages));
    drop(inbox);
    assert_eq!(out.offer(String::from("c").into()), Offer::Closed);
}

#[tokio::test]
async fn bytes_fill_a_queue_too_and_are_given_back() {
    let l = limits(100, 10, SlowConsumerPolicy::Disconnect);
    let (out, mut inbox) = channel(&l);
    // Larger than the budget, but the queue is empty.
    assert_eq!(
        out.offer(String::from("0123456789ab").into()),
        Offer::Queued
    );
    assert_eq!(l.global.used(), 12);
    assert_eq!(out.offer(String::from("c").into()), Offer::Disconnected);
    assert_eq!(inbox.account.too_slow(), Some(TooSlow::Bytes));
    assert_eq!(l.bytes_hits.get(), 1);
    assert!(inbox.recv().await.is_some());
    // Given back at the end of the batch.
    assert_eq!(inbox.account.queued(), 12);
    assert!(inbox.try_recv().is_none());
    assert_eq!(inbox.account.queued(), 0);
    assert_eq!(out.offer(String::from("de").into()), Offer::Queued);
    assert_eq!(l.global.used(), 2);
    drop(inbox);
    assert_eq!(l.global.used(), 0);
}
