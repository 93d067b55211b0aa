//! Tests of `gateway/outbound.rs`.

use std::time::Duration;

use super::*;
use crate::telemetry::metrics::Metrics;

/// What a message of `len` bytes counts as.
const fn cost(len: usize) -> usize {
    len + PER_MESSAGE
}

fn limits(messages: usize, bytes: usize, policy: SlowConsumerPolicy) -> QueueLimits {
    let metrics = Metrics::new();
    QueueLimits {
        bounds: Bounds {
            messages,
            bytes,
            stall_ms: 0,
        },
        policy,
        global: Arc::new(Budget::new(&metrics, "outbound", "k", "e", 1 << 30)),
        bytes_hits: metrics.budget_hit_counter("outbound_per_connection"),
        dropped_oldest: metrics.dropped_counter("slow_consumer_oldest"),
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
    assert_eq!(l.global.used(), cost(12));
    assert_eq!(out.offer(String::from("c").into()), Offer::Disconnected);
    assert_eq!(inbox.account.too_slow(), Some(TooSlow::Bytes));
    assert_eq!(l.bytes_hits.get(), 1);
    assert!(inbox.recv().await.is_some());
    // Given back at the end of the batch.
    assert_eq!(inbox.account.queued(), cost(12));
    assert!(inbox.try_recv().is_none());
    assert_eq!(inbox.account.queued(), 0);
    assert_eq!(out.offer(String::from("de").into()), Offer::Queued);
    assert_eq!(l.global.used(), cost(2));
    drop(inbox);
    assert_eq!(l.global.used(), 0);
}

fn texts(inbox: &mut Inbox) -> Vec<String> {
    std::iter::from_fn(|| inbox.try_recv())
        .map(|f| f.into_text().to_string())
        .collect()
}

fn batch(texts: &[&str]) -> Vec<Queued> {
    texts
        .iter()
        .map(|t| Queued::new(String::from(*t).into()))
        .collect()
}

#[test]
fn a_batch_is_offered_message_by_message_in_order() {
    let l = limits(3, 1000, SlowConsumerPolicy::Drop);
    let (out, mut inbox) = channel(&l);
    let offered = out.offer_batch(batch(&["a", "b", "c", "d", "e"]), 1);
    assert_eq!((offered.queued, offered.dropped, offered.end), (3, 2, None));
    assert_eq!(inbox.dropped.load(Ordering::Relaxed), 2);
    assert_eq!(
        (inbox.account.queued(), l.global.used()),
        (3 * cost(1), 3 * cost(1))
    );
    assert_eq!(texts(&mut inbox), ["a", "b", "c"]);
    assert_eq!((inbox.account.queued(), l.global.used()), (0, 0));

    // Bytes: the first always fits an empty queue; the policy closes.
    let l = limits(100, 4, SlowConsumerPolicy::Disconnect);
    let (out, mut inbox) = channel(&l);
    let offered = out.offer_batch(batch(&["12345", "6", "7"]), 1);
    assert_eq!(offered.end, Some(Offer::Disconnected));
    assert_eq!(offered.queued, 1, "what came before the full one is queued");
    assert_eq!(inbox.account.too_slow(), Some(TooSlow::Bytes));
    assert_eq!(texts(&mut inbox), ["12345"]);
}

#[tokio::test]
async fn messages_count_until_the_connection_asks_for_more() {
    let l = limits(2, 1000, SlowConsumerPolicy::Drop);
    let (out, mut inbox) = channel(&l);
    assert_eq!(out.offer_batch(batch(&["a", "b"]), 1).queued, 2);
    assert_eq!(inbox.recv().await.unwrap().into_text().as_str(), "a");
    // Taken, not yet written: still counted.
    assert_eq!(out.offer(String::from("c").into()), Offer::Dropped);
    assert!(inbox.try_recv().is_some());
    assert!(inbox.try_recv().is_none(), "the end of a batch gives back");
    assert_eq!(out.offer_batch(batch(&["d", "e"]), 1).queued, 2);
    drop(inbox);
    assert_eq!(l.global.used(), 0, "what was still queued no longer counts");
    assert_eq!(out.offer(String::from("f").into()), Offer::Closed);
}

#[test]
fn a_message_slot_costs_no_more_than_it_is_counted() {
    assert!(std::mem::size_of::<Queued>() <= PER_MESSAGE);
}

fn text(t: &str) -> Frame {
    String::from(t).into()
}

fn stalling(policy: SlowConsumerPolicy) -> QueueLimits {
    let mut l = limits(1_000_000, 1 << 20, policy);
    l.bounds.stall_ms = 30_000;
    l
}

#[tokio::test(start_paused = true)]
async fn a_queue_that_does_not_move_for_the_stall_time_is_too_slow() {
    let (out, mut inbox) = channel(&stalling(SlowConsumerPolicy::Disconnect));
    // Idle for longer than the stall time: an empty queue is not stalled,
    // and a burst starts its clock.
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(out.offer(text("a")), Offer::Queued);
    assert_eq!(out.offer(text("b")), Offer::Queued);
    tokio::time::advance(Duration::from_secs(29)).await;
    // Taking one is a move.
    assert!(inbox.recv().await.is_some());
    tokio::time::advance(Duration::from_secs(29)).await;
    assert_eq!(out.offer(text("c")), Offer::Queued);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(out.offer(text("d")), Offer::Disconnected);
    assert_eq!(inbox.account.too_slow(), Some(TooSlow::Stalled));
    assert!(inbox.too_slow.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn under_drop_a_stalled_queue_drops_the_newest_until_it_moves() {
    let l = stalling(SlowConsumerPolicy::Drop);
    let (out, mut inbox) = channel(&l);
    assert_eq!(out.offer(text("a")), Offer::Queued);
    tokio::time::advance(Duration::from_secs(30)).await;
    let offered = out.offer_batch(batch(&["b", "c"]), l.global.now_ms());
    assert_eq!((offered.queued, offered.dropped), (0, 2));
    assert_eq!(inbox.account.too_slow(), None, "still connected");
    assert_eq!(texts(&mut inbox), ["a"]);
    assert_eq!(out.offer(text("d")), Offer::Queued, "it moved");
    assert_eq!(texts(&mut inbox), ["d"]);
}

#[tokio::test(start_paused = true)]
async fn a_queue_the_sidecar_drains_itself_never_stalls() {
    let (out, _inbox) = channel(&stalling(SlowConsumerPolicy::Disconnect));
    out.account().exempt();
    assert_eq!(out.offer(text("a")), Offer::Queued);
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(out.offer(text("b")), Offer::Queued);
}

#[test]
fn drop_oldest_keeps_the_newest_within_the_budget() {
    let l = limits(1000, cost(4) * 3, SlowConsumerPolicy::DropOldest);
    let (out, mut inbox) = channel(&l);
    // Up to twice the budget is queued: room to drop the oldest from.
    for i in 0..6 {
        assert_eq!(out.offer(format!("m{i:03}").into()), Offer::Queued);
    }
    // Past twice the budget, the newest go (the consumer took nothing).
    assert_eq!(out.offer(String::from("m006").into()), Offer::Dropped);
    let taken: Vec<String> = std::iter::from_fn(|| inbox.try_recv())
        .map(|f| f.into_text().to_string())
        .collect();
    assert_eq!(
        taken,
        ["m003", "m004", "m005"],
        "the newest within the budget"
    );
    assert_eq!(inbox.dropped.load(Ordering::Relaxed), 4);
    assert_eq!(l.dropped_oldest.get(), 3);
    assert_eq!(inbox.account.queued(), 0, "all given back");
    assert!(!inbox.too_slow.is_cancelled());
    // Within the budget nothing is dropped.
    for i in 7..10 {
        assert_eq!(out.offer(format!("m{i:03}").into()), Offer::Queued);
    }
    let taken: Vec<String> = std::iter::from_fn(|| inbox.try_recv())
        .map(|f| f.into_text().to_string())
        .collect();
    assert_eq!(taken, ["m007", "m008", "m009"]);
}
