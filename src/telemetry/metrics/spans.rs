//! The spans' counters: exported, and dropped by reason.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::Labels1;

/// `reason` of `lmos_sidecar_spans_dropped_total` for spans of a failed
/// export, or held back while exports fail.
pub const EXPORT_FAILED: &str = "export_failed";

/// What became of the spans the sidecar made (see [`super::super::batches`]);
/// clones count together.
#[derive(Debug, Clone)]
pub struct SpanCounters {
    pub(super) exported: Counter,
    pub(super) dropped: Family<Labels1, Counter>,
    /// `dropped` for `export_failed`, at hand: counted span by span while
    /// the collector is down.
    export_failed: Counter,
    /// Whether the last export failed (the collector is down or refuses).
    failing: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Default for SpanCounters {
    fn default() -> SpanCounters {
        let dropped = Family::<Labels1, Counter>::default();
        let export_failed = dropped.get_or_create(&[("reason", EXPORT_FAILED)]).clone();
        SpanCounters {
            exported: Counter::default(),
            dropped,
            export_failed,
            failing: Default::default(),
        }
    }
}

impl SpanCounters {
    /// One span not built while the exports fail.
    pub fn held_back(&self) {
        self.export_failed.inc();
    }

    pub fn exported(&self, n: u64) {
        self.exported.inc_by(n);
    }

    /// `reason`: `queue_full`, `export_failed`.
    pub fn dropped(&self, reason: &'static str) {
        self.dropped_many(reason, 1);
    }

    pub fn dropped_many(&self, reason: &'static str, n: u64) {
        self.dropped.get_or_create(&[("reason", reason)]).inc_by(n);
    }

    /// Records how the last export went; returns how the one before went.
    pub fn set_failing(&self, failing: bool) -> bool {
        self.failing
            .swap(failing, std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the last export failed.
    pub fn failing(&self) -> bool {
        self.failing.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl SpanCounters {
    /// Registers these counters (the tracer's, made before the metrics).
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "spans_exported",
            "Message spans the OTLP collector accepted",
            self.exported.clone(),
        );
        registry.register(
            "spans_dropped",
            "Message spans lost, by reason: queue_full (the exporter fell behind), export_failed (the collector refused or was unreachable)",
            self.dropped.clone(),
        );
    }
}
