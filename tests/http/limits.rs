//! The configurable limits of the HTTP port and the WebSocket gateway: each
//! hit is an LMOS error or a close reason a user can read, plus a metric,
//! and the other clients carry on.

use lmos_testkit as common;

use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use serde_json::json;
use tokio::io::AsyncReadExt;

async fn metrics_text(sidecar: &TestSidecar) -> String {
    http(sidecar.http, "GET", "/metrics", None, b"").await.body
}

#[tokio::test]
async fn subscriptions_beyond_the_limit_get_429_and_renewals_do_not() {
    let mut config = test_config();
    config.gateway.max_subscriptions = 2;
    let sidecar = TestSidecar::start_with(config).await;
    let mut ws = sidecar.ws().await;
    for (id, event) in [("s1", "a"), ("s2", "b"), ("s1-again", "a")] {
        ws.send(json!({"thingID": "urn:t", "messageID": id, "messageType": "subscribeEvent", "event": event})).await;
    }
    ws.send(json!({"thingID": "urn:t", "messageID": "s3", "messageType": "subscribeEvent", "event": "c"})).await;
    let reply = ws.recv().await;
    assert_eq!(reply["messageType"], "error", "{reply}");
    assert_eq!(reply["status"], "429");
    assert_eq!(reply["correlationID"], "s3");
    assert!(
        reply["detail"]
            .as_str()
            .unwrap()
            .contains("gateway.max_subscriptions"),
        "{reply}"
    );

    // Unsubscribing makes room.
    ws.send(json!({"thingID": "urn:t", "messageID": "u", "messageType": "unsubscribeEvent", "event": "b"})).await;
    ws.send(json!({"thingID": "urn:t", "messageID": "s4", "messageType": "subscribeEvent", "event": "c"})).await;
    // No barrier here: it would take a subscription of its own. The agent
    // publishes until the new subscription is live.
    let mut agent = sidecar.mqtt("limits-agent").await;
    let publisher = tokio::spawn(async move {
        loop {
            agent.publish_event("urn:t", "c", json!(1)).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let delivered = ws.recv().await;
    publisher.abort();
    assert_eq!(
        (
            delivered["event"].as_str(),
            delivered["correlationID"].as_str()
        ),
        (Some("c"), Some("s4")),
        "{delivered}"
    );

    let text = metrics_text(&sidecar).await;
    assert!(
        text.contains(
            r#"lmos_sidecar_limit_hits_total{limit="max_subscriptions",transport="websocket"} 1"#
        ),
        "{text}"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn requests_beyond_the_pending_limit_get_429() {
    let mut config = test_config();
    config.gateway.max_pending_requests = 2;
    let sidecar = TestSidecar::start_with(config).await;
    // An agent that never answers.
    let mut agent = sidecar.ws_agent("urn:slow").await;
    let mut consumer = sidecar.ws().await;
    for id in ["r1", "r2", "r3"] {
        consumer.send(json!({"thingID": "urn:slow", "messageID": id, "messageType": "readProperty", "name": "p"})).await;
    }
    let reply = consumer.recv().await;
    assert_eq!(
        (reply["status"].as_str(), reply["correlationID"].as_str()),
        (Some("429"), Some("r3")),
        "{reply}"
    );
    assert!(reply["detail"]
        .as_str()
        .unwrap()
        .contains("gateway.max_pending_requests"));
    // The first two did reach the agent, and answering one makes room.
    let first = agent.recv().await;
    let _second = agent.recv().await;
    agent.send(json!({"thingID": "urn:slow", "messageID": "a1", "messageType": "propertyReading", "name": "p", "value": 7, "timestamp": "2025-01-01T00:00:00Z", "correlationID": first["correlationID"]})).await;
    let answer = consumer.recv().await;
    assert_eq!(
        (answer["value"].as_i64(), answer["correlationID"].as_str()),
        (Some(7), Some("r1")),
        "{answer}"
    );
    consumer.send(json!({"thingID": "urn:slow", "messageID": "r4", "messageType": "readProperty", "name": "p"})).await;
    let forwarded = agent.recv().await;
    assert_eq!(forwarded["messageType"], "readProperty", "{forwarded}");
    sidecar.stop().await;
}

#[tokio::test]
async fn a_peer_that_answers_no_ping_is_closed_and_a_live_one_is_not() {
    use tokio::io::AsyncWriteExt;
    let mut config = test_config();
    config.gateway.idle_timeout_ms = 600;
    let sidecar = TestSidecar::start_with(config).await;
    // Reading the socket is what makes tungstenite answer pings.
    let mut live = sidecar.ws().await;
    // It reads (and so answers pings) for three idle periods.
    let reader = tokio::spawn(async move {
        let mut frames = 0;
        let until = tokio::time::Instant::now() + Duration::from_millis(1_800);
        while let Ok(Some(Ok(_))) = tokio::time::timeout_at(until, live.stream.next()).await {
            frames += 1;
        }
        (live, frames)
    });
    // A peer that completed the handshake and then went quiet for good: a
    // raw socket, so nothing answers the pings on its behalf.
    let mut silent = tokio::net::TcpStream::connect(sidecar.http).await.unwrap();
    silent
        .write_all(
            b"GET /lmos HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
              Sec-WebSocket-Protocol: lmosprotocol\r\n\r\n",
        )
        .await
        .unwrap();
    let mut received = Vec::new();
    tokio::time::timeout(WAIT, silent.read_to_end(&mut received))
        .await
        .expect("the sidecar closes the silent connection in time")
        .unwrap();
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 101"), "{text}");
    // A close frame (0x88) with code 1001 (0x03e9) and the reason.
    let close = received
        .windows(4)
        .position(|w| w[0] == 0x88 && w[2] == 0x03 && w[3] == 0xe9);
    assert!(
        close.is_some(),
        "a close frame with code 1001: {received:?}"
    );
    assert!(text.contains("gateway.idle_timeout_ms"), "{text}");

    let (mut live, frames) = reader.await.unwrap();
    assert!(frames >= 3, "the live client was pinged ({frames} frames)");
    live.send(json!({"thingID": "urn:t", "messageID": "still", "messageType": "unknownType"}))
        .await;
    assert_eq!(live.recv().await["correlationID"], "still");
    let text = metrics_text(&sidecar).await;
    assert!(
        text.contains(
            r#"lmos_sidecar_limit_hits_total{limit="idle_timeout_ms",transport="websocket"} 1"#
        ),
        "{text}"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_cap_get_503_until_one_closes() {
    let mut config = test_config();
    config.http.max_connections = 2;
    let sidecar = TestSidecar::start_with(config).await;
    let first = sidecar.ws().await;
    let mut second = sidecar.ws().await;
    let refused = http(sidecar.http, "GET", "/healthz", None, b"").await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(
        refused.body.contains("http.max_connections"),
        "{}",
        refused.body
    );
    let status =
        WsClient::connect_request(ws_request(&sidecar.ws_url(), Some("lmosprotocol"))).await;
    assert_eq!(status.err(), Some(503));

    // The open ones still work; closing one frees its place.
    second
        .send(json!({"thingID": "urn:t", "messageID": "x", "messageType": "nope"}))
        .await;
    assert_eq!(second.recv().await["correlationID"], "x");
    drop(first);
    let ok = async {
        loop {
            if http(sidecar.http, "GET", "/healthz", None, b"")
                .await
                .status
                == 200
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WAIT, ok)
        .await
        .expect("a place frees up");
    drop(second);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let text = metrics_text(&sidecar).await;
    assert!(
        text.contains(
            r#"lmos_sidecar_limit_hits_total{limit="max_connections",transport="http"} 2"#
        ),
        "{text}"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn a_connection_that_never_sends_its_request_is_closed() {
    let mut config = test_config();
    config.http.handshake_timeout_ms = 300;
    let sidecar = TestSidecar::start_with(config).await;
    let mut silent = tokio::net::TcpStream::connect(sidecar.http).await.unwrap();
    let mut partial = tokio::net::TcpStream::connect(sidecar.http).await.unwrap();
    use tokio::io::AsyncWriteExt;
    partial
        .write_all(b"GET /lmos HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    for socket in [&mut silent, &mut partial] {
        let mut buf = Vec::new();
        let read = tokio::time::timeout(WAIT, socket.read_to_end(&mut buf)).await;
        assert!(read.is_ok(), "the sidecar closes the connection in time");
    }
    // Meanwhile and afterwards, others are served.
    assert_eq!(
        http(sidecar.http, "GET", "/healthz", None, b"")
            .await
            .status,
        200
    );
    let text = metrics_text(&sidecar).await;
    assert!(
        text.contains(
            r#"lmos_sidecar_limit_hits_total{limit="handshake_timeout_ms",transport="http"} 2"#
        ),
        "{text}"
    );
    sidecar.stop().await;
}
