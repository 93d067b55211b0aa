//! The resume history across a restart (issue 31): each entry is put in the
//! store's `history` table as it is recorded and deleted as it leaves the
//! history (trimmed, evicted, its Thing no longer followed); start-up
//! rebuilds the history from what the table holds, within the same limits.
//!
//! Keys are the Thing's ID, a zero byte and the entry's sequence number,
//! big-endian: the sequence numbers go on from the largest restored, so an
//! entry never takes the key of one still on disk, and the order of all
//! Things' events (what `max_bytes` evicts first) survives the restart.
//!
//! Nothing waits for these writes: events have no acknowledgement to hold
//! back. What the store had committed when the process died is what comes
//! back (with `store.sync = "every_batch"`, all but the last batch at most).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tracing::warn;

use super::{entry_bytes, Entry, History, ThingHistory};
use crate::lmos::splice::Prepared;
use crate::store::{StoreError, Table};

/// The store's table for the history.
pub const TABLE: &str = "history";

/// Where the history writes its entries.
#[derive(Clone)]
pub struct HistoryLog {
    table: Table,
}

/// An entry as stored.
#[derive(Serialize)]
struct StoredRef<'a> {
    event: &'a str,
    time: i64,
    wall: i64,
    /// The Thing's latest event time before this one: its `complete_since`
    /// after a restart when this is the oldest entry left.
    before: i64,
    message: &'a Prepared,
}

#[derive(Deserialize)]
struct Stored {
    event: String,
    time: i64,
    wall: i64,
    before: i64,
    message: Prepared,
}

fn key(thing: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(thing.len() + 9);
    k.extend_from_slice(thing.as_bytes());
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The Thing and sequence number of a key (the last nine bytes are the
/// separator and the number, whatever the Thing's ID holds).
fn parse_key(k: &[u8]) -> Option<(&str, u64)> {
    let split = k.len().checked_sub(9)?;
    if k[split] != 0 {
        return None;
    }
    let seq = u64::from_be_bytes(k[split + 1..].try_into().ok()?);
    Some((std::str::from_utf8(&k[..split]).ok()?, seq))
}

impl std::fmt::Debug for HistoryLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HistoryLog")
    }
}

impl HistoryLog {
    pub fn new(table: Table) -> HistoryLog {
        HistoryLog { table }
    }

    pub(super) fn put(&self, thing: &str, entry: &Entry, before: i64) {
        let stored = StoredRef {
            event: &entry.event,
            time: entry.time,
            wall: entry.wall,
            before,
            message: &entry.prepared,
        };
        // Serializing plain strings and numbers cannot fail.
        let value = serde_json::to_vec(&stored).unwrap_or_default();
        // No one waits for an event to be on disk (see the module's doc).
        let _queued = self.table.put(key(thing, entry.seq), value);
    }

    pub(super) fn delete(&self, thing: &str, seq: u64) {
        let _queued = self.table.delete(key(thing, seq));
    }

    /// What the table holds (start-up).
    pub fn load(&self) -> Result<Rows, StoreError> {
        self.table.load()
    }
}

/// A table's keys and values, as loaded.
pub type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// What a start-up brought back.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// The Things with a history again: the gateway follows their events
    /// (each lingers for `max_age`, as if its subscribers had just left).
    pub things: Vec<String>,
    pub events: usize,
    /// Entries on disk not taken back: too old, over a limit, unreadable.
    pub dropped: usize,
}

