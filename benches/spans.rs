//! What one message span costs the sidecar, against the OpenTelemetry SDK's
//! own paths for the same span, in the same run:
//!
//! - making it: the sidecar's `MessageTracer` (a finished record handed
//!   to the processor) against the SDK's tracer with the W3C propagator
//!   reading the `traceparent` (what the sidecar did before issue 16's
//!   work);
//! - making it and writing it for export over OTLP/gRPC: the sidecar writes
//!   the hop straight into the open batch's protobuf (`hop_wire`,
//!   `batches`), against the SDK's tracer making the span plus what
//!   `opentelemetry-otlp`'s gRPC exporter does with each batch (clone it,
//!   convert it to the generated OTLP types, encode them with prost);
//! - making it and keeping it in the recent-span store for the console
//!   (`tracing.recent_spans_bytes`, full, each span a new trace), against
//!   writing the same spans for export.
//!
//! ```sh
//! cargo bench --bench spans
//! SPANS_N=2000000 cargo bench --bench spans
//! ```
//!
//! Spans are a fan-out's `process` span as the dispatcher makes it (ten
//! attributes); batches are the batch processor's default 512. Each figure
//! is the best of five rounds, in ns per span.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lmos_sidecar::telemetry::batches::{Batches, Settings};
use lmos_sidecar::telemetry::envelope::Envelope;
use lmos_sidecar::telemetry::metrics::SpanCounters;
use lmos_sidecar::telemetry::transport::{ExportError, Request, Transport};
use lmos_sidecar::telemetry::{
    messaging, MessageInfo, MessageTracer, Operation, SpanSink, TraceContext,
};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Span as _, SpanKind, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;
use prost::Message as _;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TOPIC: &str = "lmos/urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77/events/tick";
const BATCH: usize = 512;

/// Keeps the last batch of spans it is handed, as the batch processor's
/// queue would, and drops the rest.
#[derive(Debug, Default)]
struct Keep(Mutex<Vec<SpanData>>);

impl SpanProcessor for Keep {
    fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}
    fn on_end(&self, span: SpanData) {
        let mut kept = self.0.lock().unwrap();
        if kept.len() == BATCH {
            kept.clear();
        }
        kept.push(span);
    }
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _: std::time::Duration) -> OTelSdkResult {
        Ok(())
    }
}

fn info() -> MessageInfo<'static> {
    MessageInfo {
        message_type: Some("event"),
        thing_id: Some("urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77"),
        affordance: Some("tick"),
        message_id: Some("6a1c9a4e-8f7e-4a0e-9a41-2b0d5f1f2c3d"),
        correlation_id: None,
        recipients: Some(10),
    }
}

