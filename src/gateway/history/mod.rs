//! The resume history: per Thing, the latest events the gateway saw, bounded
//! by count and age, so a consumer that reconnects can ask for what it
//! missed. Pure data, no I/O: the dispatcher passes the clocks in.
//!
//! A Thing's history lives while the gateway follows the Thing's events: from
//! its first WebSocket subscriber on, and for `max_age` after its last one
//! left (it "lingers"), so that a consumer that reconnects within that time
//! finds what was published while it was away. Things no WebSocket consumer
//! ever subscribed to are not followed and cost nothing.
//!
//! A consumer resumes from the last message ID it saw (the events after it)
//! or from a time (the events whose `timestamp` is later, to the
//! microsecond). The replay is marked as a gap, and holds all it has, when
//! the ID is not held (trimmed, or from before the history began), or when
//! the history trimmed an event later than the time. A time before the
//! history began is no gap: the Kotlin client sends "now" with every
//! subscription, which would make each first subscription to a Thing one.
//!
//! Besides count and age, bytes bound it: `max_bytes_per_thing` (a Thing's
//! oldest events go first) and `max_bytes` over all Things (the oldest
//! events of all go first, whichever Thing they belong to), so large events
//! over many Things cannot take the memory (issue 30).
//!
//! With a durable store, every entry is also put in the store as it is
//! recorded and deleted as it is trimmed (`durable.rs`), so that the
//! history survives a restart (issue 31): the writes are queued for the
//! store's writer and never waited for here.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

use super::budget::Budget;
use super::subscriptions::Selector;
use crate::lmos::splice::Prepared;

mod durable;
mod stored;
pub use durable::{HistoryLog, Restored, Rows, TABLE};

/// Bounds of each Thing's history; either one 0 turns the history off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLimits {
    pub events_per_thing: usize,
    pub max_age: Duration,
    pub max_bytes_per_thing: usize,
    pub max_bytes: usize,
}

impl HistoryLimits {
    pub fn is_on(&self) -> bool {
        self.events_per_thing > 0 && !self.max_age.is_zero()
    }
}

/// Where a consumer resumes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anchor {
    /// The `messageID` of the last event it saw.
    MessageId(String),
    /// The `timestamp` of the last event it saw (the Kotlin `lastEvent`), in
    /// microseconds since the epoch.
    Time(i64),
}

/// What a resuming consumer is sent before the live stream.
#[derive(Debug, Default)]
pub struct Replay {
    /// The history does not reach back to the anchor: events may have been
    /// lost before the first one replayed.
    pub gap: bool,
    /// The events after the anchor the selector wants, oldest first, with
    /// their event names.
    pub events: Vec<(Arc<str>, Arc<Prepared>)>,
}

#[derive(Debug)]
struct Entry {
    /// Its place in the order of all Things' events.
    seq: u64,
    /// The store's row that holds it (see `durable.rs`).
    chunk: u64,
    event: Arc<str>,
    /// The event's `timestamp` (else when it arrived), µs since the epoch.
    time: i64,
    received: Instant,
    /// When it arrived, µs since the epoch: its age across a restart.
    wall: i64,
    prepared: Arc<Prepared>,
    bytes: usize,
}

#[derive(Debug)]
struct ThingHistory {
    entries: VecDeque<Entry>,
    /// The latest `time` of the events trimmed: every later event is held.
    complete_since: i64,
    /// The latest `time` of all events recorded: what a restart takes as
    /// `complete_since` when every earlier event is gone.
    max_time: i64,
    bytes: usize,
    /// Set while no consumer subscribes: when the history is dropped.
    linger_until: Option<Instant>,
}

/// What a trim took away.
#[derive(Debug, Default)]
struct Trimmed {
    bytes: usize,
    /// Events evicted for the Thing's byte budget.
    for_bytes: u64,
}

impl ThingHistory {
    fn new(complete_since: i64) -> ThingHistory {
        ThingHistory {
            entries: VecDeque::new(),
            complete_since,
            max_time: complete_since,
            bytes: 0,
            linger_until: None,
        }
    }