impl History {
    /// Rebuilds the history from `rows`, loaded from `log`'s table (at
    /// start-up, before any event is recorded), and keeps every later
    /// change there. Ages count across the restart (by the wall clock); the
    /// limits apply as if the events were recorded again in their order.
    pub fn restore(
        &mut self,
        log: HistoryLog,
        rows: Rows,
        now: Instant,
        wall_now: i64,
    ) -> Restored {
        let mut restored = Restored::default();
        let mut entries = Vec::with_capacity(rows.len());
        for (k, v) in rows {
            let parsed = parse_key(&k).zip(serde_json::from_slice::<Stored>(&v).ok());
            match parsed {
                Some(((thing, seq), stored)) if self.is_on() => {
                    entries.push((thing.to_owned(), seq, stored))
                }
                _ => {
                    let _queued = log.table.delete(k);
                    restored.dropped += 1;
                }
            }
        }
        entries.sort_unstable_by_key(|(_, seq, _)| *seq);
        self.log = Some(log);
        for (thing, seq, stored) in entries {
            self.next_seq = self.next_seq.max(seq.saturating_add(1));
            let age = u64::try_from(wall_now.saturating_sub(stored.wall)).unwrap_or(0);
            let age = Duration::from_micros(age);
            let received = now.checked_sub(age).filter(|_| age < self.limits.max_age);
            let Some(received) = received else {
                if let Some(log) = &self.log {
                    log.delete(&thing, seq);
                }
                restored.dropped += 1;
                continue;
            };
            if !self.things.contains_key(thing.as_str()) {
                let mut h = ThingHistory::new(stored.before);
                let until = now + self.limits.max_age;
                h.linger_until = Some(until);
                self.expiries.push_back((until, thing.clone()));
                self.things.insert(thing.as_str().into(), h);
                restored.things.push(thing.clone());
            }
            let prepared = Arc::new(stored.message);
            let entry = Entry {
                seq,
                time: stored.time,
                received,
                wall: stored.wall,
                bytes: entry_bytes(&stored.event, &prepared),
                event: stored.event.into(),
                prepared,
            };
            self.insert(&thing, entry, now);
        }
        let stats = self.stats();
        restored.events = stats.events;
        if restored.dropped > 0 {
            warn!(
                dropped = restored.dropped,
                "Some events of the resume history on disk were not restored (too old, over a limit or unreadable)."
            );
        }
        restored
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::history::Anchor;
    use crate::gateway::history::HistoryLimits;
    use crate::gateway::history::Replay;

    use crate::gateway::subscriptions::Selector;
    use crate::store::{Store, StoreConfig};
    use serde_json::json;

    const T: &str = "urn:t";
    /// 2025-01-20T19:00:00Z in µs.
    const BASE: i64 = 1_737_399_600_000_000;

    fn open(dir: &std::path::Path) -> Store {
        Store::open(&StoreConfig {
            dir: dir.to_path_buf(),
            ..StoreConfig::default()
        })
        .unwrap()
    }

    fn limits(events: usize) -> HistoryLimits {
        HistoryLimits {
            events_per_thing: events,
            max_age: Duration::from_secs(60),
            max_bytes_per_thing: usize::MAX,
            max_bytes: usize::MAX,
        }
    }

    /// Event `m{i}` stamped `i` seconds after BASE.
    fn event(i: u32) -> Arc<Prepared> {
        let v = json!({"thingID": T, "messageID": format!("m{i}"), "messageType": "event", "event": "e", "data": i, "timestamp": format!("2025-01-20T19:00:{i:02}Z")});
        Arc::new(Prepared::from_payload(v.to_string().as_bytes(), T).unwrap())
    }

    fn ids(r: &Replay) -> Vec<String> {
        let id = |p: &Arc<Prepared>| p.message_id.clone().unwrap();
        r.events.iter().map(|(_, p)| id(p)).collect()
    }

    /// A history of at most 3 events per Thing, writing to `store`.
    fn history(store: &Store, wall: i64) -> (History, Restored) {
        let mut h = History::new(limits(3));
        let log = HistoryLog::new(store.table(TABLE));
        let rows = log.load().unwrap();
        let restored = h.restore(log, rows, Instant::now(), wall);
        (h, restored)
    }

    #[tokio::test]
    async fn the_history_comes_back_within_its_limits_and_numbers_on() {
        let dir = std::env::temp_dir().join(format!("lmos-history-{}", uuid::Uuid::new_v4()));
        let store = open(&dir);
        let (mut h, restored) = history(&store, BASE);
        assert_eq!(restored, Restored::default());
        h.follow(T);
        for i in 0..5 {
            h.record(T, "e", event(i), Instant::now(), BASE + i64::from(i));
        }
        store.barrier().durable().await.unwrap();
        let on_disk = store.table(TABLE).load().unwrap();
        assert_eq!(on_disk.len(), 3, "trimmed events are deleted");
        store.close();
        drop((h, store));

        let store = open(&dir);
        let (mut h, restored) = history(&store, BASE + 10_000_000);
        assert_eq!((restored.things, restored.events), (vec![T.to_owned()], 3));
        assert!(h.next_expiry().is_some(), "it lingers, followed");
        let now = Instant::now();
        let after = |id: &str| Anchor::MessageId(id.into());
        let r = h.replay(T, &after("m2"), &Selector::AllEvents, now);
        assert!(!r.gap);
        assert_eq!(ids(&r), ["m3", "m4"]);
        let r = h.replay(T, &after("m0"), &Selector::AllEvents, now);
        assert!(r.gap, "m0 was trimmed before the restart");
        assert_eq!(ids(&r), ["m2", "m3", "m4"]);
        // m1 (second 1) was the latest trimmed: later times are complete.
        let r = h.replay(
            T,
            &Anchor::Time(BASE + 1_000_000),
            &Selector::AllEvents,
            now,
        );
        assert!(!r.gap);
        let r = h.replay(T, &Anchor::Time(BASE), &Selector::AllEvents, now);
        assert!(r.gap);
        h.record(T, "e", event(5), now, BASE + 10_000_000);
        assert_eq!(h.next_seq, 6, "numbered on from the restored");
        store.barrier().durable().await.unwrap();
        let keys: Vec<u64> = store
            .table(TABLE)
            .load()
            .unwrap()
            .iter()
            .map(|(k, _)| parse_key(k).unwrap().1)
            .collect();
        assert_eq!(keys, [3, 4, 5]);
        store.close();
        drop((h, store));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn ages_count_across_the_restart() {
        let dir = std::env::temp_dir().join(format!("lmos-history-{}", uuid::Uuid::new_v4()));
        let store = open(&dir);
        let (mut h, _) = history(&store, BASE);
        h.follow(T);
        h.record(T, "e", event(0), Instant::now(), BASE);
        h.record(T, "e", event(1), Instant::now(), BASE + 30_000_000);
        store.barrier().durable().await.unwrap();
        store.close();
        drop((h, store));

        // 61 s after the first, 31 s after the second: max_age is 60 s.
        let store = open(&dir);
        let (h, restored) = history(&store, BASE + 61_000_000);
        assert_eq!((restored.events, restored.dropped), (1, 1));
        assert_eq!(h.stats().events, 1);
        store.barrier().durable().await.unwrap();
        assert_eq!(store.table(TABLE).load().unwrap().len(), 1);
        store.close();
        drop((h, store));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn keys_hold_the_thing_and_the_big_endian_sequence() {
        let k = key("urn:a\0b", 258);
        assert_eq!(parse_key(&k), Some(("urn:a\0b", 258)));
        assert!(key("urn:a", 1) < key("urn:a", 256), "ordered by number");
        assert_eq!(parse_key(b"short"), None);
    }
}
