//! rumqttd drops messages for a subscriber that falls further behind than its
//! buffers; the sidecar must make that visible in its logs.

use lmos_testkit as common;

use common::{TestSidecar, WAIT};
use serde_json::json;
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn a_subscriber_that_misses_messages_is_logged() {
    let logs = common::CapturedLogs::install("warn");

    let mut config = common::test_config();
    config.mqtt.max_payload_size = 4096;
    config.mqtt.segment_size = 64 * 1024;
    config.mqtt.segment_count = 2;
    let sidecar = TestSidecar::start_with(config).await;

    // A subscriber that connects, subscribes and never reads again.
    let mut stalled = tokio::net::TcpStream::connect(sidecar.mqtt).await.unwrap();
    let connect = [
        0x10, 0x10, 0x00, 0x04, b'M', b'Q', b'T', b'T', 0x04, 0x02, 0x00, 0x3C, 0x00, 0x04, b's',
        b'l', b'o', b'w',
    ];
    let filter = b"lmos/+/events/+";
    let mut subscribe = vec![
        0x82,
        (2 + 2 + filter.len() + 1) as u8,
        0x00,
        0x01,
        0x00,
        filter.len() as u8,
    ];
    subscribe.extend_from_slice(filter);
    subscribe.push(0x00);
    stalled.write_all(&connect).await.unwrap();
    stalled.write_all(&subscribe).await.unwrap();

    let mut agent = sidecar.mqtt("agent").await;
    let blob = "x".repeat(2000);
    // Far more than the subscriber's ring (128 KiB) and the socket buffers
    // hold: two sockets each way since the MQTT guard sits in between, each
    // of which Linux lets grow to several MiB on loopback.
    for i in 0..16_000 {
        agent
            .publish_event("urn:t", "e", json!({"i": i, "blob": blob}))
            .await;
    }
    // rumqttd notices the overwritten messages when the subscriber reads on.
    let (mut reader, _writer) = stalled.into_split();
    let drain = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while tokio::io::AsyncReadExt::read(&mut reader, &mut buf)
            .await
            .is_ok_and(|n| n > 0)
        {}
    });
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut i = 0;
    loop {
        for _ in 0..20 {
            agent
                .publish_event("urn:t", "e", json!({"i": i, "blob": blob}))
                .await;
            i += 1;
        }
        let text = logs.text();
        if text.contains("fell behind") {
            assert!(text.contains("slow"), "names the client: {text}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no alert after {i} messages: {text}"
        );
    }
    drain.abort();
    sidecar.stop().await;
}
