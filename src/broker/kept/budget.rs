//! What kept sessions' queues cost on disk, and its bounds (issue 43).
//!
//! Each queue entry costs its key (client ID, separator, position) and the
//! whole publication, even where `mqtt_queued_data` holds one copy for many
//! sessions: each session is charged every per-filter copy it waits for, so
//! overlapping filters pay per copy. A session, a principal (over all its
//! kept sessions) and all kept sessions together each have a bound; an
//! entry past one is not written (drop newest). The router may still
//! deliver it from memory while the sidecar runs; only the disk copy for
//! that session is refused, never the publisher's acknowledgement.
//!
//! Counted per (session, filter, segment), so that a segment the router
//! drops takes its exact bytes with it; a delivery takes its segment's
//! average per entry. Entries not written are remembered as ranges of
//! offsets: their delivery takes nothing. No I/O here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use rumqttd::Position;
use tracing::{debug, info};

use super::gaps::{Gaps, Segment};
use super::limits::{Limits, Owners};
use crate::quotas::{Quota, Quotas, Tally};

/// The bytes of a queue entry's key besides the client ID: the separator
/// and the position (see `position_key`).
pub(super) const KEY_OVERHEAD: u64 = 1 + 28;

/// Which bound refused an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    Session,
    Principal,
    Total,
}

impl Bound {
    fn key(self) -> &'static str {
        match self {
            Bound::Session => "mqtt.max_queued_bytes_per_session",
            Bound::Principal => "quotas.queued_bytes",
            Bound::Total => "mqtt.max_queued_bytes",
        }
    }
}

#[derive(Debug, Default)]
struct Session {
    owner: Option<Arc<str>>,
    /// The owner's `[quotas] queued_bytes` (`None`: no limit).
    owner_limit: Option<u64>,
    bytes: u64,
    segments: HashMap<(usize, u64), Segment>,
    /// By filter; empty unless it has gaps.
    gaps: HashMap<usize, Gaps>,
    /// Its newest publications are not being kept (logged when it starts).
    dropping: bool,
}

const LOG_EVERY: Duration = Duration::from_secs(60);

/// The tallies and bounds; the keeper's.
pub(super) struct Budget {
    per_session: u64,
    total_limit: u64,
    quotas: Arc<Quotas>,
    owners: Owners,
    sessions: HashMap<Box<str>, Session>,
    /// Segment tallies by filter, over all sessions: a filter released
    /// with none costs no scan.
    tallied: HashMap<usize, u32>,
    /// Bytes per principal, and the largest for `lmos_sidecar_quota_largest_usage`.
    principals: Tally,
    total: u64,
    gauge: Gauge,
    /// `lmos_sidecar_limit_hits_total`, by [`Bound`].
    hits: [Counter; 3],
    /// When a session starting to drop was last logged at info: once a
    /// minute at most, the others at debug (a flood must not fill the log).
    logged: Option<Instant>,
}

impl Budget {
    pub(super) fn new(limits: Limits) -> Budget {
        let hit = |limit| limits.metrics.limit_counter("mqtt", limit);
        Budget {
            per_session: limits.per_session,
            total_limit: limits.total,
            hits: [
                hit("max_queued_bytes_per_session"),
                hit(Quota::QueuedBytes.label()),
                hit("max_queued_bytes"),
            ],
            gauge: limits.metrics.mqtt_queued_bytes(),
            quotas: limits.quotas,
            owners: limits.owners,
            sessions: HashMap::new(),
            tallied: HashMap::new(),
            principals: Tally::new(limits.metrics.quota_largest(Quota::QueuedBytes.label())),
            total: 0,
            logged: None,
        }
    }

    /// Makes sure `client_id` has a tally, its owner looked up once (again
    /// while it has none: a session restored without one is claimed by its
    /// next CONNECT).
    fn resolve(&mut self, client_id: &str) {
        match self.sessions.get(client_id) {
            Some(session) if session.owner.is_some() => return,
            Some(_) => {}
            None => {
                self.sessions.insert(client_id.into(), Session::default());
            }
        }
        let Some(session) = self.sessions.get_mut(client_id) else {
            return;
        };
        if session.owner.is_none() {
            if let Some(owner) = self.owners.get(client_id) {
                session.owner_limit = self
                    .quotas
                    .limit(&owner, Quota::QueuedBytes)
                    .map(|(limit, _)| limit);
                // What it was charged before it had an owner is its owner's.
                if session.bytes > 0 {
                    self.principals.add(&owner, session.bytes);
                }
                session.owner = Some(owner);
            }
        }
    }

