//! Real OTLP on the wire: receivers inside the test get the sidecar's spans
//! over gRPC and over HTTP/protobuf; with the collector down, messages still
//! flow and shutdown does not hang.

use lmos_testkit as common;

use std::net::SocketAddr;

use common::otlp::{grpc_collector, hex, Exports};
use common::{lmos, TestSidecar, WsClient, WAIT};
use lmos_sidecar::config::OtlpProtocol;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::json;
use tokio::sync::mpsc;

const THING: &str = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT: &str = "b7ad6b7169203331";

async fn http_collector() -> (
    SocketAddr,
    mpsc::UnboundedReceiver<ExportTraceServiceRequest>,
) {
    use axum::extract::State;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            axum::routing::post(
                |State(tx): State<mpsc::UnboundedSender<ExportTraceServiceRequest>>,
                 body: bytes::Bytes| async move {
                    let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                    let _ = tx.send(request);
                    (
                        [("content-type", "application/x-protobuf")],
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                },
            ),
        )
        .with_state(tx);
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, rx)
}

async fn sidecar_exporting_to(endpoint: String, protocol: OtlpProtocol) -> TestSidecar {
    let mut config = common::test_config();
    config.tracing.endpoint = endpoint;
    config.tracing.protocol = protocol;
    TestSidecar::start_with(config).await
}

/// A consumer's invokeAction, the agent's two statuses, back to the consumer.
async fn invoke_round_trip(sidecar: &TestSidecar) {
    let mut agent = sidecar.ws_agent(THING).await;
    let mut consumer = sidecar.ws().await;
    invoke(&mut agent, &mut consumer).await;
}

async fn invoke(agent: &mut WsClient, consumer: &mut WsClient) {
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    consumer
        .send(lmos(
            THING,
            "invokeAction",
            json!({"action": "getWeather", "correlationID": "otlp", "traceparent": traceparent}),
        ))
        .await;
    let request = agent.recv().await;
    for status in ["pending", "completed"] {
        let mut reply = lmos(
            THING,
            "actionStatus",
            json!({"action": "getWeather", "status": status}),
        );
        reply["correlationID"] = request["correlationID"].clone();
        reply["traceparent"] = request["traceparent"].clone();
        agent.send(reply).await;
    }
    for _ in 0..2 {
        assert_eq!(consumer.recv().await["correlationID"], "otlp");
    }
}

/// Everything received until the exporter has been quiet for a moment.
async fn received(rx: &mut Exports) -> (Vec<Span>, Vec<String>) {
    common::otlp::received(rx)
        .await
        .into_iter()
        .map(|e| (e.span, e.service))
        .unzip()
}

fn assert_one_trace(spans: &[Span], services: &[String]) {
    let producer = spans
        .iter()
        .find(|s| s.name == format!("publish lmos/{THING}/agent/requests/invokeAction"))
        .unwrap_or_else(|| {
            panic!(
                "no request span among {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        });
    assert_eq!(producer.kind, SpanKind::Producer as i32);
    assert_eq!(hex(&producer.trace_id), TRACE);
    assert_eq!(hex(&producer.parent_span_id), PARENT);
    let replies: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == format!("process lmos/{THING}/agent/replies"))
        .collect();
    assert_eq!(replies.len(), 2, "one span per actionStatus");
    for r in replies {
        assert_eq!(r.kind, SpanKind::Consumer as i32);
        assert_eq!(r.trace_id, producer.trace_id, "one trace");
        assert_eq!(
            r.parent_span_id, producer.span_id,
            "children of the request"
        );
        assert!(r.attributes.iter().any(|kv| kv.key == "messaging.system"));
    }
    assert!(
        services.iter().any(|s| s.contains("lmos-sidecar")),
        "{services:?}"
    );
}

/// The round trip against a running collector, then shutdown (which
/// flushes the batch), then what the collector got.
async fn export_and_check(addr: SocketAddr, protocol: OtlpProtocol, mut rx: Exports) {
    let sidecar = sidecar_exporting_to(format!("http://{addr}"), protocol).await;
    invoke_round_trip(&sidecar).await;
    tokio::time::timeout(WAIT, sidecar.stop())
        .await
        .expect("shutdown does not hang");
    let (spans, services) = received(&mut rx).await;
    assert_one_trace(&spans, &services);
}

#[tokio::test]
async fn spans_arrive_over_otlp_grpc_and_are_flushed_on_shutdown() {
    // On this current-thread runtime the flush must not wait for itself.
    let (addr, rx) = grpc_collector().await;
    export_and_check(addr, OtlpProtocol::Grpc, rx).await;
}

#[tokio::test]
async fn spans_arrive_over_otlp_http_protobuf() {
    let (addr, rx) = http_collector().await;
    export_and_check(addr, OtlpProtocol::HttpProtobuf, rx).await;
}

#[tokio::test]
async fn with_the_collector_down_messages_flow_and_shutdown_ends() {
    for protocol in [OtlpProtocol::Grpc, OtlpProtocol::HttpProtobuf] {
        // A port nothing listens on.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let sidecar = sidecar_exporting_to(format!("http://{closed}"), protocol).await;
        let mut agent = sidecar.ws_agent(THING).await;
        let mut consumer = sidecar.ws().await;
        for _ in 0..3 {
            invoke(&mut agent, &mut consumer).await;
        }
        tokio::time::timeout(WAIT, sidecar.stop())
            .await
            .expect("shutdown does not hang");
    }
}
