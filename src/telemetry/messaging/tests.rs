//! Message spans: trace context read and passed on, sampling, and the
//! probes while exports fail.

use std::sync::Arc;

use opentelemetry::trace::Status;
use opentelemetry::KeyValue;

use super::parent::read_traceparent;
use super::sink::PROBE_EVERY;
use super::*;
use crate::telemetry::metrics::SpanCounters;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SimpleSpanProcessor};

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const SPAN: &str = "b7ad6b7169203331";

fn traced() -> (MessageTracer, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let processor = SimpleSpanProcessor::new(exporter.clone());
    let sink = SpanSink::new(Arc::new(processor));
    (MessageTracer::new(Some(sink), true, false), exporter)
}

fn incoming(flags: &str) -> TraceContext {
    TraceContext {
        traceparent: format!("00-{TRACE}-{SPAN}-{flags}"),
        tracestate: Some("congo=t61rcWkgMzE".into()),
    }
}

#[test]
fn traceparents_are_read_as_the_w3c_says() {
    let ok = format!("00-{TRACE}-{SPAN}-01");
    assert!(read_traceparent(&ok).is_some());
    // A later version may carry more after a dash; `00` may not.
    assert!(read_traceparent(&format!("01-{TRACE}-{SPAN}-01-more")).is_some());
    for bad in [
        format!("00-{TRACE}-{SPAN}-01-more"),
        format!("ff-{TRACE}-{SPAN}-01"),
        format!("00-{}-{SPAN}-01", TRACE.to_uppercase()),
        format!("00-{}-{SPAN}-01", "0".repeat(32)),
        format!("00-{TRACE}-{}-01", "0".repeat(16)),
        format!("00-{TRACE}-{SPAN}-0x"),
        format!("00-{}-{SPAN}-01", &TRACE[1..]),
        format!("00_{TRACE}-{SPAN}-01"),
        String::new(),
    ] {
        assert_eq!(read_traceparent(&bad), None, "{bad}");
    }
    // Flags other than sampled are not passed on.
    let (_, _, flags) = read_traceparent(&format!("00-{TRACE}-{SPAN}-ff")).unwrap();
    assert_eq!(flags, TraceFlags::SAMPLED);
}

#[test]
fn a_hop_is_one_finished_span_under_the_message_and_its_context_goes_on() {
    let (tracer, exporter) = traced();
    let info = MessageInfo {
        message_type: Some("event"),
        thing_id: Some("urn:t"),
        affordance: Some("e"),
        message_id: Some("m1"),
        correlation_id: None,
        recipients: Some(3),
    };
    let out = tracer
        .hop(
            Operation::Process,
            "lmos/urn:t/events/e",
            Some(&incoming("01")),
            &info,
            None,
        )
        .unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let [span] = &spans[..] else {
        panic!("one span: {spans:?}")
    };
    assert_eq!(span.name, "process lmos/urn:t/events/e");
    assert_eq!(span.span_kind, SpanKind::Consumer);
    assert_eq!(span.span_context.trace_id().to_string(), TRACE);
    assert_eq!(span.parent_span_id.to_string(), SPAN);
    assert!(span.parent_span_is_remote);
    assert_eq!(
        span.span_context.trace_state().header(),
        "congo=t61rcWkgMzE"
    );
    assert!(span
        .attributes
        .contains(&KeyValue::new("lmos.recipients", 3_i64)));
    assert_eq!(
        out.traceparent,
        format!("00-{TRACE}-{}-01", span.span_context.span_id())
    );
    assert_eq!(out.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
}

#[test]
fn an_unsampled_parent_gets_an_unsampled_context_and_no_span() {
    let (tracer, exporter) = traced();
    let out = tracer
        .hop(
            Operation::Publish,
            "t",
            Some(&incoming("00")),
            &MessageInfo::default(),
            None,
        )
        .unwrap();
    assert!(exporter.get_finished_spans().unwrap().is_empty());
    let (trace, span, flags) = read_traceparent(&out.traceparent).unwrap();
    assert_eq!(trace.to_string(), TRACE);
    assert_ne!(span.to_string(), SPAN, "a span ID of its own");
    assert_eq!(flags, TraceFlags::default());
}

#[test]
fn while_exports_fail_spans_are_counted_not_built_but_for_a_probe() {
    let exporter = InMemorySpanExporter::default();
    let counters = SpanCounters::default();
    let sink = SpanSink::new(Arc::new(SimpleSpanProcessor::new(exporter.clone())))
        .with_counters(counters.clone());
    let tracer = MessageTracer::new(Some(sink), true, false);
    let hop = || {
        tracer
            .hop(
                Operation::Publish,
                "t",
                Some(&incoming("01")),
                &MessageInfo::default(),
                None,
            )
            .expect("the context goes on either way")
    };
    hop();
    assert_eq!(exporter.get_finished_spans().unwrap().len(), 1);
    counters.set_failing(true);
    for _ in 0..10 {
        hop();
    }
    assert_eq!(exporter.get_finished_spans().unwrap().len(), 1, "held back");
    let dropped = crate::telemetry::metrics::Metrics::with_spans(&counters).render();
    assert!(
        dropped.contains(r#"lmos_sidecar_spans_dropped_total{reason="export_failed"} 10"#),
        "{dropped}"
    );
    std::thread::sleep(PROBE_EVERY);
    hop();
    hop();
    assert_eq!(exporter.get_finished_spans().unwrap().len(), 2, "one probe");
    counters.set_failing(false);
    hop();
    assert_eq!(exporter.get_finished_spans().unwrap().len(), 3);
}

#[test]
fn an_untraced_message_starts_a_sampled_trace() {
    let (tracer, exporter) = traced();
    let out = tracer
        .hop(
            Operation::Publish,
            "t",
            None,
            &MessageInfo::default(),
            Some("boom"),
        )
        .unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].parent_span_id, SpanId::INVALID);
    assert_eq!(spans[0].status, Status::error("boom"));
    let (trace, _, flags) = read_traceparent(&out.traceparent).unwrap();
    assert_eq!(trace, spans[0].span_context.trace_id());
    assert!(flags.is_sampled());
}