    /// Whether the entry of `client_id`'s queue at `at`, costing `cost`
    /// bytes, may be written; counted if so, remembered as not written if
    /// not.
    pub(super) fn admit(
        &mut self,
        client_id: &str,
        (idx, (segment, offset)): Position,
        cost: u64,
    ) -> bool {
        let (per_session, total, total_limit) = (self.per_session, self.total, self.total_limit);
        self.resolve(client_id);
        let Some(session) = self.sessions.get_mut(client_id) else {
            return false;
        };
        let owner_bytes = match &session.owner {
            Some(owner) if session.owner_limit.is_some() => self.principals.get(owner),
            _ => 0,
        };
        let bound = if session.bytes.saturating_add(cost) > per_session {
            Some(Bound::Session)
        } else if session
            .owner_limit
            .is_some_and(|limit| owner_bytes.saturating_add(cost) > limit)
        {
            Some(Bound::Principal)
        } else if total.saturating_add(cost) > total_limit {
            Some(Bound::Total)
        } else {
            None
        };
        if let Some(bound) = bound {
            let gaps = session.gaps.entry(idx).or_default();
            let extend = gaps.open;
            gaps.add(offset, offset, extend);
            gaps.open = true;
            let started = !session.dropping;
            session.dropping = true;
            self.hits[bound as usize].inc();
            if started {
                self.log_dropping(client_id, bound);
            }
            return false;
        }
        if !session.gaps.is_empty() {
            if let Some(gaps) = session.gaps.get_mut(&idx) {
                gaps.open = false;
            }
        }
        let mut new_segment = false;
        let tally = session.segments.entry((idx, segment)).or_insert_with(|| {
            new_segment = true;
            Segment::default()
        });
        tally.entries += 1;
        tally.bytes += cost;
        session.bytes += cost;
        let back = std::mem::take(&mut session.dropping);
        let owner = session.owner.clone();
        if back {
            debug!(
                client_id = %client_id.escape_debug(),
                "A kept MQTT session's queue is below its bounds again: its publications are kept on disk."
            );
        }
        if new_segment {
            *self.tallied.entry(idx).or_default() += 1;
        }
        self.charge(owner.as_ref(), cost);
        true
    }

    /// A restored entry (start-up): counted whatever the bounds, as it is
    /// on disk already.
    pub(super) fn restored(&mut self, client_id: &str, (idx, (segment, _)): Position, cost: u64) {
        self.resolve(client_id);
        let Some(session) = self.sessions.get_mut(client_id) else {
            return;
        };
        let new_segment = !session.segments.contains_key(&(idx, segment));
        let tally = session.segments.entry((idx, segment)).or_default();
        tally.entries += 1;
        tally.bytes += cost;
        session.bytes += cost;
        let owner = session.owner.clone();
        if new_segment {
            *self.tallied.entry(idx).or_default() += 1;
        }
        self.charge(owner.as_ref(), cost);
    }

    /// `client_id` acknowledged the publication at `at`; false when it had
    /// no entry there (a gap): nothing of it is on disk to forget.
    pub(super) fn delivered(
        &mut self,
        client_id: &str,
        (idx, (segment, offset)): Position,
    ) -> bool {
        let Some(session) = self.sessions.get_mut(client_id) else {
            return true;
        };
        if !session.gaps.is_empty() {
            if let Some(gaps) = session.gaps.get_mut(&idx) {
                let in_gap = gaps.delivered(offset);
                if gaps.ranges.is_empty() && !gaps.open {
                    session.gaps.remove(&idx);
                }
                if in_gap {
                    return false;
                }
            }
        }
        let Some(tally) = session.segments.get_mut(&(idx, segment)) else {
            return true;
        };
        let freed = tally.deliver();
        let gone = tally.entries == 0;
        if gone {
            session.segments.remove(&(idx, segment));
        }
        session.bytes = session.bytes.saturating_sub(freed);
        let owner = session.owner.clone();
        if gone {
            self.untally(idx, 1);
        }
        self.release(owner.as_deref(), freed);
        true
    }

