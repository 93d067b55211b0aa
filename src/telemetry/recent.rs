//! The recent spans, kept in memory so the console can show a trace
//! without Jaeger (issue 47 item 3); pure.
//!
//! The store is bounded in bytes, not in spans: a span's attributes are
//! what a client chose (a Thing id, an action name), so a count alone would
//! let a client grow the store with long names. The whole oldest trace is
//! evicted first, so what the console shows of a trace is never half of it
//! because its first spans went while its last stayed.

use std::collections::{HashMap, VecDeque};

/// A default budget: some thousands of spans, a few MiB of a process that
/// serves tens of thousands of connections.
pub const DEFAULT_BUDGET: usize = 8 * 1024 * 1024;

/// Bytes counted for a span beyond its strings: ids, times, the map entry.
const SPAN_OVERHEAD: usize = 128;

/// One finished span, as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSpan {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_id: Option<[u8; 8]>,
    pub name: String,
    /// OTLP's `SpanKind` number (1 internal … 5 consumer).
    pub kind: u8,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
    /// False when the span's status is an error.
    pub ok: bool,
    pub attributes: Vec<(String, String)>,
}

impl StoredSpan {
    /// What the span costs the budget.
    pub fn cost(&self) -> usize {
        let attributes: usize = self
            .attributes
            .iter()
            .map(|(k, v)| k.len() + v.len() + 48)
            .sum();
        SPAN_OVERHEAD + self.name.len() + attributes
    }
}

/// The spans of the recent traces, oldest trace first out.
#[derive(Debug)]
pub struct RecentSpans {
    budget: usize,
    used: usize,
    /// Trace ids in the order their first span came.
    order: VecDeque<[u8; 16]>,
    traces: HashMap<[u8; 16], Vec<StoredSpan>>,
}

impl RecentSpans {
    /// `budget` bytes; 0 keeps nothing.
    pub fn new(budget: usize) -> RecentSpans {
        RecentSpans {
            budget,
            used: 0,
            order: VecDeque::new(),
            traces: HashMap::new(),
        }
    }

    /// Bytes the kept spans cost.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Keeps `span`, evicting the oldest traces until it fits. A span
    /// larger than the whole budget is not kept: it would evict everything.
    pub fn push(&mut self, span: StoredSpan) {
        let cost = span.cost();
        if cost > self.budget {
            return;
        }
        while self.used + cost > self.budget {
            if !self.evict_oldest() {
                break;
            }
        }
        let id = span.trace_id;
        let spans = self.traces.entry(id).or_insert_with(|| {
            self.order.push_back(id);
            Vec::new()
        });
        spans.push(span);
        self.used += cost;
    }

    fn evict_oldest(&mut self) -> bool {
        let Some(id) = self.order.pop_front() else {
            return false;
        };
        if let Some(spans) = self.traces.remove(&id) {
            self.used -= spans.iter().map(StoredSpan::cost).sum::<usize>();
        }
        true
    }

    /// The spans of one trace, in the order they ended; `None` for an
    /// unknown or evicted trace.
    pub fn trace(&self, id: &[u8; 16]) -> Option<&[StoredSpan]> {
        self.traces.get(id).map(Vec::as_slice)
    }

    /// Trace ids, newest first, at most `limit`.
    pub fn newest(&self, limit: usize) -> impl Iterator<Item = &[u8; 16]> {
        self.order.iter().rev().take(limit)
    }
}

#[cfg(test)]
#[path = "recent_tests.rs"]
mod tests;