    /// Drops what the limits no longer allow, from the store too (`log`,
    /// under the Thing's name).
    fn trim(
        &mut self,
        limits: &HistoryLimits,
        now: Instant,
        mut log: Option<(&mut HistoryLog, &str)>,
    ) -> Trimmed {
        let mut trimmed = Trimmed::default();
        while let Some(front) = self.entries.front() {
            let too_many = self.entries.len() > limits.events_per_thing;
            let too_old = now.saturating_duration_since(front.received) >= limits.max_age;
            let too_big = self.bytes > limits.max_bytes_per_thing;
            if !(too_many || too_old || too_big) {
                break;
            }
            trimmed.for_bytes += u64::from(too_big && !too_many && !too_old);
            trimmed.bytes += self.pop_front(log.as_mut().map(|(l, t)| (&mut **l, *t)));
        }
        trimmed
    }

    /// Drops the oldest event (from the store too); its bytes.
    fn pop_front(&mut self, log: Option<(&mut HistoryLog, &str)>) -> usize {
        let Some(gone) = self.entries.pop_front() else {
            return 0;
        };
        if let Some((log, thing)) = log {
            log.release(thing, gone.chunk);
        }
        self.complete_since = self.complete_since.max(gone.time);
        self.bytes -= gone.bytes;
        gone.bytes
    }
}

/// Memory held by one history entry, its message included.
fn entry_bytes(event: &str, prepared: &Prepared) -> usize {
    std::mem::size_of::<Entry>()
        + event.len()
        + std::mem::size_of::<Prepared>()
        + prepared.heap_bytes()
        // The two reference counts of each `Arc`.
        + 4 * std::mem::size_of::<usize>()
}

/// Counts for metrics and the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HistoryStats {
    pub things: usize,
    pub events: usize,
    /// Bytes held by the entries and their messages (not the maps' slack).
    pub bytes: usize,
}

#[derive(Debug)]
pub struct History {
    limits: HistoryLimits,
    things: HashMap<Arc<str>, ThingHistory>,
    /// Every event held, oldest first, by Thing: what `max_bytes` evicts
    /// first. Entries of events already trimmed are skipped, and swept out
    /// when they outnumber the events held.
    order: VecDeque<(u64, Arc<str>)>,
    next_seq: u64,
    /// Bytes of all Things' entries.
    bytes: usize,
    /// `max_bytes`, counted in `/metrics` and reported by `/readyz`.
    budget: Option<Arc<Budget>>,
    /// Evictions for `max_bytes_per_thing`.
    per_thing_hits: Option<Counter>,
    /// Lingering Things in the order their time runs out (`max_age` is the
    /// same for all); entries whose Thing came back are skipped.
    expiries: VecDeque<(Instant, String)>,
    /// Where entries are kept across a restart, when the store is durable.
    log: Option<HistoryLog>,
}

impl History {
    pub fn new(limits: HistoryLimits) -> History {
        History {
            limits,
            things: HashMap::new(),
            order: VecDeque::new(),
            next_seq: 0,
            bytes: 0,
            budget: None,
            per_thing_hits: None,
            expiries: VecDeque::new(),
            log: None,
        }
    }

    /// Counts its bytes in `budget` (whose limit is `max_bytes`) and its
    /// per-Thing evictions in `per_thing_hits`.
    pub fn with_budget(mut self, budget: Arc<Budget>, per_thing_hits: Counter) -> History {
        self.budget = Some(budget);
        self.per_thing_hits = Some(per_thing_hits);
        self
    }

    /// Accounts for what a trim of one Thing took away.
    fn trimmed(&mut self, trimmed: Trimmed) {
        self.bytes -= trimmed.bytes;
        if trimmed.for_bytes > 0 {
            if let Some(c) = &self.per_thing_hits {
                c.inc_by(trimmed.for_bytes);
            }
        }
    }

