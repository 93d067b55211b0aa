//! The exporting task: full batches from the queue, the open one every
//! `OTEL_BSP_SCHEDULE_DELAY` or when a flush asks, each sent as one request
//! through the [`Transport`], its buffer given back to the hops' side.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use super::batches::{Batch, Batches};
use super::envelope::Envelope;
use super::metrics::{SpanCounters, EXPORT_FAILED};
use super::transport::{Request, Transport};

/// Counts an export's `n` spans, and logs the first failed export
/// (collector down, wrong address) and the recovery, not every batch in
/// between. Spans of failed batches are dropped; messages are never held
/// back for them.
pub(super) fn account<E: std::fmt::Display>(
    counters: &SpanCounters,
    target: &str,
    n: u64,
    result: &Result<(), E>,
) {
    match result {
        Ok(()) => counters.exported(n),
        Err(_) => counters.dropped_many(EXPORT_FAILED, n),
    }
    match result {
        Err(e) if !counters.set_failing(true) => warn!(
            endpoint = %target,
            error = %e,
            "Cannot export spans to the OTLP collector; dropping them until it answers again."
        ),
        Ok(()) if counters.set_failing(false) => {
            info!(endpoint = %target, "Exporting spans to the OTLP collector again.")
        }
        _ => {}
    }
}

/// The exporting task's state.
pub(super) struct Exporter<T> {
    /// Weak: the task ends with the sidecar's tracing.
    pub(super) batches: Weak<Batches>,
    pub(super) transport: T,
    /// The collector's address, for the logs.
    pub(super) target: String,
    pub(super) envelope: Envelope,
    pub(super) counters: SpanCounters,
}

impl<T: Transport> Exporter<T> {
    pub(super) async fn run(
        self,
        mut queued: mpsc::Receiver<Batch>,
        mut flush_asked: mpsc::Receiver<oneshot::Sender<()>>,
        delay: Duration,
    ) {
        let start = tokio::time::Instant::now() + delay;
        let mut every = tokio::time::interval_at(start, delay);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut request = Arc::new(Request::default());
        loop {
            tokio::select! {
                batch = queued.recv() => match batch {
                    Some(batch) => request = self.export(batch, request).await,
                    None => return,
                },
                _ = every.tick() => {
                    let Some(batches) = self.batches.upgrade() else { return };
                    if let Some(batch) = batches.take_open() {
                        request = self.export(batch, request).await;
                    }
                }
                asked = flush_asked.recv() => {
                    let Some(done) = asked else { return };
                    while let Ok(batch) = queued.try_recv() {
                        request = self.export(batch, request).await;
                    }
                    if let Some(batch) = self.batches.upgrade().and_then(|b| b.take_open()) {
                        request = self.export(batch, request).await;
                    }
                    let _ = done.send(());
                }
            }
        }
    }

    /// Sends one batch; returns the request's buffers for the next one
    /// (fresh ones if the transport still holds them).
    async fn export(&self, batch: Batch, request: Arc<Request>) -> Arc<Request> {
        let mut parts = Arc::try_unwrap(request).unwrap_or_default();
        self.envelope
            .wrap(batch.spans.len(), &mut parts.header, &mut parts.trailer);
        parts.spans = batch.spans;
        let request = Arc::new(parts);
        let result = self.transport.send(request.clone()).await;
        account(&self.counters, &self.target, batch.count as u64, &result);
        let mut parts = Arc::try_unwrap(request).unwrap_or_default();
        if let Some(batches) = self.batches.upgrade() {
            batches.recycle(std::mem::take(&mut parts.spans));
        }
        Arc::new(parts)
    }
}
