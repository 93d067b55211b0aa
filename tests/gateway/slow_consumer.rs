//! A consumer that stops reading costs only itself: the others get every
//! message, memory stays bounded by its queue, and it learns what happened.

use lmos_testkit as common;

use common::{event, lmos, TestSidecar, WAIT};
use futures_util::StreamExt;
use lmos_sidecar::config::SlowConsumerPolicy;
use serde_json::json;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message as WsMessage;

const THING: &str = "urn:slow:test";
const EVENTS: usize = 400;

async fn burst(policy: SlowConsumerPolicy) -> (TestSidecar, common::WsClient, common::WsClient) {
    let mut config = common::test_config();
    config.gateway.outbound_queue = 32;
    config.gateway.slow_consumer = policy;
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
    let mut received = 0;
    let close = loop {
        match tokio::time::timeout(WAIT, slow.stream.next())
            .await
            .expect("the slow consumer's stream ends")
        {
            Some(Ok(WsMessage::Text(_))) => received += 1,
            Some(Ok(WsMessage::Close(frame))) => break frame,
            Some(Ok(_)) => {}
            // The close frame may not fit behind the data it never read.
            Some(Err(_)) | None => break None,
        }
    };
    assert!(
        received < EVENTS,
        "the slow consumer was cut off ({received} received)"
    );
    if let Some(frame) = close {
        assert_eq!(frame.code, CloseCode::Again);
        assert!(frame.reason.contains("Slow consumer"), "{}", frame.reason);
    }
    // The others keep working.
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
    // Still connected and served.
    slow.barrier().await;
    sidecar.stop().await;
}
