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

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use super::hop_wire::{self, Envelope};
use super::messaging::Hop;
use super::metrics::{SpanCounters, EXPORT_FAILED};

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
    spans: Vec<u8>,
    count: usize,
}

/// Sends one `ExportTraceServiceRequest`: `header`, `spans`, `trailer`.
pub trait Transport: Send + Sync + 'static {
    fn send(&self, request: Arc<Request>) -> impl Future<Output = Result<(), String>> + Send;
}

/// One request's bytes, in three parts.
#[derive(Debug, Default)]
pub struct Request {
    pub header: Vec<u8>,
    pub spans: Vec<u8>,
    pub trailer: Vec<u8>,
}

impl Request {
    pub fn len(&self) -> usize {
        self.header.len() + self.spans.len() + self.trailer.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
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
    fn take_open(&self) -> Option<Batch> {
        let mut open = self.lock();
        (open.batch.count > 0).then(|| open.take())
    }

    fn recycle(&self, mut spans: Vec<u8>) {
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

/// Counts an export's `n` spans, and logs the first failed export
/// (collector down, wrong address) and the recovery, not every batch in
/// between. Spans of failed batches are dropped; messages are never held
/// back for them. Both exporting paths account this way.
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
struct Exporter<T> {
    /// Weak: the task ends with the sidecar's tracing.
    batches: Weak<Batches>,
    transport: T,
    /// The collector's address, for the logs.
    target: String,
    envelope: Envelope,
    counters: SpanCounters,
}

impl<T: Transport> Exporter<T> {
    async fn run(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::messaging::{self, MessageInfo, Operation, Parent};
    use opentelemetry::trace::{SpanId, TraceFlags, TraceState};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_sdk::Resource;
    use prost::Message as _;
    use std::time::SystemTime;
    use tokio::sync::Semaphore;

    /// Keeps what it is sent, decoded; answers as told, once allowed to.
    #[derive(Clone)]
    struct Recorder {
        sent: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
        fail: Arc<std::sync::atomic::AtomicBool>,
        gate: Arc<Semaphore>,
    }

    impl Recorder {
        fn open() -> Recorder {
            Recorder {
                sent: Arc::default(),
                fail: Arc::default(),
                gate: Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
            }
        }

        fn spans(&self) -> Vec<usize> {
            let sent = self.sent.lock().unwrap();
            sent.iter()
                .map(|r| r.resource_spans[0].scope_spans[0].spans.len())
                .collect()
        }
    }

    impl Transport for Recorder {
        async fn send(&self, request: Arc<Request>) -> Result<(), String> {
            let _pass = self.gate.acquire().await.unwrap();
            let bytes = [&request.header[..], &request.spans, &request.trailer].concat();
            let decoded =
                ExportTraceServiceRequest::decode(&bytes[..]).map_err(|e| e.to_string())?;
            self.sent.lock().unwrap().push(decoded);
            if self.fail.load(std::sync::atomic::Ordering::Relaxed) {
                return Err("refused".into());
            }
            Ok(())
        }
    }

    fn start(
        recorder: &Recorder,
        max_batch: usize,
        max_queue: usize,
    ) -> (Arc<Batches>, SpanCounters) {
        let counters = SpanCounters::default();
        let settings = Settings {
            max_batch,
            delay: Duration::from_secs(3600),
            max_queue,
        };
        let envelope = Envelope::new(&Resource::builder().build(), &messaging::scope());
        let batches = Batches::start(
            recorder.clone(),
            "test",
            envelope,
            settings,
            counters.clone(),
        );
        (batches, counters)
    }

    fn push(batches: &Batches, n: usize) {
        let parent = Parent::root();
        let state = TraceState::default();
        for i in 0..n {
            batches.push(&Hop {
                span_id: SpanId::from(i as u64 + 1),
                flags: TraceFlags::SAMPLED,
                state: &state,
                parent: &parent,
                operation: Operation::Process,
                destination: "lmos/urn:t/events/e",
                info: &MessageInfo::default(),
                error: None,
                time: SystemTime::now(),
                start: SystemTime::now(),
                rpc: None,
            });
        }
    }

    fn metric(counters: &SpanCounters, line: &str) -> u64 {
        let rendered = crate::telemetry::metrics::Metrics::with_spans(counters).render();
        rendered
            .lines()
            .find_map(|l| l.strip_prefix(line))
            .map_or(0, |n| n.trim().parse().unwrap())
    }

    const EXPORTED: &str = "lmos_sidecar_spans_exported_total ";
    const QUEUE_FULL_LINE: &str = r#"lmos_sidecar_spans_dropped_total{reason="queue_full"} "#;
    const FAILED_LINE: &str = r#"lmos_sidecar_spans_dropped_total{reason="export_failed"} "#;

    #[tokio::test]
    async fn full_batches_go_at_once_and_a_flush_sends_the_rest() {
        let recorder = Recorder::open();
        let (batches, counters) = start(&recorder, 4, 64);
        push(&batches, 10);
        batches.flush(Duration::from_secs(5)).await.unwrap();
        assert_eq!(recorder.spans(), [4, 4, 2]);
        assert_eq!(metric(&counters, EXPORTED), 10);
        // Buffers went round: a second round sends the same way.
        push(&batches, 5);
        batches.flush(Duration::from_secs(5)).await.unwrap();
        assert_eq!(recorder.spans(), [4, 4, 2, 4, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_partial_batch_goes_after_the_delay() {
        let recorder = Recorder::open();
        let counters = SpanCounters::default();
        let settings = Settings {
            max_batch: 512,
            delay: Duration::from_secs(5),
            max_queue: 4096,
        };
        let envelope = Envelope::new(&Resource::builder().build(), &messaging::scope());
        let batches = Batches::start(recorder.clone(), "test", envelope, settings, counters);
        push(&batches, 3);
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(recorder.spans().is_empty());
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(recorder.spans(), [3]);
    }

    #[tokio::test]
    async fn spans_beyond_the_queue_are_counted_as_dropped() {
        let recorder = Recorder::open();
        recorder.gate.forget_permits(Semaphore::MAX_PERMITS);
        // Two batches may wait while the exporter is stuck on one.
        let (batches, counters) = start(&recorder, 4, 8);
        push(&batches, 4);
        tokio::task::yield_now().await;
        push(&batches, 20);
        recorder.gate.add_permits(Semaphore::MAX_PERMITS);
        batches.flush(Duration::from_secs(5)).await.unwrap();
        let exported = metric(&counters, EXPORTED);
        let dropped = metric(&counters, QUEUE_FULL_LINE);
        assert_eq!(exported + dropped, 24, "every span accounted for");
        assert!((8..=12).contains(&exported), "{exported} exported");
        assert_eq!(recorder.spans().iter().sum::<usize>() as u64, exported);
    }

    #[tokio::test]
    async fn spans_of_a_failed_export_are_counted_and_the_failure_is_known() {
        let recorder = Recorder::open();
        let (batches, counters) = start(&recorder, 4, 64);
        recorder
            .fail
            .store(true, std::sync::atomic::Ordering::Relaxed);
        push(&batches, 6);
        batches.flush(Duration::from_secs(5)).await.unwrap();
        assert_eq!(metric(&counters, FAILED_LINE), 6);
        assert!(counters.failing());
        recorder
            .fail
            .store(false, std::sync::atomic::Ordering::Relaxed);
        push(&batches, 1);
        batches.flush(Duration::from_secs(5)).await.unwrap();
        assert_eq!(metric(&counters, EXPORTED), 1);
        assert!(!counters.failing());
    }
}
