//! One session's tallies per filter segment, and the offsets where it has
//! no entry (see [`super::budget`]).

/// One filter's segment of one session's queue: the entries written.
#[derive(Debug, Default)]
pub(super) struct Segment {
    pub(super) entries: u32,
    pub(super) bytes: u64,
}

impl Segment {
    /// The bytes a delivery frees: the average per entry (the last takes
    /// the rest); none once all are delivered.
    pub(super) fn deliver(&mut self) -> u64 {
        if self.entries == 0 {
            return 0;
        }
        let freed = self.bytes / u64::from(self.entries);
        self.entries -= 1;
        let freed = if self.entries == 0 { self.bytes } else { freed };
        self.bytes -= freed;
        freed
    }
}

/// The offsets of one filter's log (absolute, across its segments) where a
/// session has no entry: not written past a bound, or, after a restart,
/// other sessions' publications among its own (the router delivers it
/// everything from its first on). Their delivery frees nothing, and is
/// nobody's to count.
#[derive(Debug, Default)]
pub(super) struct Gaps {
    /// Inclusive ranges, in order.
    pub(super) ranges: Vec<(u64, u64)>,
    /// The last entry was not written: the next skip extends the range.
    pub(super) open: bool,
}

/// Past this many ranges the oldest two merge: a session at its bound for
/// long holds a bounded list (what the merge covers counts as not written,
/// so its bytes go with its segment or its session, never below zero).
const MAX_GAPS: usize = 1024;

impl Gaps {
    pub(super) fn add(&mut self, from: u64, to: u64, extend: bool) {
        match self.ranges.last_mut() {
            Some(last) if extend || last.1.saturating_add(1) >= from => last.1 = last.1.max(to),
            _ => self.ranges.push((from, to)),
        }
        if self.ranges.len() > MAX_GAPS {
            let (_, end) = self.ranges.remove(1);
            self.ranges[0].1 = end;
        }
    }

    /// Whether `offset` is in a gap; gaps wholly before it are forgotten
    /// (a filter's publications are delivered in order).
    pub(super) fn delivered(&mut self, offset: u64) -> bool {
        let passed = self.ranges.iter().take_while(|r| r.1 < offset).count();
        if passed > 0 {
            self.ranges.drain(..passed);
        }
        self.ranges.first().is_some_and(|r| r.0 <= offset)
    }
}