    /// After a restart: `client_id` has no entry at offsets `from..=to`
    /// of filter `idx` (other sessions' publications among its own).
    pub(super) fn gap(&mut self, client_id: &str, idx: usize, from: u64, to: u64) {
        if let Some(session) = self.sessions.get_mut(client_id) {
            session.gaps.entry(idx).or_default().add(from, to, false);
        }
    }

    /// The router dropped `segment` of filter `idx` for `client_id`.
    pub(super) fn dropped(&mut self, client_id: &str, idx: usize, segment: u64) {
        let Some(session) = self.sessions.get_mut(client_id) else {
            return;
        };
        let Some(tally) = session.segments.remove(&(idx, segment)) else {
            return;
        };
        session.bytes = session.bytes.saturating_sub(tally.bytes);
        let owner = session.owner.clone();
        self.untally(idx, 1);
        self.release(owner.as_deref(), tally.bytes);
    }

    /// Filter `idx`'s log is gone: the sessions that had entries in it
    /// (they left the filter), whose entries go too.
    pub(super) fn released(&mut self, idx: usize) -> Vec<Box<str>> {
        // Most filters released are clean sessions': no scan for those.
        if self.tallied.remove(&idx).is_none() {
            return Vec::new();
        }
        let mut had = Vec::new();
        let mut freed_by: Vec<(Option<Arc<str>>, u64)> = Vec::new();
        for (client_id, session) in &mut self.sessions {
            let (before, count) = (session.bytes, session.segments.len());
            session.segments.retain(|&(i, _), tally| {
                if i == idx {
                    session.bytes = session.bytes.saturating_sub(tally.bytes);
                }
                i != idx
            });
            session.gaps.remove(&idx);
            if session.segments.len() != count {
                had.push(client_id.clone());
                freed_by.push((session.owner.clone(), before - session.bytes));
            }
        }
        for (owner, freed) in freed_by {
            self.release(owner.as_deref(), freed);
        }
        had
    }

    /// The session ended: everything of it is gone.
    pub(super) fn ended(&mut self, client_id: &str) {
        if let Some(session) = self.sessions.remove(client_id) {
            for (idx, _) in session.segments.keys() {
                self.untally(*idx, 1);
            }
            self.release(session.owner.as_deref(), session.bytes);
        }
    }

    fn untally(&mut self, idx: usize, n: u32) {
        if let Some(count) = self.tallied.get_mut(&idx) {
            *count = count.saturating_sub(n);
            if *count == 0 {
                self.tallied.remove(&idx);
            }
        }
    }

    fn charge(&mut self, owner: Option<&Arc<str>>, cost: u64) {
        if let Some(owner) = owner {
            self.principals.add(owner, cost);
        }
        self.total += cost;
        self.gauge
            .set(i64::try_from(self.total).unwrap_or(i64::MAX));
    }

    fn release(&mut self, owner: Option<&str>, freed: u64) {
        if freed == 0 {
            return;
        }
        if let Some(owner) = owner {
            self.principals.sub(owner, freed);
        }
        self.total = self.total.saturating_sub(freed);
        self.gauge
            .set(i64::try_from(self.total).unwrap_or(i64::MAX));
    }

    fn log_dropping(&mut self, client_id: &str, bound: Bound) {
        let now = Instant::now();
        let owner = self
            .sessions
            .get(client_id)
            .and_then(|s| s.owner.clone())
            .unwrap_or_else(|| Arc::from(""));
        if self
            .logged
            .is_none_or(|at| now.duration_since(at) >= LOG_EVERY)
        {
            self.logged = Some(now);
            info!(
                client_id = %client_id.escape_debug(),
                principal = %owner.escape_debug(),
                limit = bound.key(),
                "A kept MQTT session's queue is full on disk: its newest publications are not kept for it (counted in lmos_sidecar_limit_hits_total; other sessions starting to drop are logged at debug for a minute)."
            );
        } else {
            debug!(
                client_id = %client_id.escape_debug(),
                principal = %owner.escape_debug(),
                limit = bound.key(),
                "A kept MQTT session's queue is full on disk: its newest publications are not kept for it."
            );
        }
    }

    /// Bytes counted over all sessions.
    #[cfg(test)]
    fn total(&self) -> u64 {
        self.total
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
