//! A consumer that stops reading costs only itself: the others get every
//! message, memory stays bounded by its queue's byte budget, and it learns
//! what happened. One that reads late, through a burst of many small
//! messages within its byte budget, loses nothing (issue 48): the policy is
//! bytes and time, not a count.

use std::time::Duration;

use lmos_testkit as common;

use common::{event, http, lmos, TestSidecar, WAIT};
use futures_util::StreamExt;
use lmos_sidecar::config::{Config, SlowConsumerPolicy};
use serde_json::json;
use tokio::net::TcpSocket;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message as WsMessage;

const THING: &str = "urn:slow:test";
const EVENTS: usize = 400;
const KIB: usize = 1024;

/// 400 events of 64 KiB (25 MiB) against a consumer that does not read
/// and a queue budget of 2 MiB (the fast consumer, paced a chunk of 16
/// behind, holds up to 1 MiB).
fn config(policy: SlowConsumerPolicy) -> Config {
    let mut config = common::test_config();
    config.gateway.outbound_queue_bytes = 2 * KIB * KIB;
    config.gateway.slow_consumer = policy;
    config
}

/// A value of `/metrics`, 0 when absent.
async fn metric(sidecar: &TestSidecar, series: &str) -> u64 {
    let metrics = http(sidecar.http, "GET", "/metrics", None, b"").await.body;
    let prefix = format!("{series} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.parse::<f64>().unwrap() as u64)
}

async fn dropped(sidecar: &TestSidecar, reason: &str) -> u64 {
    let series = format!(r#"lmos_sidecar_dropped_messages_total{{reason="{reason}"}}"#);
    metric(sidecar, &series).await
}

/// Reads until the close frame (`None`: the connection ended without one,
/// which may happen as it cannot get past the data never read); the text
/// frames read before it.
async fn until_closed(slow: &mut common::WsClient) -> (usize, Option<CloseFrame>) {
    let mut received = 0;
    loop {
        match tokio::time::timeout(WAIT, slow.stream.next())
            .await
            .expect("the slow consumer's stream ends")
        {
            Some(Ok(WsMessage::Text(_))) => received += 1,
            Some(Ok(WsMessage::Close(frame))) => return (received, frame),
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return (received, None),
        }
    }
}

async fn burst(policy: SlowConsumerPolicy) -> (TestSidecar, common::WsClient, common::WsClient) {
    burst_with(config(policy)).await
}

async fn burst_with(config: Config) -> (TestSidecar, common::WsClient, common::WsClient) {
    let sidecar = TestSidecar::start_with(config).await;
    let mut fast = sidecar.ws().await;
    let mut slow = sidecar.ws().await;
    for c in [&mut fast, &mut slow] {
        c.send(lmos(THING, "subscribeAllEvents", json!({}))).await;
        c.barrier().await;
    }
    // 400 x 64 KiB is far more than socket buffers hold, so the slow
    // consumer's queue must fill while it is not reading.
    let blob = "x".repeat(64 * 1024);
    let mut agent = sidecar.ws().await;
    // Paced by the fast consumer, so it is never more than a chunk behind
    // and never fills its own queue.
    for chunk in (0..EVENTS).collect::<Vec<_>>().chunks(16) {
        for i in chunk {
            agent
                .send(event(THING, "tick", json!({"i": i, "blob": blob})))
                .await;
        }
        for i in chunk {
            assert_eq!(
                fast.recv().await["data"]["i"],
                *i,
                "the fast consumer gets every event in order"
            );
        }
    }
    (sidecar, fast, slow)
}

#[tokio::test]
async fn a_slow_consumer_is_disconnected_with_a_reason_and_others_get_everything() {
    let (sidecar, mut fast, mut slow) = burst(SlowConsumerPolicy::Disconnect).await;
    let (received, close) = until_closed(&mut slow).await;
    assert!(
        received < EVENTS,
        "the slow consumer was cut off ({received} received)"
    );
    if let Some(frame) = close {
        assert_eq!(frame.code, CloseCode::Again);
        assert_eq!(
            frame.reason.as_str(),
            "Slow consumer: more than 2097152 bytes waiting; reconnect and subscribe again."
        );
    }
    assert_eq!(dropped(&sidecar, "slow_consumer_disconnected").await, 1);
    assert_eq!(dropped(&sidecar, "slow_consumer").await, 0);
    let hits = r#"lmos_sidecar_memory_budget_hits_total{budget="outbound_per_connection"}"#;
    assert!(metric(&sidecar, hits).await >= 1);
    // The others keep working.
    fast.barrier().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn a_consumer_whose_queue_does_not_move_is_disconnected_for_the_stall() {
    let mut config = config(SlowConsumerPolicy::Disconnect);
    // Bytes cannot be what closes it here: time is.
    config.gateway.outbound_queue_bytes = 256 * KIB * KIB;
    config.gateway.outbound_stall_ms = 300;
    let (sidecar, mut fast, mut slow) = burst_with(config).await;
    // Once its socket is full its queue stops moving; the next event after
    // the stall time finds it stalled (if none in the burst did).
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut agent = sidecar.ws().await;
    agent.send(event(THING, "tick", json!({"i": EVENTS}))).await;
    assert_eq!(fast.recv().await["data"]["i"], EVENTS);
    let (received, close) = until_closed(&mut slow).await;
    assert!(received < EVENTS, "cut off ({received} received)");
    if let Some(frame) = close {
        assert_eq!(frame.code, CloseCode::Again);
        assert_eq!(
            frame.reason.as_str(),
            "Slow consumer: nothing taken off its queue for 300 ms; reconnect and subscribe again."
        );
    }
    assert_eq!(dropped(&sidecar, "slow_consumer_disconnected").await, 1);
    fast.barrier().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn under_the_drop_policy_a_slow_consumer_misses_messages_but_stays_connected() {
    let (sidecar, _fast, mut slow) = burst(SlowConsumerPolicy::Drop).await;
    let mut received = 0;
    while let Ok(Some(Ok(frame))) =
        tokio::time::timeout(std::time::Duration::from_millis(500), slow.stream.next()).await
    {
        if frame.is_ping() || frame.is_pong() {
            // The sidecar's keep-alive, when the burst took long.
            continue;
        }
        assert!(
            frame.is_text(),
            "no close frame under the drop policy: {frame:?}"
        );
        received += 1;
    }
    assert!(
        received < EVENTS,
        "messages were dropped ({received} received)"
    );
    let lost = dropped(&sidecar, "slow_consumer").await;
    assert_eq!(lost as usize, EVENTS - received, "each one counted");
    assert_eq!(dropped(&sidecar, "slow_consumer_disconnected").await, 0);
    // Still connected and served.
    slow.barrier().await;
    sidecar.stop().await;
}

/// Under `drop_oldest` a late reader gets the newest events, in order, the
/// oldest dropped (and counted), and stays connected.
#[tokio::test]
async fn under_drop_oldest_a_late_reader_gets_the_newest_in_order() {
    let (sidecar, _fast, mut slow) = burst(SlowConsumerPolicy::DropOldest).await;
    let mut seen = Vec::new();
    while let Ok(Some(Ok(frame))) =
        tokio::time::timeout(Duration::from_millis(500), slow.stream.next()).await
    {
        if let WsMessage::Text(t) = frame {
            let v: serde_json::Value = serde_json::from_str(&t).unwrap();
            seen.push(v["data"]["i"].as_u64().unwrap() as usize);
        }
    }
    assert!(
        seen.len() < EVENTS,
        "some were dropped ({} received)",
        seen.len()
    );
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "in order: {seen:?}");
    // What its socket held came first; of its queue, the oldest were
    // dropped and later ones arrive: a gap with events after it (under
    // `drop` what arrives is the burst's beginning, without a gap).
    let gap = seen.windows(2).position(|w| w[1] > w[0] + 1);
    assert!(
        gap.is_some_and(|k| k + 2 < seen.len()),
        "the oldest of its queue dropped, newer ones kept: {seen:?}"
    );
    let oldest = dropped(&sidecar, "slow_consumer_oldest").await;
    let newest = dropped(&sidecar, "slow_consumer").await;
    assert!(oldest > 0, "the oldest were dropped");
    assert_eq!(
        (oldest + newest) as usize,
        EVENTS - seen.len(),
        "each one counted"
    );
    assert_eq!(dropped(&sidecar, "slow_consumer_disconnected").await, 0);
    // Caught up, it gets what comes next.
    let mut agent = sidecar.ws().await;
    agent.send(event(THING, "tick", json!({"i": EVENTS}))).await;
    assert_eq!(slow.recv().await["data"]["i"], EVENTS);
    sidecar.stop().await;
}

/// A consumer whose socket holds little (4 KiB of receive buffer), so that
/// what it does not read waits in its queue.
async fn late_reader(sidecar: &TestSidecar) -> common::WsClient {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4 * KIB as u32).unwrap();
    let tcp = socket.connect(sidecar.http).await.unwrap();
    let request = common::ws_request(&sidecar.ws_url(), Some("lmosprotocol"));
    let (stream, _) =
        tokio_tungstenite::client_async(request, tokio_tungstenite::MaybeTlsStream::Plain(tcp))
            .await
            .unwrap();
    common::WsClient::from_stream(stream)
}

#[tokio::test]
async fn a_burst_of_many_small_messages_within_the_byte_budget_loses_nothing() {
    // Far more than the 1 024 messages that used to close a consumer, far
    // less than its 16 MiB.
    const SMALL: usize = 20_000;
    // The defaults. With `gateway.outbound_queue = 1024` (the old default)
    // the late reader is closed in the burst and this fails.
    let sidecar = TestSidecar::start().await;
    let mut fast = sidecar.ws().await;
    let mut late = late_reader(&sidecar).await;
    for c in [&mut fast, &mut late] {
        c.send(lmos(THING, "subscribeAllEvents", json!({}))).await;
        c.barrier().await;
    }
    let pad = "s".repeat(400);
    let mut agent = sidecar.ws().await;
    for chunk in (0..SMALL).collect::<Vec<_>>().chunks(500) {
        for i in chunk {
            agent
                .send(event(THING, "tick", json!({"i": i, "pad": pad})))
                .await;
        }
        for i in chunk {
            assert_eq!(fast.recv().await["data"]["i"], *i);
        }
    }
    // All fanned out; more than 1 024 of them wait in the late reader's
    // queue (each counts at least its 400 bytes of padding).
    let used = r#"lmos_sidecar_memory_budget_bytes{budget="outbound",of="used"}"#;
    let queued = metric(&sidecar, used).await as usize;
    assert!(queued > 1024 * 400, "{queued} bytes queued");
    for i in 0..SMALL {
        assert_eq!(late.recv().await["data"]["i"], i, "in order, none lost");
    }
    assert_eq!(dropped(&sidecar, "slow_consumer").await, 0);
    assert_eq!(dropped(&sidecar, "slow_consumer_disconnected").await, 0);
    late.barrier().await;
    sidecar.stop().await;
}
