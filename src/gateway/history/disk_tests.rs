//! The history's rows on disk against `max_bytes` (issue 43): a Thing's
//! turn of large events, trimmed by count by small ones in later turns,
//! left its row on disk as long as the small one of that turn was held.
//! Thing after Thing, the table grew to many times `max_bytes` while the
//! memory stayed within it (5.5 × here before the fix). Now the rows held
//! count against `max_bytes` too: the table holds at most `max_bytes`, keys
//! and values (an event larger than that alone is evicted).

use super::*;
use crate::store::{Store, StoreConfig};
use serde_json::json;

/// 2025-01-20T19:00:00Z in µs.
const BASE: i64 = 1_737_399_600_000_000;
const MAX_BYTES: usize = 200_000;
const LARGE: usize = 8_000;

fn event(thing: &str, i: usize, padding: usize) -> Arc<Prepared> {
    let v = json!({"thingID": thing, "messageID": format!("m{i}"), "messageType": "event", "event": "e", "data": "x".repeat(padding)});
    Arc::new(Prepared::from_payload(v.to_string().as_bytes(), thing).unwrap())
}

/// Keys and values of the history's table, once the store wrote them.
async fn table_bytes(store: &Store) -> usize {
    store.barrier().durable().await.unwrap();
    let rows = store.table(TABLE).load().unwrap();
    rows.iter().map(|(k, v)| k.len() + v.len()).sum()
}

#[tokio::test]
async fn the_rows_on_disk_stay_within_max_bytes() {
    let dir = std::env::temp_dir().join(format!("lmos-history-{}", uuid::Uuid::new_v4()));
    let store = Store::open(&StoreConfig {
        dir: dir.clone(),
        ..StoreConfig::default()
    })
    .unwrap();
    let mut h = History::new(HistoryLimits {
        events_per_thing: 8,
        max_age: Duration::from_secs(3600),
        max_bytes_per_thing: usize::MAX,
        max_bytes: MAX_BYTES,
    });
    let log = HistoryLog::new(store.table(TABLE));
    let rows = log.load().unwrap();
    let now = Instant::now();
    h.restore(log, rows, now, BASE);
    let (mut n, mut largest) = (0, 0);
    for t in 0..40 {
        let thing = format!("urn:t{t}");
        h.follow(&thing);
        // One turn: seven large events and a small one, one row.
        for _ in 0..7 {
            h.record(&thing, "e", event(&thing, n, LARGE), now, BASE);
            n += 1;
        }
        h.record(&thing, "e", event(&thing, n, 0), now, BASE);
        n += 1;
        h.flush();
        // Seven small ones, a turn each, trim the large ones by count.
        for _ in 0..7 {
            h.record(&thing, "e", event(&thing, n, 0), now, BASE);
            n += 1;
            h.flush();
        }
        let on_disk = table_bytes(&store).await;
        largest = largest.max(on_disk);
        assert_eq!(
            on_disk,
            h.log.as_ref().unwrap().disk_bytes(),
            "counted as held"
        );
    }
    assert!(
        largest <= MAX_BYTES,
        "the table held {largest} bytes, {:.1} × max_bytes",
        largest as f64 / MAX_BYTES as f64
    );
    // The latest Thing's events are all held; the memory stays bounded.
    let stats = h.stats();
    assert!(stats.events >= 8 && stats.bytes <= MAX_BYTES, "{stats:?}");
    store.close();
    drop((h, store));
    std::fs::remove_dir_all(dir).unwrap();
}
