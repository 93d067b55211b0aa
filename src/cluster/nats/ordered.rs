//! One route's numbered answers from another sidecar, handed on in their
//! numbers' order (issue 48 item 4). Each answer crosses as a NATS request
//! of its own and is repeated until acknowledged (`answers.rs`), so under a
//! flood, an answer that was lost and repeated arrives after later ones: a
//! stream's chunks then reached the consumer out of order, and its
//! terminal status could overtake the last chunks, which the router then
//! dropped (the streaming bench's `stream across` row lost 3 to 5 % of
//! 20 000 chunks). Here an answer that comes early waits for the ones
//! before it.
//!
//! A gap is waited for [`HOLD_WAIT`] (the answering sidecar repeats after
//! a second, then after a doubling wait) or until [`HOLD_MAX`] answers or
//! [`HOLD_BYTES`] wait behind it; then what waits goes on in order and the
//! gap is given up (an answer that still comes later goes on when it
//! comes, as before). The first answer seen of a route sets where its
//! numbers start: a route this sidecar learnt after a restart continues
//! from wherever the other side is. Pure: the caller gives the time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long an early answer waits for a missing one.
pub const HOLD_WAIT: Duration = Duration::from_secs(3);
/// Answers that may wait behind a gap, per route.
pub const HOLD_MAX: usize = 4_096;
/// Bytes that may wait behind a gap, per route.
pub const HOLD_BYTES: usize = 8 * 1024 * 1024;

/// Numbers taken: all up to `upto`, and those above it in `above`.
#[derive(Debug, Default)]
struct Taken {
    upto: u64,
    above: BTreeSet<u64>,
}

impl Taken {
    /// Whether `seq` is new; it is taken from now on.
    fn take(&mut self, seq: u64) -> bool {
        if seq <= self.upto || !self.above.insert(seq) {
            return false;
        }
        while self.above.remove(&(self.upto + 1)) {
            self.upto += 1;
        }
        true
    }
}

/// One route's answers.
#[derive(Debug)]
pub struct Ordered<T> {
    taken: Taken,
    /// The number handed on next; `None` before the first answer.
    next: Option<u64>,
    held: BTreeMap<u64, (T, usize)>,
    held_bytes: usize,
    /// Since when the oldest gap is waited for.
    since: Option<Instant>,
}

impl<T> Default for Ordered<T> {
    fn default() -> Self {
        Ordered {
            taken: Taken::default(),
            next: None,
            held: BTreeMap::new(),
            held_bytes: 0,
            since: None,
        }
    }
}

impl<T> Ordered<T> {
    /// Answer `seq` (`size` bytes) came at `now`: what goes on, in order.
    /// Nothing for a repeat (its acknowledgement was lost).
    pub fn offer(&mut self, seq: u64, item: T, size: usize, now: Instant) -> Vec<T> {
        if !self.taken.take(seq) {
            return Vec::new();
        }
        let next = *self.next.get_or_insert(seq);
        if seq < next {
            // Later than a gap given up: on its way as it comes.
            return vec![item];
        }
        self.held.insert(seq, (item, size));
        self.held_bytes += size;
        let mut out = self.drain();
        if self.held.is_empty() {
            self.since = None;
        } else {
            if !out.is_empty() || self.since.is_none() {
                self.since = Some(now);
            }
            if self.held.len() > HOLD_MAX || self.held_bytes > HOLD_BYTES || self.overdue(now) {
                out.extend(self.give_up());
            }
        }
        out
    }

    /// Whether a gap has been waited for long enough.
    pub fn overdue(&self, now: Instant) -> bool {
        self.since
            .is_some_and(|since| now.duration_since(since) >= HOLD_WAIT)
    }

    /// Gives the gaps up: what waits goes on, in order.
    pub fn give_up(&mut self) -> Vec<T> {
        let Some((&first, _)) = self.held.iter().next() else {
            return Vec::new();
        };
        self.next = Some(first);
        let out = self.drain();
        // What still waits sits behind another gap: waited for anew.
        if !self.held.is_empty() {
            return out.into_iter().chain(self.give_up()).collect();
        }
        self.since = None;
        out
    }

    /// Hands on what follows `next` without a gap.
    fn drain(&mut self) -> Vec<T> {
        let mut out = Vec::new();
        while let Some(next) = self.next {
            let Some((item, size)) = self.held.remove(&next) else {
                break;
            };
            self.held_bytes -= size;
            out.push(item);
            self.next = Some(next + 1);
        }
        out
    }

    pub fn is_holding(&self) -> bool {
        !self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(o: &mut Ordered<u64>, seq: u64, now: Instant) -> Vec<u64> {
        o.offer(seq, seq, 10, now)
    }

    #[test]
    fn answers_go_on_in_order_and_repeats_are_dropped() {
        let now = Instant::now();
        let mut o = Ordered::default();
        assert_eq!(offer(&mut o, 1, now), [1]);
        assert_eq!(offer(&mut o, 3, now), Vec::<u64>::new(), "2 is missing");
        assert_eq!(offer(&mut o, 4, now), Vec::<u64>::new());
        assert_eq!(offer(&mut o, 2, now), [2, 3, 4], "repeated after a loss");
        assert_eq!(offer(&mut o, 3, now), Vec::<u64>::new(), "a repeat");
        assert!(!o.is_holding());
    }

    #[test]
    fn the_first_answer_seen_sets_the_start() {
        let now = Instant::now();
        let mut o = Ordered::default();
        assert_eq!(offer(&mut o, 57, now), [57]);
        assert_eq!(offer(&mut o, 58, now), [58]);
    }

    #[test]
    fn a_gap_is_given_up_after_the_wait_and_a_late_answer_still_goes_on() {
        let start = Instant::now();
        let mut o = Ordered::default();
        offer(&mut o, 1, start);
        assert!(offer(&mut o, 3, start).is_empty());
        assert!(!o.overdue(start + HOLD_WAIT / 2));
        assert!(offer(&mut o, 4, start + HOLD_WAIT / 2).is_empty());
        assert!(o.overdue(start + HOLD_WAIT));
        assert_eq!(
            offer(&mut o, 6, start + HOLD_WAIT),
            [3, 4, 6],
            "5 given up too"
        );
        assert_eq!(
            offer(&mut o, 2, start + HOLD_WAIT),
            [2],
            "late, as it comes"
        );
        assert_eq!(offer(&mut o, 7, start + HOLD_WAIT), [7]);
        assert_eq!(offer(&mut o, 5, start + HOLD_WAIT), [5]);
    }

    #[test]
    fn too_much_waiting_gives_the_gap_up() {
        let now = Instant::now();
        let mut o = Ordered::default();
        offer(&mut o, 1, now);
        for seq in 3..(3 + HOLD_MAX as u64) {
            assert!(offer(&mut o, seq, now).is_empty());
        }
        let out = offer(&mut o, 3 + HOLD_MAX as u64, now);
        assert_eq!(out.len(), HOLD_MAX + 1);
        assert_eq!(out[0], 3);
        assert!(!o.is_holding());
    }

    #[test]
    fn give_up_hands_on_everything_held_across_several_gaps() {
        let now = Instant::now();
        let mut o = Ordered::default();
        offer(&mut o, 1, now);
        offer(&mut o, 3, now);
        offer(&mut o, 6, now);
        assert_eq!(o.give_up(), [3, 6]);
        assert!(!o.is_holding());
    }
}
