//! Peers that vanish: what was accepted still reaches everyone else, and
//! nothing is left behind.

use lmos_testkit as common;

use std::time::Duration;

use common::*;
use serde_json::json;

const EVENTS: usize = 2_000;

#[tokio::test]
async fn consumers_that_vanish_mid_stream_cost_the_others_nothing() {
    let sidecar = TestSidecar::start().await;
    let thing = "urn:faults";
    let subscribe = json!({"thingID": thing, "messageID": "s", "messageType": "subscribeEvent", "event": "tick"});
    let mut stayers = Vec::new();
    for _ in 0..2 {
        let mut ws = sidecar.ws().await;
        ws.send(subscribe.clone()).await;
        ws.barrier().await;
        stayers.push(ws);
    }
    let mut leaver = sidecar.ws().await;
    leaver.send(subscribe.clone()).await;
    leaver.barrier().await;
    let mut mqtt_stayer = sidecar.mqtt("faults-stayer").await;
    mqtt_stayer
        .subscribe(&format!("lmos/{thing}/events/tick"))
        .await;
    let mut mqtt_leaver = sidecar.mqtt("faults-leaver").await;
    mqtt_leaver
        .subscribe(&format!("lmos/{thing}/events/tick"))
        .await;
    wait_for_stats(&sidecar, |s| s.connections == 3).await;

    let mut publisher = sidecar.mqtt("faults-publisher").await;
    let publishing = tokio::spawn(async move {
        for n in 0..EVENTS {
            publisher.publish_event(thing, "tick", json!(n)).await;
        }
        publisher
    });
    // Both leavers go away without a goodbye once the stream is flowing.
    let first = leaver.recv().await;
    assert_eq!(first["event"], "tick");
    drop(leaver);
    let _ = mqtt_leaver.recv().await;
    mqtt_leaver.vanish();

    let _publisher = tokio::time::timeout(Duration::from_secs(60), publishing)
        .await
        .expect("publishing finishes")
        .unwrap();
    for ws in &mut stayers {
        for n in 0..EVENTS {
            let e = ws.recv().await;
            assert_eq!(e["data"], json!(n), "{e}");
        }
    }
    for n in 0..EVENTS {
        let (_, e, _) = mqtt_stayer.recv_json().await;
        assert_eq!(e["data"], json!(n), "{e}");
    }
    // The vanished consumer's subscription and connection are gone.
    wait_for_stats(&sidecar, |s| s.connections == 2 && s.subscriptions == 2).await;
    sidecar.stop().await;
}