    /// Evicts the oldest events of all Things while they hold more than
    /// `max_bytes`, in memory or in the store's rows (`durable.rs`).
    fn evict_over_budget(&mut self) {
        let mut evicted = false;
        let on_disk = |log: &Option<HistoryLog>| log.as_ref().map_or(0, HistoryLog::disk_bytes);
        while self.bytes > self.limits.max_bytes || on_disk(&self.log) > self.limits.max_bytes {
            let Some((seq, thing)) = self.order.pop_front() else {
                break;
            };
            let Some(h) = self.things.get_mut(&thing) else {
                continue;
            };
            if h.entries.front().is_some_and(|e| e.seq == seq) {
                self.bytes -= h.pop_front(self.log.as_mut().map(|l| (l, &*thing)));
                evicted = true;
            }
        }
        if self.order.len() > 2 * self.events().max(64) {
            let things = &self.things;
            self.order.retain(|(seq, thing)| {
                things
                    .get(thing)
                    .and_then(|h| h.entries.front())
                    .is_some_and(|front| front.seq <= *seq)
            });
        }
        if let Some(b) = &self.budget {
            b.set(self.bytes);
            if evicted {
                b.hit();
            }
        }
    }

    fn events(&self) -> usize {
        self.things.values().map(|h| h.entries.len()).sum()
    }

    pub fn is_on(&self) -> bool {
        self.limits.is_on()
    }

    /// The gateway follows a Thing's events again (its first subscriber):
    /// `true` when it must subscribe on the bus, `false` when the Thing was
    /// still lingering and its bus subscription is still there.
    pub fn follow(&mut self, thing: &str) -> bool {
        if !self.is_on() {
            return true;
        }
        if let Some(h) = self.things.get_mut(thing) {
            h.linger_until = None;
            return false;
        }
        self.things
            .insert(thing.into(), ThingHistory::new(i64::MIN));
        true
    }

    /// A Thing's last subscriber left: `true` when the gateway should drop
    /// its bus subscription now (history off), `false` when the Thing
    /// lingers until [`History::expire`] says so.
    pub fn leave(&mut self, thing: &str, now: Instant) -> bool {
        let Some(h) = self.things.get_mut(thing) else {
            return true;
        };
        let until = now + self.limits.max_age;
        h.linger_until = Some(until);
        self.expiries.push_back((until, thing.to_owned()));
        false
    }

    /// Whether the Thing's events are kept: every one delivered must be
    /// [recorded](History::record).
    pub fn holds(&self, thing: &str) -> bool {
        self.things.contains_key(thing)
    }

    pub fn record(
        &mut self,
        thing: &str,
        event: &str,
        prepared: Arc<Prepared>,
        now: Instant,
        wall_micros: i64,
    ) {
        // One lookup of the Thing for what recording needs of it.
        let Some((key, h)) = self.things.get_key_value(thing) else {
            return;
        };
        let (key, max_time) = (key.clone(), h.max_time);
        // A Thing's events mostly share a few names: one allocation each.
        let event: Arc<str> = match h.entries.back() {
            Some(e) if *e.event == *event => e.event.clone(),
            _ => event.into(),
        };
        let time = prepared
            .timestamp
            .as_deref()
            .and_then(micros_of_rfc3339)
            .unwrap_or(wall_micros);
        let seq = self.next_seq;
        self.next_seq += 1;
        let bytes = entry_bytes(&event, &prepared);
        let mut entry = Entry {
            seq,
            chunk: seq,
            event,
            time,
            received: now,
            wall: wall_micros,
            bytes,
            prepared,
        };
        if let Some(log) = &mut self.log {
            entry.chunk = log.put(&key, &entry, max_time);
        }
        self.insert(thing, entry, now);
    }

    /// Appends an entry to a followed Thing's history, within the limits.
    fn insert(&mut self, thing: &str, entry: Entry, now: Instant) {
        let limits = self.limits;
        let Some(key) = self.things.get_key_value(thing).map(|(k, _)| k.clone()) else {
            return;
        };
        let h = self.things.get_mut(thing).expect("checked");
        let (seq, bytes) = (entry.seq, entry.bytes);
        h.max_time = h.max_time.max(entry.time);
        h.entries.push_back(entry);
        h.bytes += bytes;
        let trimmed = h.trim(&limits, now, self.log.as_mut().map(|l| (l, thing)));
        self.order.push_back((seq, key));
        self.bytes += bytes;
        self.trimmed(trimmed);
        self.evict_over_budget();
    }

