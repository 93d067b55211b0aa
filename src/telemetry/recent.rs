//! The recent spans, kept in memory so the console can show a trace
//! without Jaeger (issue 47 item 3); pure, but for the lock that
//! [`SpanStore`] puts around it.
//!
//! The store is bounded in bytes, not in spans: a span's attributes are
//! what a client chose (a Thing id, an action name), so a count alone would
//! let a client grow the store with long names. The whole oldest trace is
//! evicted first, so what the console shows of a trace is never half of it
//! because its first spans went while its last stayed. A trace keeps at
//! most [`MAX_SPANS_PER_TRACE`] spans: an agent that stamps one
//! `traceparent` on everything it sends would otherwise grow one trace
//! until it is the whole store.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

/// A default budget: some thousands of spans, a few MiB of a process that
/// serves tens of thousands of connections.
pub const DEFAULT_BUDGET: usize = 8 * 1024 * 1024;

/// Spans kept of one trace; later ones are only counted.
pub const MAX_SPANS_PER_TRACE: usize = 1_000;

/// Traces a list looks at, newest first, whatever it finds: the lock is
/// the hops' too, and a caller who may see none would otherwise have every
/// trace summarised under it.
pub const SCAN_MAX: usize = 5_000;

/// Bytes counted for a span beyond its text: ids, times, the vector slot.
const SPAN_OVERHEAD: usize = 128;
/// Bytes counted for a trace beyond its spans: the map entry, the order.
const TRACE_OVERHEAD: usize = 96;
/// Bytes counted per attribute beyond its value: key pointer, offset.
const ATTRIBUTE_OVERHEAD: usize = 24;

/// The attributes that name a Thing: a trace is shown to those who may
/// consume every Thing it names.
const THING_KEYS: [&str; 2] = ["lmos.thing_id", "a2a.agent"];

/// One finished span, as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSpan {
    pub head: SpanHead,
    /// The status description of a span that failed.
    pub error: Option<Box<str>>,
    /// The name, then each attribute's value, back to back: two
    /// allocations a span instead of one per string.
    text: String,
    name_len: usize,
    /// Each attribute's key and the end of its value in `text`.
    attributes: Box<[(&'static str, usize)]>,
}

/// A span's identity and times, before its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanHead {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_id: Option<[u8; 8]>,
    /// The parent is another process's span (a consumer's, an agent's).
    pub parent_remote: bool,
    /// OTLP's `SpanKind` number (1 internal … 5 consumer).
    pub kind: u8,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
}

impl StoredSpan {
    /// `name` in its parts (joined by a space, as the messaging
    /// conventions name spans), and the attributes as text.
    pub fn new<'a>(
        head: SpanHead,
        name: (&str, &str),
        attributes: impl Iterator<Item = (&'static str, AttrText<'a>)> + Clone,
        error: Option<&str>,
    ) -> StoredSpan {
        // Sized once: the copy is on the dispatcher's path, where growing
        // the text cost a reallocation a span.
        let (count, values) = attributes.clone().fold((0, 0), |(n, len), (_, v)| {
            let value = match v {
                AttrText::Str(s) => s.len(),
                AttrText::Int(_) => 20,
            };
            (n + 1, len + value)
        });
        let mut text = String::with_capacity(name.0.len() + 1 + name.1.len() + values);
        text.push_str(name.0);
        text.push(' ');
        text.push_str(name.1);
        let name_len = text.len();
        let mut offsets = Vec::with_capacity(count);
        offsets.extend(attributes.map(|(key, value)| {
            match value {
                AttrText::Str(s) => text.push_str(s),
                // Into the text itself: no string of its own.
                AttrText::Int(n) => {
                    let _ = write!(text, "{n}");
                }
            }
            (key, text.len())
        }));
        StoredSpan {
            head,
            error: error.map(Box::from),
            text,
            name_len,
            attributes: offsets.into_boxed_slice(),
        }
    }

    pub fn name(&self) -> &str {
        &self.text[..self.name_len]
    }

    /// In the order they were given.
    pub fn attributes(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let mut start = self.name_len;
        self.attributes.iter().map(move |&(key, end)| {
            let value = &self.text[start..end];
            start = end;
            (key, value)
        })
    }

    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// What the span costs the budget.
    pub fn cost(&self) -> usize {
        SPAN_OVERHEAD
            + self.text.len()
            + self.attributes.len() * ATTRIBUTE_OVERHEAD
            + self.error.as_ref().map_or(0, |e| e.len())
    }
}

/// An attribute's value as the store takes it.
#[derive(Debug, Clone, Copy)]
pub enum AttrText<'a> {
    Str(&'a str),
    Int(i64),
}

/// One trace's spans.
#[derive(Debug, Default)]
struct Trace {
    spans: Vec<StoredSpan>,
    /// Spans past [`MAX_SPANS_PER_TRACE`], not kept.
    not_kept: usize,
    cost: usize,
}

