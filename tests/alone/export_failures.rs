//! A collector that is down is reported once, not once per batch (600 traced
//! events make several), costs no message, and does not hold up a stop.

use lmos_testkit as common;

use common::{event, lmos, TestSidecar, WAIT};
use serde_json::json;

#[tokio::test]
async fn a_collector_that_is_down_is_logged_once_and_messages_still_flow() {
    let logs = common::CapturedLogs::install(&lmos_sidecar::Config::default().log.filter);

    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut config = common::test_config();
    config.tracing.endpoint = format!("http://{closed}");
    let sidecar = TestSidecar::start_with(config).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos("urn:t", "subscribeAllEvents", json!({})))
        .await;
    consumer.barrier().await;
    let mut agent = sidecar.ws().await;
    for i in 0..600 {
        let mut e = event("urn:t", "e", json!(i));
        e["traceparent"] = json!("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        agent.send(e).await;
    }
    for i in 0..600 {
        assert_eq!(
            consumer.recv().await["data"],
            i,
            "every message is delivered"
        );
    }
    // Every span is accounted for: a full batch (512) has failed by now or
    // soon, and says so in /metrics.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let metrics = common::http(sidecar.http, "GET", "/metrics", None, b"")
            .await
            .body;
        let failed = metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(r#"lmos_sidecar_spans_dropped_total{reason="export_failed"} "#)
            })
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if failed >= 512 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no failed export counted: {metrics}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // A collector known to be down is not waited for at shutdown. With
    // batches still queued (each failing attempt takes the exporter a
    // while to give up), the SDK's flush once ran into its 5 s bound and
    // delayed every stop (and restart) by that.
    for i in 0..2_000 {
        let mut e = event("urn:t", "e", json!(i));
        e["traceparent"] = json!("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        agent.send(e).await;
    }
    for i in 0..2_000 {
        assert_eq!(consumer.recv().await["data"], i);
    }
    let stopping = std::time::Instant::now();
    tokio::time::timeout(WAIT, sidecar.stop())
        .await
        .expect("shutdown ends");
    let took = stopping.elapsed();
    assert!(
        took < std::time::Duration::from_secs(3),
        "the sidecar took {took:?} to stop with its collector down"
    );
    let text = logs.text();
    assert_eq!(text.matches("Cannot export spans").count(), 1, "{text}");
}
