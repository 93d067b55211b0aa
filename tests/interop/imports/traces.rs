//! One trace from the consumer through the sidecar into the upstream: the
//! fixture's `whoami` tool answers the `traceparent` it got in the MCP
//! request's `_meta`; its trace is the consumer's, and its parent is the
//! sidecar's CLIENT span for the upstream call, exported over OTLP/gRPC
//! (on the wire, to a collector inside the test) in that same trace.

use lmos_sidecar::config::{ImportConfig, OtlpProtocol};
use lmos_testkit::otlp::{grpc_collector, hex, received};
use lmos_testkit::upstreams::{self, Fixture};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use serde_json::json;

use super::*;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

async fn one_trace(import: ImportConfig) {
    let (collector, mut exports) = grpc_collector().await;
    let mut config = config_with(vec![import], vec![]);
    config.tracing.endpoint = format!("http://{collector}");
    config.tracing.protocol = OtlpProtocol::Grpc;
    let sidecar = start_config(config).await;
    let mut ws = sidecar.ws().await;
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let got = invoke(
        &mut ws,
        CALC,
        "whoami",
        json!({}),
        json!({"traceparent": traceparent}),
    )
    .await;
    let done = last(&got);
    assert_eq!(done["status"], "completed", "{got:#?}");
    let upstream = done["output"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        trace_id_of(&upstream),
        Some(TRACE),
        "the upstream got {upstream:?}: {got:#?}"
    );
    let hop = upstream.split('-').nth(2).unwrap_or_default().to_owned();
    assert_ne!(
        hop, PARENT,
        "the sidecar's own span is the upstream's parent"
    );

    // Stopping flushes the batch.
    sidecar.stop().await;
    let spans = received(&mut exports).await;
    let ours: Vec<_> = spans
        .iter()
        .filter(|e| hex(&e.span.trace_id) == TRACE)
        .collect();
    let names: Vec<(&str, i32)> = ours
        .iter()
        .map(|e| (e.span.name.as_str(), e.span.kind))
        .collect();
    let client = ours
        .iter()
        .find(|e| hex(&e.span.span_id) == hop)
        .unwrap_or_else(|| panic!("the upstream's parent {hop} was not exported: {names:?}"));
    assert_eq!(client.span.kind, SpanKind::Client as i32, "{names:?}");
    assert!(client.span.end_time_unix_nano > client.span.start_time_unix_nano);
    assert!(
        client.service.contains("lmos-sidecar"),
        "{}",
        client.service
    );
    // It hangs under the consumer's request, not beside it.
    assert!(
        ours.iter().any(|e| hex(&e.span.parent_span_id) == PARENT),
        "a span under the consumer's: {names:?}"
    );
}

#[tokio::test]
async fn one_trace_spans_consumer_sidecar_and_an_mcp_server_over_streamable_http() {
    let fixture = Fixture::python(MCP_PY, &["http"]).await;
    one_trace(upstreams::mcp_url("calc", &fixture.url("/mcp"))).await;
}

#[tokio::test]
async fn one_trace_spans_consumer_sidecar_and_an_mcp_server_over_stdio() {
    one_trace(upstreams::mcp_python("calc", MCP_PY, &["stdio"])).await;
}
