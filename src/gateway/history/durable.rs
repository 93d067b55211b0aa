//! The resume history across a restart (issue 31): each turn of the
//! dispatcher puts the entries it recorded in the store's `history` table,
//! a row per Thing ("chunk", `stored.rs`); a row is deleted once every
//! entry in it left the history (trimmed, evicted, its Thing no longer
//! followed). Start-up rebuilds the history from what the table holds,
//! within the same limits.
//!
//! Keys are the Thing's ID, a zero byte and the sequence number of the
//! chunk's first entry, big-endian: the sequence numbers go on from the
//! largest restored, so a chunk never takes the key of one still on disk,
//! and the order of all Things' events (what `max_bytes` evicts first)
//! survives the restart.
//!
//! A row stays while any entry of it is held, so a restart may read
//! entries that had left: start-up applies the limits again, as if the
//! events were recorded again in their order, which trims them again. Only
//! what the byte budget over all Things (`max_bytes`) evicted for another
//! Thing's events, since gone with that Thing, may come back.
//!
//! So the table may hold more than the history: per Thing, the row of its
//! oldest event held still has the entries trimmed before it (a turn's
//! burst of large events, then small ones that trim them by count, left
//! rows of up to 64 large entries held by one small one: the disk grew to
//! many times `max_bytes`, issue 43). The log counts the bytes of every row
//! still held ([`HistoryLog::disk_bytes`], keys included), and `max_bytes`
//! bounds them as it bounds the memory: past it the oldest events of all go
//! until whole rows have gone. Nothing is rewritten; a row is still written
//! once, at the end of its turn.
//!
//! Nothing waits for these writes: events have no acknowledgement to hold
//! back. What the store had committed when the process died is what comes
//! back (see `Store::lazy_table`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::warn;

use super::stored::{decode_row, encode_entry, EntryRef, ReadEntry};
use super::{entry_bytes, Entry, History, ThingHistory};
use crate::store::{StoreError, Table};

/// The store's table for the history.
pub const TABLE: &str = "history";

/// Where the history writes its entries.
pub struct HistoryLog {
    table: Table,
    /// Entries still held and the row's bytes, per chunk (by the sequence
    /// number in its key).
    live: HashMap<u64, Chunk>,
    /// Bytes of the rows of `live`, keys included: what the table holds,
    /// or will once this turn's are written.
    disk_bytes: usize,
    /// This turn's chunks, written at its end ([`HistoryLog::flush`]).
    pending: Vec<Pending>,
    scratch: Vec<u8>,
}

/// A row still held.
#[derive(Debug, Default)]
struct Chunk {
    held: u32,
    /// Its key and value on disk (while pending: as it will be written,
    /// without the entries that already left).
    bytes: usize,
    /// Not written yet: it is among this turn's.
    pending: bool,
}

/// A Thing's entries of this turn.
struct Pending {
    thing: Arc<str>,
    chunk: u64,
    bytes: Vec<u8>,
    /// Where each entry begins in `bytes`.
    starts: Vec<usize>,
}