/// Every Thing the spans name, once each. Found when the trace is read,
/// not kept beside it: a list per trace cost the hops two allocations a
/// trace, and each event of a fan-out is a trace of its own.
pub fn things_named(spans: &[StoredSpan]) -> Vec<Box<str>> {
    let mut things: Vec<Box<str>> = Vec::new();
    for thing in spans
        .iter()
        .flat_map(|s| THING_KEYS.iter().filter_map(|key| s.attribute(key)))
    {
        if !things.iter().any(|known| &**known == thing) {
            things.push(Box::from(thing));
        }
    }
    things
}

impl Trace {
    fn summary(&self, id: [u8; 16]) -> TraceSummary {
        let first = self.spans.iter().min_by_key(|s| s.head.start_unix_nanos);
        TraceSummary {
            trace_id: id,
            name: first.map(|s| s.name().to_owned()).unwrap_or_default(),
            start_unix_nanos: first.map_or(0, |s| s.head.start_unix_nanos),
            end_unix_nanos: self
                .spans
                .iter()
                .map(|s| s.head.end_unix_nanos)
                .max()
                .unwrap_or(0),
            spans: self.spans.len(),
            errors: self.spans.iter().filter(|s| s.error.is_some()).count(),
            not_kept: self.not_kept,
            things: things_named(&self.spans),
        }
    }
}

/// What the list of traces says of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSummary {
    pub trace_id: [u8; 16],
    /// The earliest span's name.
    pub name: String,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
    pub spans: usize,
    pub errors: usize,
    pub not_kept: usize,
    /// Every Thing a span of the trace names.
    pub things: Vec<Box<str>>,
}

/// One trace, copied out of the store.
#[derive(Debug, Clone)]
pub struct TraceCopy {
    pub summary: TraceSummary,
    /// In the order they ended.
    pub spans: Vec<StoredSpan>,
}

/// The spans of the recent traces, oldest trace first out.
#[derive(Debug)]
pub struct RecentSpans {
    budget: usize,
    used: usize,
    /// Trace ids in the order their first span came.
    order: VecDeque<[u8; 16]>,
    traces: HashMap<[u8; 16], Trace>,
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
        if let Some(trace) = self.traces.get_mut(&span.head.trace_id) {
            if trace.spans.len() >= MAX_SPANS_PER_TRACE {
                trace.not_kept += 1;
                return;
            }
        }
        // The most it can cost: a new trace.
        let most = span.cost() + TRACE_OVERHEAD;
        if most > self.budget {
            return;
        }
        while self.used + most > self.budget {
            if !self.evict_oldest() {
                break;
            }
        }
        let id = span.head.trace_id;
        let mut cost = span.cost();
        let trace = self.traces.entry(id).or_insert_with(|| {
            self.order.push_back(id);
            cost += TRACE_OVERHEAD;
            Trace::default()
        });
        trace.spans.push(span);
        trace.cost += cost;
        self.used += cost;
    }

    fn evict_oldest(&mut self) -> bool {
        let Some(id) = self.order.pop_front() else {
            return false;
        };
        if let Some(trace) = self.traces.remove(&id) {
            self.used -= trace.cost;
        }
        true
    }

    /// One trace's spans, in the order they ended; `None` for an unknown
    /// or evicted trace.
    pub fn trace(&self, id: &[u8; 16]) -> Option<TraceCopy> {
        let trace = self.traces.get(id)?;
        Some(TraceCopy {
            summary: trace.summary(*id),
            spans: trace.spans.clone(),
        })
    }

    /// The newest traces first that `keep` takes (given the trace's
    /// summary, with the Things it names, and its spans), at most `limit`.
    pub fn newest(
        &self,
        limit: usize,
        keep: impl Fn(&TraceSummary, &[StoredSpan]) -> bool,
    ) -> Vec<TraceSummary> {
        self.order
            .iter()
            .rev()
            .take(SCAN_MAX)
            .filter_map(|id| {
                let trace = self.traces.get(id)?;
                let summary = trace.summary(*id);
                keep(&summary, &trace.spans).then_some(summary)
            })
            .take(limit)
            .collect()
    }
}

/// The store as the sidecar shares it: the hops write, the console reads.
/// Reads copy out under the lock and leave it at once, so a page polling
/// the list holds up the hops for a copy, not for a response.
#[derive(Debug, Clone)]
pub struct SpanStore {
    inner: Arc<Mutex<RecentSpans>>,
    budget: usize,
}

impl SpanStore {
    pub fn new(budget: usize) -> SpanStore {
        SpanStore {
            inner: Arc::new(Mutex::new(RecentSpans::new(budget))),
            budget,
        }
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    fn lock(&self) -> MutexGuard<'_, RecentSpans> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn push(&self, span: StoredSpan) {
        self.lock().push(span);
    }

    pub fn trace(&self, id: &[u8; 16]) -> Option<TraceCopy> {
        self.lock().trace(id)
    }

    pub fn newest(
        &self,
        limit: usize,
        keep: impl Fn(&TraceSummary, &[StoredSpan]) -> bool,
    ) -> Vec<TraceSummary> {
        self.lock().newest(limit, keep)
    }

    pub fn used(&self) -> usize {
        self.lock().used()
    }
}

#[cfg(test)]
#[path = "recent_tests.rs"]
mod tests;
