//! The batches and their exporting task, against a transport that records.

use super::*;
use crate::telemetry::envelope::Envelope;
use crate::telemetry::messaging::{self, MessageInfo, Operation, Parent};
use crate::telemetry::transport::{ExportError, Request};
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
    async fn send(&self, request: Arc<Request>) -> Result<(), ExportError> {
        let _pass = self.gate.acquire().await.unwrap();
        let bytes = [&request.header[..], &request.spans, &request.trailer].concat();
        let decoded = ExportTraceServiceRequest::decode(&bytes[..]).expect("OTLP protobuf");
        self.sent.lock().unwrap().push(decoded);
        if self.fail.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(ExportError::Transport("refused".into()));
        }
        Ok(())
    }
}

fn start(recorder: &Recorder, max_batch: usize, max_queue: usize) -> (Arc<Batches>, SpanCounters) {
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