/// Best of five rounds of `n` calls, in ns per call.
fn best(n: usize, mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..n {
                f();
            }
            start.elapsed().as_nanos() as f64 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let n: usize = std::env::var("SPANS_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500_000);

    // Making a span: the sidecar's way.
    let kept = Arc::new(Keep::default());
    let ours = MessageTracer::new(Some(SpanSink::new(kept.clone())), true, false);
    let incoming = TraceContext {
        traceparent: TRACEPARENT.into(),
        tracestate: None,
    };
    let make_ours = best(n, || {
        let parent = ours.parent(Some(black_box(&incoming))).unwrap();
        black_box(ours.hop_from(&parent, Operation::Process, TOPIC, &info(), None));
    });
    let batch: Vec<SpanData> = std::mem::take(&mut *kept.0.lock().unwrap());

    // The SDK's way, as the sidecar did it before: the propagator reads the
    // context from a header map, the tracer builds a live span, ends it,
    // and the new context is formatted for the message.
    let sdk_kept = Arc::new(Keep::default());
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Shared(sdk_kept.clone()))
        .build();
    let tracer = provider.tracer("lmos-sidecar");
    let make_sdk = best(n, || {
        let mut carrier = HashMap::with_capacity(2);
        carrier.insert("traceparent".to_owned(), black_box(TRACEPARENT).to_owned());
        let cx = TraceContextPropagator::new().extract(&carrier);
        let i = info();
        let mut attributes = vec![
            KeyValue::new("messaging.system", "lmos"),
            KeyValue::new("messaging.destination.name", TOPIC.to_owned()),
            KeyValue::new("messaging.operation.type", "process"),
            KeyValue::new("messaging.operation.name", "process"),
        ];
        for (k, v) in [
            ("messaging.message.id", i.message_id),
            ("lmos.message_type", i.message_type),
            ("lmos.thing_id", i.thing_id),
            ("lmos.affordance", i.affordance),
        ] {
            attributes.push(KeyValue::new(k, v.unwrap().to_owned()));
        }
        attributes.push(KeyValue::new("lmos.recipients", 10_i64));
        let mut span = tracer
            .span_builder(format!("process {TOPIC}"))
            .with_kind(SpanKind::Consumer)
            .with_attributes(attributes)
            .start_with_context(&tracer, &cx);
        let sc = span.span_context().clone();
        span.end();
        black_box(format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        ));
        let _ = cx.span();
    });

    // Making it and writing it into the batch for export, the sidecar's
    // way (the exporting task sends nothing anywhere).
    let resource = Resource::builder()
        .with_service_name("lmos-sidecar")
        .build();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let batches = runtime.block_on(async {
        let envelope = Envelope::new(&resource, &messaging::scope());
        Batches::start(
            Discard,
            "nowhere",
            envelope,
            Settings::default(),
            SpanCounters::default(),
        )
    });
    let written = MessageTracer::new(Some(SpanSink::batches(batches)), true, false);
    let write_ours = best(n, || {
        let parent = written.parent(Some(black_box(&incoming))).unwrap();
        black_box(written.hop_from(&parent, Operation::Process, TOPIC, &info(), None));
    });

    // Making it and keeping it in the recent-span store (the default with
    // no endpoint), each span a trace of its own as each event of the
    // fan-out bench is, the store full so that every span evicts a trace:
    // against making it only.
    let store = lmos_sidecar::telemetry::recent::SpanStore::new(8 * 1024 * 1024);
    let kept_recent = MessageTracer::new(Some(SpanSink::recent_only(store.clone())), true, false);
    let distinct: Vec<TraceContext> = (0..n)
        .map(|i| TraceContext {
            traceparent: format!("00-{:032x}-00f067aa0ba902b7-01", i as u128 + 1),
            tracestate: None,
        })
        .collect();
    let mut next = 0;
    let keep_ours = best(n, || {
        let incoming = &distinct[next % distinct.len()];
        next += 1;
        let parent = kept_recent.parent(Some(black_box(incoming))).unwrap();
        black_box(kept_recent.hop_from(&parent, Operation::Process, TOPIC, &info(), None));
    });
    let write_distinct = best(n, || {
        let incoming = &distinct[next % distinct.len()];
        next += 1;
        let parent = written.parent(Some(black_box(incoming))).unwrap();
        black_box(written.hop_from(&parent, Operation::Process, TOPIC, &info(), None));
    });

    // What opentelemetry-otlp's exporter does with each batch of the SDK's
    // spans.
    let rounds = (n / BATCH).max(1);
    let with_schema = ResourceAttributesWithSchema::from(&resource);
    let mut bytes = 0;
    let encode_sdk = best(rounds, || {
        // opentelemetry-otlp clones the batch to keep it for a retry.
        let request = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(
                black_box(&batch).clone(),
                &with_schema,
            ),
        };
        bytes = black_box(request.encode_to_vec()).len() / BATCH;
    }) / BATCH as f64;

    println!("one message span ({n} spans, best of 5 rounds; batches of {BATCH}, ~{bytes} B per span encoded)");
    println!(
        "{:<52} {:>10} {:>12} {:>8}",
        "", "sidecar", "SDK's path", "ratio"
    );
    println!(
        "{:<52} {:>7.0} ns {:>9.0} ns {:>7.2}×",
        "make it (read traceparent, span, new context)",
        make_ours,
        make_sdk,
        make_sdk / make_ours
    );
    let both_sdk = make_sdk + encode_sdk;
    println!(
        "{:<52} {:>7.0} ns {:>9.0} ns {:>7.2}×",
        "make it and write it for OTLP/gRPC export",
        write_ours,
        both_sdk,
        both_sdk / write_ours
    );
    println!(
        "{:<52} {:>7.0} ns (written for OTLP instead: {:.0} ns; {} KiB kept)",
        "make it and keep it for the console (recent spans)",
        keep_ours,
        write_distinct,
        store.used() / 1024
    );
    drop(runtime);
    let _ = provider.shutdown();
}

/// The SDK's provider takes its processor by value.
#[derive(Debug)]
struct Shared(Arc<Keep>);

impl SpanProcessor for Shared {
    fn on_start(&self, s: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.0.on_start(s, cx)
    }
    fn on_end(&self, span: SpanData) {
        self.0.on_end(span)
    }
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _: std::time::Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// A transport that sends nothing.
struct Discard;

impl Transport for Discard {
    async fn send(&self, _request: Arc<Request>) -> Result<(), ExportError> {
        Ok(())
    }
}