/// Spans kept for the console only: recorded under the message's context,
/// which goes on untouched; an untraced message starts no trace; an RPC
/// call (the sidecar's own request) still does.
#[test]
fn kept_but_not_exported_spans_leave_messages_untouched() {
    let store = crate::telemetry::recent::SpanStore::new(1 << 20);
    let tracer = MessageTracer::new(Some(SpanSink::recent_only(store.clone())), true, false);
    assert!(tracer.is_on());
    let info = MessageInfo {
        thing_id: Some("urn:w"),
        ..MessageInfo::default()
    };
    let out = tracer.hop(
        Operation::Publish,
        "lmos/urn:w/events/e",
        Some(&incoming("01")),
        &info,
        None,
    );
    assert_eq!(out, None, "the message goes on as it came");
    let id = TraceId::from_hex(TRACE).unwrap().to_bytes();
    let kept = store.trace(&id).expect("the span is kept");
    assert_eq!(kept.spans.len(), 1);
    assert_eq!(
        kept.spans[0].head.parent_id,
        Some(SpanId::from_hex(SPAN).unwrap().to_bytes())
    );
    assert!(kept.spans[0].head.parent_remote);
    assert_eq!(kept.summary.things, vec![Box::from("urn:w")]);

    let untraced = tracer.hop(Operation::Publish, "t", None, &info, None);
    assert_eq!(untraced, None);
    assert_eq!(store.newest(10, |_, _| true).len(), 1, "no new trace");

    let rpc = tracer
        .begin_rpc(None, None, "tools/call x")
        .expect("a new trace");
    let call = RpcInfo {
        protocol: "mcp",
        method: "tools/call",
        target: "x",
        request_id: None,
        session_id: None,
        protocol_version: None,
        client: false,
    };
    tracer.end_rpc(&rpc, &call, None);
    assert_eq!(store.newest(10, |_, _| true).len(), 2);
}

/// With an export, the store gets every span, those held back while the
/// collector is down included.
#[test]
fn the_store_keeps_spans_that_a_failing_export_holds_back() {
    let exporter = InMemorySpanExporter::default();
    let counters = SpanCounters::default();
    let store = crate::telemetry::recent::SpanStore::new(1 << 20);
    let sink = SpanSink::new(Arc::new(SimpleSpanProcessor::new(exporter.clone())))
        .with_counters(counters.clone())
        .with_recent(store.clone());
    let tracer = MessageTracer::new(Some(sink), true, false);
    counters.set_failing(true);
    for _ in 0..3 {
        let out = tracer.hop(
            Operation::Process,
            "t",
            Some(&incoming("01")),
            &MessageInfo::default(),
            None,
        );
        assert!(out.is_some(), "exported spans are parents downstream");
    }
    let id = TraceId::from_hex(TRACE).unwrap().to_bytes();
    assert_eq!(store.trace(&id).unwrap().spans.len(), 3);
    assert!(
        exporter.get_finished_spans().unwrap().len() <= 1,
        "a probe at most"
    );
}