/// The length of a Thing's keys.
fn key_len(thing: &str) -> usize {
    thing.len() + 9
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
        HistoryLog {
            table,
            live: HashMap::new(),
            disk_bytes: 0,
            pending: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Adds an entry of `thing` (the history's own key) to this turn's
    /// chunk of that Thing; returns the chunk.
    pub(super) fn put(&mut self, thing: &Arc<str>, entry: &Entry, before: i64) -> u64 {
        let i = match self
            .pending
            .iter()
            .rposition(|p| Arc::ptr_eq(&p.thing, thing) || p.thing == *thing)
        {
            Some(i) => i,
            None => {
                self.pending.push(Pending {
                    thing: thing.clone(),
                    chunk: entry.seq,
                    bytes: Vec::new(),
                    starts: Vec::new(),
                });
                self.pending.len() - 1
            }
        };
        let p = &mut self.pending[i];
        let was = p.bytes.len();
        p.starts.push(was);
        let stored = EntryRef {
            seq: entry.seq,
            event: &entry.event,
            time: entry.time,
            wall: entry.wall,
            before,
            message: &entry.prepared,
        };
        encode_entry(&mut p.bytes, &stored, &mut self.scratch);
        let chunk = self.live.entry(p.chunk).or_default();
        let grown = match chunk.held {
            0 => key_len(thing) + p.bytes.len(),
            _ => p.bytes.len() - was,
        };
        chunk.held += 1;
        chunk.pending = true;
        chunk.bytes += grown;
        self.disk_bytes += grown;
        p.chunk
    }

    /// Bytes of the rows still held, keys included (this turn's counted
    /// as if written whole).
    pub(super) fn disk_bytes(&self) -> usize {
        self.disk_bytes
    }

    /// An entry of `chunk` left the history; the chunk's row goes with its
    /// last one.
    pub(super) fn release(&mut self, thing: &str, chunk: u64) {
        let Some(left) = self.live.get_mut(&chunk) else {
            return;
        };
        left.held -= 1;
        if left.held > 0 {
            if left.pending {
                let held = left.held as usize;
                let gone = self
                    .pending
                    .iter()
                    .find(|p| p.chunk == chunk)
                    .map_or(0, |p| {
                        // The entry that left is the one before those held.
                        let at = p.starts.len().saturating_sub(held);
                        let end = p.starts.get(at).copied().unwrap_or(p.bytes.len());
                        end - p.starts.get(at.wrapping_sub(1)).copied().unwrap_or(end)
                    });
                left.bytes -= gone;
                self.disk_bytes -= gone;
            }
            return;
        }
        let bytes = left.bytes;
        self.live.remove(&chunk);
        self.disk_bytes -= bytes;
        if let Some(i) = self.pending.iter().position(|p| p.chunk == chunk) {
            // Never written.
            self.pending.swap_remove(i);
            return;
        }
        let _queued = self.table.delete(key(thing, chunk));
    }

    /// Writes this turn's chunks.
    pub(super) fn flush(&mut self) {
        for p in self.pending.drain(..) {
            let Some(chunk) = self.live.get_mut(&p.chunk) else {
                continue;
            };
            let held = chunk.held as usize;
            // A Thing's entries leave oldest first: those of the chunk that
            // already left are its first ones.
            let Some(&start) = p.starts.get(p.starts.len().saturating_sub(held)) else {
                continue;
            };
            let mut bytes = p.bytes;
            bytes.drain(..start);
            // Its bytes were counted without what left (`release`).
            chunk.pending = false;
            // No one waits for an event to be on disk (see the module's doc).
            let _queued = self.table.put(key(&p.thing, p.chunk), bytes);
        }
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

/// An entry on its way back into the history.
struct Restoring {
    thing: String,
    chunk: u64,
    received: Instant,
    entry: ReadEntry,
}

impl History {
    /// Rebuilds the history from `rows`, loaded from `log`'s table (at
    /// start-up, before any event is recorded), and keeps every later
    /// change there. Ages count across the restart (by the wall clock); the
    /// limits apply as if the events were recorded again in their order.
    pub fn restore(
        &mut self,
        mut log: HistoryLog,
        rows: Rows,
        now: Instant,
        wall_now: i64,
    ) -> Restored {
        let mut restored = Restored::default();
        let mut entries = Vec::with_capacity(rows.len());
        for (k, v) in rows {
            let v_len = v.len();
            let parsed = parse_key(&k).and_then(|(thing, chunk)| {
                let read = decode_row(&v, chunk)?;
                Some((thing.to_owned(), chunk, read))
            });
            let Some((thing, chunk, read)) = parsed.filter(|_| self.is_on()) else {
                let _queued = log.table.delete(k);
                restored.dropped += 1;
                continue;
            };
            let before = entries.len();
            for entry in read {
                self.next_seq = self.next_seq.max(entry.seq.saturating_add(1));
                let age = u64::try_from(wall_now.saturating_sub(entry.wall)).unwrap_or(0);
                let age = Duration::from_micros(age);
                match now.checked_sub(age).filter(|_| age < self.limits.max_age) {
                    Some(received) => entries.push(Restoring {
                        thing: thing.clone(),
                        chunk,
                        received,
                        entry,
                    }),
                    None => restored.dropped += 1,
                }
            }
            // Every entry is counted before any goes in: going in may trim.
            match entries.len() - before {
                0 => {
                    let _queued = log.table.delete(k);
                }
                n => {
                    let bytes = k.len() + v_len;
                    log.disk_bytes += bytes;
                    let held = n as u32;
                    let pending = false;
                    log.live.insert(
                        chunk,
                        Chunk {
                            held,
                            bytes,
                            pending,
                        },
                    );
                }
            }
        }
        entries.sort_unstable_by_key(|r| r.entry.seq);
        self.log = Some(log);
        for r in entries {
            let (thing, e) = (r.thing, r.entry);
            if !self.things.contains_key(thing.as_str()) {
                let mut h = ThingHistory::new(e.before);
                let until = now + self.limits.max_age;
                h.linger_until = Some(until);
                self.expiries.push_back((until, thing.clone()));
                self.things.insert(thing.as_str().into(), h);
                restored.things.push(thing.clone());
            }
            let prepared = Arc::new(e.message);
            let entry = Entry {
                seq: e.seq,
                chunk: r.chunk,
                time: e.time,
                received: r.received,
                wall: e.wall,
                bytes: entry_bytes(&e.event, &prepared),
                event: e.event.into(),
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
    use crate::gateway::history::{Anchor, HistoryLimits, Replay};
    use crate::gateway::subscriptions::Selector;
    use crate::lmos::splice::Prepared;
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

    /// The first sequence number of each row on disk.
    async fn rows(store: &Store) -> Vec<u64> {
        store.barrier().durable().await.unwrap();
        let rows = store.table(TABLE).load().unwrap();
        rows.iter().map(|(k, _)| parse_key(k).unwrap().1).collect()
    }

    fn temp_dir() -> std::path::PathBuf {
        std::env::temp_dir().join(format!("lmos-history-{}", uuid::Uuid::new_v4()))
    }

    #[tokio::test]
    async fn the_history_comes_back_within_its_limits_and_numbers_on() {
        let dir = temp_dir();
        let store = open(&dir);
        let (mut h, restored) = history(&store, BASE);
        assert_eq!(restored, Restored::default());
        h.follow(T);
        // A turn each.
        for i in 0..5 {
            h.record(T, "e", event(i), Instant::now(), BASE + i64::from(i));
            h.flush();
        }
        assert_eq!(rows(&store).await, [2, 3, 4], "trimmed events are deleted");
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
        h.flush();
        assert_eq!(h.next_seq, 6, "numbered on from the restored");
        assert_eq!(rows(&store).await, [3, 4, 5]);
        store.close();
        drop((h, store));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_turn_is_one_row_that_goes_with_its_last_entry() {
        let dir = temp_dir();
        let store = open(&dir);
        let (mut h, _) = history(&store, BASE);
        h.follow(T);
        let now = Instant::now();
        // Five in one turn, three held: the row holds those three.
        for i in 0..5 {
            h.record(T, "e", event(i), now, BASE + i64::from(i));
        }
        h.flush();
        assert_eq!(rows(&store).await, [0]);
        let row = &store.table(TABLE).load().unwrap()[0].1;
        let held: Vec<u64> = super::super::stored::decode_row(row, 0)
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(held, [2, 3, 4], "what left in the turn is not written");
        // Two more: the first row still holds m4.
        h.record(T, "e", event(5), now, BASE + 5);
        h.record(T, "e", event(6), now, BASE + 6);
        h.flush();
        assert_eq!(rows(&store).await, [0, 5]);
        store.close();
        drop((h, store));

        // m2 and m3 come back from the first row and leave again.
        let store = open(&dir);
        let (mut h, restored) = history(&store, BASE + 10_000_000);
        assert_eq!(restored.events, 3);
        assert_eq!(
            restored.dropped, 0,
            "entries trimmed again are not lost ones"
        );
        let now = Instant::now();
        let r = h.replay(
            T,
            &Anchor::MessageId("m3".into()),
            &Selector::AllEvents,
            now,
        );
        assert!(r.gap, "m3 had left before the restart");
        assert_eq!(ids(&r), ["m4", "m5", "m6"]);
        let r = h.replay(
            T,
            &Anchor::Time(BASE + 3_000_000),
            &Selector::AllEvents,
            now,
        );
        assert!(!r.gap, "complete since m3's time");
        // m4 leaves: so does its row.
        h.record(T, "e", event(7), now, BASE + 7);
        h.flush();
        assert_eq!(rows(&store).await, [5, 7]);
        // Its Thing no longer followed: every row goes.
        h.leave(T, now);
        h.expire(now + Duration::from_secs(61));
        assert_eq!(rows(&store).await, Vec::<u64>::new());
        store.close();
        drop((h, store));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_row_written_before_chunks_comes_back() {
        let dir = temp_dir();
        let store = open(&dir);
        let legacy = json!({"event": "e", "time": BASE, "wall": BASE, "before": i64::MIN, "message": {"tail": "\"thingID\":\"urn:t\",\"messageID\":\"old\"}", "traceparent": null, "tracestate": null, "message_type": "event", "message_id": "old", "timestamp": null}});
        let table = store.table(TABLE);
        let _queued = table.put(key(T, 41), legacy.to_string().into_bytes());
        let _queued = table.put(key(T, 40), b"unreadable".to_vec());
        store.barrier().durable().await.unwrap();
        let (mut h, restored) = history(&store, BASE + 1_000_000);
        assert_eq!((restored.events, restored.dropped), (1, 1));
        let now = Instant::now();
        let r = h.replay(T, &Anchor::Time(i64::MIN + 1), &Selector::AllEvents, now);
        assert_eq!(ids(&r), ["old"]);
        h.record(T, "e", event(1), now, BASE + 1_000_000);
        h.flush();
        assert_eq!(
            rows(&store).await,
            [41, 42],
            "the unreadable row is deleted"
        );
        store.close();
        drop((h, store));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn ages_count_across_the_restart() {
        let dir = temp_dir();
        let store = open(&dir);
        let (mut h, _) = history(&store, BASE);
        h.follow(T);
        h.record(T, "e", event(0), Instant::now(), BASE);
        h.flush();
        h.record(T, "e", event(1), Instant::now(), BASE + 30_000_000);
        h.flush();
        store.barrier().durable().await.unwrap();
        store.close();
        drop((h, store));

        // 61 s after the first, 31 s after the second: max_age is 60 s.
        let store = open(&dir);
        let (h, restored) = history(&store, BASE + 61_000_000);
        assert_eq!((restored.events, restored.dropped), (1, 1));
        assert_eq!(h.stats().events, 1);
        assert_eq!(rows(&store).await.len(), 1);
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
