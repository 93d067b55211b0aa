//! Where finished message spans go, and the probes that keep spans from
//! being built while exports fail.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::trace::{ShouldSample, SpanProcessor};

use super::Hop;
use crate::telemetry::batches::Batches;
use crate::telemetry::metrics::SpanCounters;
use crate::telemetry::recent::SpanStore;

/// Where finished message spans go: written into the OTLP batches the
/// sidecar exports itself (gRPC or HTTP/protobuf), or handed to an SDK span
/// processor as `SpanData` (the tests' in-memory exporter, through
/// [`crate::telemetry::Tracing::with_exporter`]); and kept in the recent-span
/// store for the console, with an export or without one.
#[derive(Debug, Clone)]
pub struct SpanSink {
    /// `None`: kept in `recent` only.
    target: Option<Target>,
    recent: Option<SpanStore>,
    scope: InstrumentationScope,
    /// `None`: the default, parent-based always-on, decided without a call.
    pub(super) sampler: Option<Arc<dyn ShouldSample>>,
    counters: SpanCounters,
    probes: Arc<Probes>,
}

#[derive(Debug, Clone)]
enum Target {
    Processor(Arc<dyn SpanProcessor>),
    Batches(Arc<Batches>),
}

/// While the collector is not answering, spans are not built at all, but
/// for one probe every [`PROBE_EVERY`] that tells when it answers again:
/// they would only be encoded and then dropped by the failed export, and
/// building them cost a tenth of the fan-out's throughput with the
/// collector down (issue 16). They are counted as dropped
/// (`export_failed`), as they would have been.
#[derive(Debug)]
struct Probes {
    since: Instant,
    /// Milliseconds since `since` of the last probe.
    last_probe: AtomicU64,
}

pub(super) const PROBE_EVERY: Duration = Duration::from_millis(100);

impl SpanSink {
    /// With the sampler `OTEL_TRACES_SAMPLER` (and `_ARG`) choose, as the
    /// SDK reads them.
    pub fn new(processor: Arc<dyn SpanProcessor>) -> SpanSink {
        SpanSink::to(Some(Target::Processor(processor)))
    }

    /// Spans written straight into export batches (see [`Batches`]).
    pub fn batches(batches: Arc<Batches>) -> SpanSink {
        SpanSink::to(Some(Target::Batches(batches)))
    }

    /// Spans kept in `store` only, exported nowhere.
    pub fn recent_only(store: SpanStore) -> SpanSink {
        SpanSink::to(None).with_recent(store)
    }

    /// Also keeping every span in `store`.
    pub fn with_recent(mut self, store: SpanStore) -> SpanSink {
        self.recent = Some(store);
        self
    }

    pub fn recent(&self) -> Option<&SpanStore> {
        self.recent.as_ref()
    }

    /// Whether the spans leave the process: only then may a message sent
    /// on carry a span of the sidecar's as its parent. A span that no
    /// collector holds would leave the agents' own spans under a parent
    /// missing from their traces.
    pub fn exports(&self) -> bool {
        self.target.is_some()
    }

    fn to(target: Option<Target>) -> SpanSink {
        let chosen = std::env::var("OTEL_TRACES_SAMPLER")
            .is_ok_and(|s| !s.is_empty() && s != "parentbased_always_on");
        SpanSink {
            target,
            recent: None,
            scope: scope(),
            sampler: chosen.then(|| Arc::from(opentelemetry_sdk::trace::Config::default().sampler)),
            counters: SpanCounters::default(),
            probes: Arc::new(Probes {
                since: Instant::now(),
                last_probe: AtomicU64::new(0),
            }),
        }
    }

    /// Counting with `counters`, and holding spans back while they say the
    /// exports fail.
    pub fn with_counters(mut self, counters: SpanCounters) -> SpanSink {
        self.counters = counters;
        self
    }

    /// Whether to export this span: not while exports fail, but for a probe.
    fn takes_span(&self) -> bool {
        if !self.counters.failing() {
            return true;
        }
        let held = &self.probes;
        let now = held.since.elapsed().as_millis() as u64;
        let last = held.last_probe.load(Ordering::Relaxed);
        let probe = now.saturating_sub(last) >= PROBE_EVERY.as_millis() as u64
            && held
                .last_probe
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        if !probe {
            self.counters.held_back();
        }
        probe
    }

    /// Keeps the hop's span, and exports it unless exports fail.
    pub(super) fn record(&self, hop: &Hop<'_>) {
        if let Some(store) = &self.recent {
            store.push(hop.stored());
        }
        let Some(target) = &self.target else {
            return;
        };
        if !self.takes_span() {
            return;
        }
        match target {
            Target::Processor(processor) => processor.on_end(hop.span_data(&self.scope)),
            Target::Batches(batches) => batches.push(hop),
        }
    }

    /// Exports what is left, for at most `bound`.
    pub async fn shutdown(&self, bound: Duration) -> Result<(), String> {
        match &self.target {
            None => Ok(()),
            // The SDK's shutdown blocks, and on a current-thread runtime it
            // would wait for the very runtime it blocks.
            Some(Target::Processor(processor)) => {
                let processor = processor.clone();
                tokio::task::spawn_blocking(move || processor.shutdown_with_timeout(bound))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())
            }
            Some(Target::Batches(batches)) => batches.flush(bound).await,
        }
    }
}

/// The scope message spans are reported under.
pub fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("lmos-sidecar")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}
