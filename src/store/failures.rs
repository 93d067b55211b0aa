//! Which changes failed, by sequence number: pure bookkeeping, no I/O.
//!
//! A failed commit fails the tickets of its own changes and no others
//! (issue 43: one failure used to fail every later ticket until a restart).
//! The record is bounded: past [`MAX_RANGES`] ranges the two oldest merge,
//! so a change between them counts as failed too. Over-approximating is
//! safe (a change reported failed is written again or refused), reporting a
//! failed change as durable is not.

use super::StoreError;

/// Ranges kept before the two oldest merge.
pub(super) const MAX_RANGES: usize = 32;

/// Sequence numbers `lo..=hi` failed with `error`.
#[derive(Debug, Clone)]
struct Range {
    lo: u64,
    hi: u64,
    error: StoreError,
}

/// The failed changes, oldest first. Empty (and no allocation) while
/// nothing has failed: the common commit pays nothing for it.
#[derive(Debug, Clone, Default)]
pub(super) struct Failures {
    ranges: Vec<Range>,
}

impl Failures {
    /// Records that `lo..=hi` failed; sequence numbers come in ascending
    /// order (the writer commits in ticket order).
    pub(super) fn add(&mut self, lo: u64, hi: u64, error: &StoreError) {
        if let Some(last) = self.ranges.last_mut() {
            if last.hi.saturating_add(1) >= lo && same_kind(&last.error, error) {
                last.hi = last.hi.max(hi);
                return;
            }
        }
        self.ranges.push(Range {
            lo,
            hi,
            error: error.clone(),
        });
        if self.ranges.len() > MAX_RANGES {
            // The oldest are the least likely to be asked about; what lay
            // between them now counts as failed.
            let second = self.ranges.remove(1);
            self.ranges[0].hi = second.hi;
            self.ranges[0].error = second.error;
        }
    }

    /// The newest failure among the changes after `from` up to and
    /// including `to`: a ticket's or a barrier's window.
    pub(super) fn within(&self, from: u64, to: u64) -> Option<&StoreError> {
        if from >= to {
            return None;
        }
        self.ranges
            .iter()
            .rev()
            .take_while(|r| r.hi > from)
            .find(|r| r.lo <= to)
            .map(|r| &r.error)
    }

    /// The failures among the changes after `from` up to `to` only (none,
    /// and no allocation, as a rule: old failures are not copied into
    /// every ticket's answer).
    pub(super) fn window(&self, from: u64, to: u64) -> Failures {
        if self.within(from, to).is_none() {
            return Failures::default();
        }
        let ranges = self
            .ranges
            .iter()
            .filter(|r| r.hi > from && r.lo <= to)
            .cloned()
            .collect();
        Failures { ranges }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub(super) fn extend(&mut self, other: &Failures) {
        for r in &other.ranges {
            self.add(r.lo, r.hi, &r.error);
        }
    }
}

fn same_kind(a: &StoreError, b: &StoreError) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> StoreError {
        StoreError::Full {
            reason: "store.max_file_bytes".into(),
        }
    }

    #[test]
    fn a_change_fails_only_when_it_failed() {
        let mut f = Failures::default();
        f.add(5, 7, &full());
        assert!(f.within(4, 5).is_some(), "the change 5 itself");
        assert!(f.within(3, 4).is_none(), "before");
        assert!(f.within(7, 8).is_none(), "after");
        assert!(f.within(0, 100).is_some(), "a window around it");
        assert!(f.within(7, 100).is_none(), "a window after it");
    }

    #[test]
    fn an_old_failure_does_not_fail_a_later_window() {
        let mut f = Failures::default();
        f.add(2, 2, &StoreError::Write("EIO".into()));
        f.add(10, 12, &full());
        assert!(f.within(12, 1_000).is_none());
        assert!(matches!(f.within(1, 3), Some(StoreError::Write(_))));
        assert!(matches!(f.within(0, 11), Some(StoreError::Full { .. })));
        assert!(f.within(3, 9).is_none(), "between the two");
    }

    #[test]
    fn adjacent_failures_of_one_kind_share_a_range() {
        let mut f = Failures::default();
        for seq in 1..=1_000 {
            f.add(seq, seq, &full());
        }
        assert_eq!(f.ranges.len(), 1);
        f.add(1_001, 1_001, &StoreError::Write("EIO".into()));
        assert_eq!(f.ranges.len(), 2);
    }

    #[test]
    fn past_the_bound_the_oldest_merge_and_over_approximate() {
        let mut f = Failures::default();
        for i in 0..(MAX_RANGES as u64 + 10) {
            f.add(i * 10, i * 10, &full());
        }
        assert_eq!(f.ranges.len(), MAX_RANGES);
        // Every failure is still reported ...
        for i in 0..(MAX_RANGES as u64 + 10) {
            assert!(f.within(i * 10, i * 10).is_none(), "an empty window");
            assert!(f.within((i * 10).saturating_sub(1), i * 10).is_some() || i == 0);
        }
        // ... the old gaps count as failed, the recent ones do not.
        assert!(f.within(1, 5).is_some());
        let last = (MAX_RANGES as u64 + 9) * 10;
        assert!(f.within(last - 9, last - 1).is_none());
    }

    #[test]
    fn a_window_copies_only_its_own_failures() {
        let mut f = Failures::default();
        f.add(1, 2, &full());
        f.add(10, 10, &StoreError::Write("EIO".into()));
        assert!(f.window(2, 9).is_empty());
        let w = f.window(0, 5);
        assert_eq!(w.ranges.len(), 1);
        assert!(w.within(0, 5).is_some());
        assert_eq!(f.window(0, 100).ranges.len(), 2);
    }

    #[test]
    fn an_empty_window_holds_nothing() {
        let mut f = Failures::default();
        f.add(1, 10, &full());
        assert!(f.within(5, 5).is_none());
        assert!(f.within(6, 2).is_none());
    }
}
