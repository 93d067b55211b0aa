//! What operators look at: health, readiness, metrics.

use lmos_testkit as common;

use common::{http, lmos, TestSidecar};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message as WsMessage;

fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn health_and_readiness() {
    let sidecar = TestSidecar::start().await;
    let health = http(sidecar.http, "GET", "/healthz", None, b"").await;
    assert_eq!(health.status, 200);
    let ready = http(sidecar.http, "GET", "/readyz", None, b"").await;
    assert_eq!((ready.status, ready.body.as_str()), (200, "ready\n"));
    sidecar.stop().await;
}

#[tokio::test]
async fn metrics_count_real_traffic() {
    let sidecar = TestSidecar::start().await;
    let thing = "urn:metrics:thing";
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(thing, "subscribeAllEvents", json!({})))
        .await;
    consumer.barrier().await;
    let mut agent = sidecar.mqtt("agent").await;
    for i in 0..3 {
        agent.publish_event(thing, "e", json!(i)).await;
    }
    for _ in 0..3 {
        consumer.recv().await;
    }
    consumer.send_raw(WsMessage::Text("not json".into())).await;
    assert_eq!(consumer.recv().await["status"], "400");

    // A request and its answer, for the latency histogram.
    let mut ws_agent = sidecar.ws_agent(thing).await;
    consumer
        .send(lmos(thing, "readProperty", json!({"name": "p"})))
        .await;
    let request = ws_agent.recv().await;
    let mut reply = lmos(
        thing,
        "propertyReading",
        json!({"name": "p", "value": 1, "timestamp": "2025-01-20T19:00:00Z"}),
    );
    reply["correlationID"] = request["correlationID"].clone();
    ws_agent.send(reply).await;
    consumer.recv().await;

    let response = http(sidecar.http, "GET", "/metrics", None, b"").await;
    assert_eq!(response.status, 200);
    assert!(response
        .header("content-type")
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let text = response.body;
    let m =
        |series: &str| metric(&text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
    assert_eq!(
        m(r#"lmos_sidecar_messages_received_total{message_type="event",transport="mqtt"}"#),
        3.0
    );
    assert_eq!(
        m(r#"lmos_sidecar_messages_sent_total{message_type="event",transport="websocket"}"#),
        3.0
    );
    assert_eq!(
        m(
            r#"lmos_sidecar_messages_received_total{message_type="subscribeAllEvents",transport="websocket"}"#
        ),
        1.0
    );
    assert_eq!(m(r#"lmos_sidecar_errors_total{kind="invalid-json"}"#), 1.0);
    assert_eq!(m(r#"lmos_sidecar_connections{transport="websocket"}"#), 2.0);
    // rumqttd reports its connections every second.
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        let text = http(sidecar.http, "GET", "/metrics", None, b"").await.body;
        if metric(&text, r#"lmos_sidecar_connections{transport="mqtt"}"#) == Some(1.0) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the MQTT agent is never counted:\n{text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        m(r#"lmos_sidecar_request_duration_seconds_count{message_type="readProperty"}"#),
        1.0
    );
    assert_eq!(m("lmos_sidecar_pending_requests"), 0.0);
    assert_eq!(m("lmos_sidecar_hosted_things"), 1.0);
    assert!(!text.contains(thing), "no Thing IDs in labels");
    sidecar.stop().await;
}
