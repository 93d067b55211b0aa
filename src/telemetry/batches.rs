//! The message spans' export: spans written into the open batch where the
//! message passes ([`super::hop_wire`]), full batches queued for one
//! exporting task, which sends each as one OTLP request and gives its
//! buffer back for another batch.
//!
//! The batching is the SDK's batch processor's, read from the same
//! variables: a batch goes when it holds `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`
//! spans (512), or every `OTEL_BSP_SCHEDULE_DELAY` (5 000 ms) with what it
//! has; at most `OTEL_BSP_MAX_QUEUE_SIZE` spans (32 768) wait, the spans of
//! a batch beyond that are dropped and counted (`queue_full`). One export
//! at a time, as the SDK's.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::envelope::Envelope;
use super::exporter::Exporter;
use super::hop_wire;
use super::messaging::Hop;
use super::metrics::SpanCounters;
use super::transport::Transport;

/// `reason` of `lmos_sidecar_spans_dropped_total` for spans that found the
/// queue full.
pub const QUEUE_FULL: &str = "queue_full";

/// Buffers kept for the next batches; more come back only after a burst.
const SPARE_BUFFERS: usize = 4;

/// How spans are batched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub max_batch: usize,
    pub delay: Duration,
    pub max_queue: usize,
}

impl Default for Settings {
    /// The SDK's defaults, but for the queue: its 2 048 spans are gone in a
    /// few milliseconds of fan-out.
    fn default() -> Settings {
        Settings {
            max_batch: 512,
            delay: Duration::from_millis(5_000),
            max_queue: 32 * 1024,
        }
    }
}

impl Settings {
    /// The defaults, overridden by the `OTEL_BSP_*` variables as the SDK
    /// reads them (a batch no larger than the queue).
    pub fn from_env() -> Settings {
        let read = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let mut settings = Settings::default();
        if let Some(n) = read("OTEL_BSP_MAX_QUEUE_SIZE").filter(|&n| n > 0) {
            settings.max_queue = n as usize;
        }
        if let Some(n) = read("OTEL_BSP_MAX_EXPORT_BATCH_SIZE").filter(|&n| n > 0) {
            settings.max_batch = n as usize;
        }
        if let Some(ms) = read("OTEL_BSP_SCHEDULE_DELAY") {
            settings.delay = Duration::from_millis(ms.max(1));
        }
        settings.max_batch = settings.max_batch.min(settings.max_queue);
        settings
    }

    /// Full batches that may wait for the exporter.
    fn queued_batches(&self) -> usize {
        (self.max_queue / self.max_batch).max(1)
    }
}

/// Spans encoded, `count` of them, each a `ScopeSpans.spans` entry.
#[derive(Debug, Default)]
pub struct Batch {
    pub(super) spans: Vec<u8>,
    pub(super) count: usize,
}

/// The hops' side: the open batch, and the way to the exporting task.
#[derive(Debug)]
pub struct Batches {
    open: Mutex<Open>,
    full: mpsc::Sender<Batch>,
    flushes: mpsc::Sender<oneshot::Sender<()>>,
    max_batch: usize,
    counters: SpanCounters,
}

#[derive(Debug, Default)]
struct Open {
    batch: Batch,
    /// One span's fields, before its length is known.
    scratch: Vec<u8>,
    spare: Vec<Vec<u8>>,
}

impl Open {
    /// The open batch, replaced by an empty one (on a spare buffer).
    fn take(&mut self) -> Batch {
        let spans = self.spare.pop().unwrap_or_default();
        std::mem::replace(&mut self.batch, Batch { spans, count: 0 })
    }
}

impl Batches {
    /// The batches, and their exporting task on the current runtime.
    pub fn start<T: Transport>(
        transport: T,
        target: &str,
        envelope: Envelope,
        settings: Settings,
        counters: SpanCounters,
    ) -> Arc<Batches> {
        let (full, queued) = mpsc::channel(settings.queued_batches());
        let (flushes, flush_asked) = mpsc::channel(1);
        let batches = Arc::new(Batches {
            open: Mutex::default(),
            full,
            flushes,
            max_batch: settings.max_batch,
            counters: counters.clone(),
        });
        let exporter = Exporter {
            batches: Arc::downgrade(&batches),
            transport,
            target: target.to_owned(),
            envelope,
            counters,
        };
        tokio::spawn(exporter.run(queued, flush_asked, settings.delay));
        batches
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the hop's span into the open batch; queues the batch once
    /// full. Never waits: a full queue drops the batch, counted.
    pub(super) fn push(&self, hop: &Hop<'_>) {
        let full = {
            let mut open = self.lock();
            let Open { batch, scratch, .. } = &mut *open;
            hop_wire::put_hop(&mut batch.spans, scratch, hop);
            batch.count += 1;
            (batch.count >= self.max_batch).then(|| open.take())
        };
        if let Some(batch) = full {
            self.queue(batch);
        }
    }

    fn queue(&self, batch: Batch) {
        if let Err(e) = self.full.try_send(batch) {
            let batch = match e {
                mpsc::error::TrySendError::Full(b) | mpsc::error::TrySendError::Closed(b) => b,
            };
            self.counters.dropped_many(QUEUE_FULL, batch.count as u64);
            self.recycle(batch.spans);
        }
    }

    /// The open batch, if it has spans.
    pub(super) fn take_open(&self) -> Option<Batch> {
        let mut open = self.lock();
        (open.batch.count > 0).then(|| open.take())
    }

    pub(super) fn recycle(&self, mut spans: Vec<u8>) {
        spans.clear();
        let mut open = self.lock();
        if open.spare.len() < SPARE_BUFFERS {
            open.spare.push(spans);
        }
    }

    /// Exports the open batch and every queued one; returns once they are
    /// sent, or after `bound`.
    pub async fn flush(&self, bound: Duration) -> Result<(), String> {
        let (done, sent) = oneshot::channel();
        let asked = async {
            self.flushes
                .send(done)
                .await
                .map_err(|_| "the span exporter has stopped".to_owned())?;
            sent.await
                .map_err(|_| "the span exporter has stopped".to_owned())
        };
        tokio::time::timeout(bound, asked)
            .await
            .map_err(|_| format!("the last spans were not sent within {bound:?}"))?
    }
}

#[cfg(test)]
#[path = "batches_tests.rs"]
mod tests;