    /// The events after `anchor` that `selector` wants. A Thing without a
    /// history (never followed, or its linger ran out) is a gap with nothing
    /// to replay.
    pub fn replay(
        &mut self,
        thing: &str,
        anchor: &Anchor,
        selector: &Selector,
        now: Instant,
    ) -> Replay {
        let limits = self.limits;
        let Some(h) = self.things.get_mut(thing) else {
            return Replay {
                gap: true,
                events: Vec::new(),
            };
        };
        let trimmed = h.trim(&limits, now, self.log.as_mut().map(|l| (l, thing)));
        let h = &*h;
        let (gap, start) = match anchor {
            Anchor::MessageId(id) => {
                let found = h
                    .entries
                    .iter()
                    .rposition(|e| e.prepared.message_id.as_deref() == Some(id.as_str()));
                match found {
                    Some(i) => (false, i + 1),
                    None => (true, 0),
                }
            }
            // Agents' clocks need not be monotonic: every later one counts.
            Anchor::Time(t) => (*t < h.complete_since, 0),
        };
        let wanted = |e: &&Entry| match (selector, anchor) {
            (Selector::AllEvents, Anchor::MessageId(_)) => true,
            (Selector::Event(name), Anchor::MessageId(_)) => *e.event == **name,
            (Selector::AllEvents, Anchor::Time(t)) => e.time > *t,
            (Selector::Event(name), Anchor::Time(t)) => *e.event == **name && e.time > *t,
            (Selector::Property(_), _) => false,
        };
        let events = h
            .entries
            .iter()
            .skip(start)
            .filter(wanted)
            .map(|e| (e.event.clone(), e.prepared.clone()))
            .collect();
        self.trimmed(trimmed);
        Replay { gap, events }
    }

    /// When the next lingering Thing may run out, if any lingers.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.expiries.front().map(|(t, _)| *t)
    }

    /// Drops the histories whose linger ran out; returns their Things, whose
    /// bus subscriptions the gateway drops.
    pub fn expire(&mut self, now: Instant) -> Vec<String> {
        let mut gone = Vec::new();
        while let Some((until, _)) = self.expiries.front() {
            if *until > now {
                break;
            }
            let (until, thing) = self.expiries.pop_front().expect("checked");
            if self
                .things
                .get(thing.as_str())
                .is_some_and(|h| h.linger_until == Some(until))
            {
                if let Some(h) = self.things.remove(thing.as_str()) {
                    self.bytes -= h.bytes;
                    if let Some(log) = &mut self.log {
                        for e in &h.entries {
                            log.release(&thing, e.chunk);
                        }
                    }
                }
                gone.push(thing);
            }
        }
        if let Some(b) = &self.budget {
            b.set(self.bytes);
        }
        gone
    }

    /// Puts what was recorded since the last call in the store: the end of
    /// a dispatcher turn.
    pub fn flush(&mut self) {
        if let Some(log) = &mut self.log {
            log.flush();
        }
    }

    pub fn stats(&self) -> HistoryStats {
        HistoryStats {
            things: self.things.len(),
            events: self.events(),
            bytes: self.bytes,
        }
    }
}

/// An RFC 3339 date-time (an RFC 9557 suffix allowed) in µs since the epoch,
/// rounded.
pub fn micros_of_rfc3339(s: &str) -> Option<i64> {
    let t = crate::lmos::parse_timestamp(s)?;
    let micros = t.timestamp().checked_mul(1_000_000)?;
    let sub = (i64::from(t.timestamp_subsec_nanos()) + 500) / 1_000;
    micros.checked_add(sub)
}

/// Decimal seconds since the epoch (a Kotlin `Instant`) in µs, rounded: an
/// f64 holds no more of a current date.
pub fn micros_of_seconds(seconds: f64) -> Option<i64> {
    let micros = (seconds * 1e6).round();
    (micros.is_finite() && micros.abs() < 9.0e18).then_some(micros as i64)
}

/// The wall clock in µs since the epoch.
pub fn wall_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod disk_tests;
