//! Sidecars bridged through a real 3-node NATS cluster: a Thing behind
//! sidecar A is usable by consumers of sidecar B.

mod common;
mod nats;

use std::time::Duration;

use common::*;
use nats::NatsCluster;
use serde_json::json;

async fn bridged(cluster: &NatsCluster, node: usize, name: &str) -> TestSidecar {
    let mut c = test_config();
    c.sidecar.thing_id = format!("urn:lmos:sidecar-{name}");
    c.cluster.url = format!("mqtt://{}", cluster.mqtt_addr(node));
    c.cluster.keep_alive_s = 60;
    let sidecar = TestSidecar::start_with(c).await;
    // Subscribing in NATS takes a JetStream consumer per filter: seconds.
    let linked = async {
        loop {
            let body = http(sidecar.http, "GET", "/readyz", None, b"").await.body;
            if body == "ready\n" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), linked)
        .await
        .expect("the bridge subscribes in the cluster");
    sidecar
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_from_an_agent_on_one_sidecar_reach_consumers_of_another_once() {
    let cluster = NatsCluster::start(3).await;
    let a = bridged(&cluster, 0, "a").await;
    let b = bridged(&cluster, 1, "b").await;
    let thing = "urn:cluster:weather";

    let mut ws = b.ws().await;
    ws.send(json!({"thingID": thing, "messageID": "s", "messageType": "subscribeEvent", "event": "tick"}))
        .await;
    ws.barrier().await;
    let mut mqtt = b.mqtt("b-subscriber").await;
    mqtt.subscribe(&format!("lmos/{thing}/events/tick")).await;
    let mut agent = a.mqtt("a-agent").await;

    // Until both bridges' subscriptions are live in the cluster, events
    // may not cross; the first that does marks the start.
    let first = loop {
        agent.publish_event(thing, "tick", json!(-1)).await;
        if let Ok(e) = tokio::time::timeout(Duration::from_millis(500), ws.recv()).await {
            break e;
        }
    };
    assert_eq!(first["correlationID"], "s");
    for n in 0..50 {
        agent.publish_event(thing, "tick", json!(n)).await;
    }
    let mut seen = Vec::new();
    while seen.len() < 50 {
        let e = ws.recv().await;
        if e["data"] != json!(-1) {
            seen.push(e["data"].as_i64().unwrap());
        }
    }
    assert_eq!(
        seen,
        (0..50).collect::<Vec<_>>(),
        "each event once, in order"
    );
    let mut over_mqtt = Vec::new();
    while over_mqtt.len() < 50 {
        let (_, e, _) = mqtt.recv_json().await;
        if e["data"] != json!(-1) {
            over_mqtt.push(e["data"].as_i64().unwrap());
        }
    }
    assert_eq!(over_mqtt, (0..50).collect::<Vec<_>>());
    // Nothing came twice or looped back.
    ws.assert_nothing_pending().await;
    let metrics = http(b.http, "GET", "/metrics", None, b"").await.body;
    assert!(
        metrics.contains("lmos_sidecar_cluster_connected 1"),
        "{metrics}"
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_on_one_sidecar_reads_from_an_mqtt_agent_on_another() {
    let cluster = NatsCluster::start(3).await;
    let a = bridged(&cluster, 0, "a").await;
    let b = bridged(&cluster, 1, "b").await;
    let thing = "urn:cluster:lamp";

    let mut agent = mqtt_agent(a.mqtt, "lamp-agent", thing, None).await;
    // B learns of the agent through the bridged, retained presence.
    wait_for_stats(&b, |s| s.hosted_things == 1).await;

    let mut consumer = b.ws().await;
    consumer
        .send(json!({"thingID": thing, "messageID": "r1", "messageType": "readProperty", "name": "on"}))
        .await;
    let (_, request, _) = agent.recv_json().await;
    assert_eq!(request["messageType"], "readProperty", "{request}");
    let reply = json!({"thingID": thing, "messageID": "a1", "messageType": "propertyReading", "name": "on", "value": true, "timestamp": "2025-01-01T00:00:00Z", "correlationID": request["correlationID"]});
    agent
        .publish(&format!("lmos/{thing}/agent/replies"), &reply, false)
        .await;
    let answer = consumer.recv().await;
    assert_eq!(
        (answer["value"].as_bool(), answer["correlationID"].as_str()),
        (Some(true), Some("r1")),
        "{answer}"
    );
    a.stop().await;
    b.stop().await;
}
