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

use serde::{Deserialize, Serialize};
use tracing::warn;

use super::*;
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
}

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
    /// Rebuilds the history from `log`'s table (at start-up, before any
    /// event is recorded) and keeps every later change there. Ages count
    /// across the restart (by the wall clock); the limits apply as if the
    /// events were recorded again in their order.
    pub fn restore(
        &mut self,
        log: HistoryLog,
        now: Instant,
        wall_now: i64,
    ) -> Result<Restored, StoreError> {
        let rows = log.table.load()?;
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
        Ok(restored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hold_the_thing_and_the_big_endian_sequence() {
        let k = key("urn:a\0b", 258);
        assert_eq!(parse_key(&k), Some(("urn:a\0b", 258)));
        assert!(key("urn:a", 1) < key("urn:a", 256), "ordered by number");
        assert_eq!(parse_key(b"short"), None);
    }
}
