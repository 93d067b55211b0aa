//! The resume history's memory per Thing, and what recording and replaying
//! cost: the gateway's own `History`, filled as the dispatcher fills it.
//!
//! ```sh
//! cargo bench --bench history
//! HISTORY_THINGS=1000 HISTORY_EVENTS=1000 HISTORY_DATA=400 cargo bench --bench history
//! ```
//!
//! Settings (environment): HISTORY_THINGS Things (100), HISTORY_EVENTS
//! events kept per Thing (1000, `history.events_per_thing`'s default),
//! HISTORY_DATA bytes of each event's `data` string (100, which makes an
//! event of about 250 bytes as published). Each Thing gets 2 x
//! HISTORY_EVENTS events, so every history is full and has trimmed as many.
//!
//! Prints the bytes the history counts per Thing and per event, and the
//! process's resident memory before and after (Linux `/proc/self/statm`),
//! whose difference includes the allocator's overhead and the maps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lmos_sidecar::gateway::history::{Anchor, History, HistoryLimits};
use lmos_sidecar::gateway::subscriptions::Selector;
use lmos_sidecar::lmos::splice::Prepared;
use serde_json::json;

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Resident memory in bytes, if the platform tells.
fn rss() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn main() {
    let things = setting("HISTORY_THINGS", 100);
    let per_thing = setting("HISTORY_EVENTS", 1000);
    let data = "x".repeat(setting("HISTORY_DATA", 100));
    let limits = HistoryLimits {
        events_per_thing: per_thing,
        max_age: Duration::from_secs(600),
        // Unbounded here: the benchmark measures what the count holds.
        max_bytes_per_thing: usize::MAX,
        max_bytes: usize::MAX,
    };
    let mut history = History::new(limits);
    let names: Vec<String> = (0..things)
        .map(|i| format!("urn:uuid:00000000-0000-4000-8000-{i:012}"))
        .collect();
    for t in &names {
        history.follow(t);
    }
    let rss_before = rss();
    let mut payload_bytes = 0usize;
    let mut last_ids = Vec::with_capacity(things);
    let started = Instant::now();
    let total = 2 * per_thing * things;
    for n in 0..2 * per_thing {
        for t in &names {
            let id = uuid::Uuid::new_v4().to_string();
            let payload = json!({"thingID": t, "messageID": id, "messageType": "event", "event": "tick", "data": {"n": n, "text": data}, "timestamp": "2025-01-20T19:00:00.123Z"}).to_string();
            payload_bytes += payload.len();
            let prepared = Arc::new(Prepared::from_payload(payload.as_bytes(), t).unwrap());
            history.record(t, "tick", prepared, Instant::now(), 0);
            if n == per_thing {
                last_ids.push(id);
            }
        }
    }
    let recording = started.elapsed();
    let rss_after = rss();
    let stats = history.stats();
    assert_eq!(stats.events, things * per_thing);

    // Each Thing replays everything after its oldest event held.
    let started = Instant::now();
    let mut replayed = 0;
    for (t, id) in names.iter().zip(&last_ids) {
        let anchor = Anchor::MessageId(id.clone());
        let r = history.replay(t, &anchor, &Selector::AllEvents, Instant::now());
        assert!(!r.gap);
        replayed += r.events.len();
    }
    let replaying = started.elapsed();

    println!(
        "history: {things} Things x {per_thing} events kept, events of {} B as published",
        payload_bytes / total
    );
    println!(
        "  counted: {} B per Thing, {} B per event ({:.1} MiB in all)",
        stats.bytes / things,
        stats.bytes / stats.events,
        stats.bytes as f64 / (1024.0 * 1024.0)
    );
    if let (Some(before), Some(after)) = (rss_before, rss_after) {
        let delta = after.saturating_sub(before);
        println!(
            "  resident: +{:.1} MiB, {} B per Thing, {} B per event",
            delta as f64 / (1024.0 * 1024.0),
            delta / things,
            delta / stats.events
        );
    }
    println!(
        "  record: {:.2} µs per event ({} recorded, half of them trimmed; parsing included)",
        recording.as_secs_f64() * 1e6 / total as f64,
        total
    );
    println!(
        "  replay: {:.1} µs per Thing for {} events each",
        replaying.as_secs_f64() * 1e6 / things as f64,
        replayed / things
    );
}
