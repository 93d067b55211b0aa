//! Bad input gets an LMOS error; the connection and every other client keep
//! working.

use lmos_testkit as common;

use common::{event, lmos, TestSidecar};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message as WsMessage;

const THING: &str = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";

fn assert_error(v: &Value, status: &str, kind: &str) {
    assert_eq!(v["messageType"], "error", "{v}");
    assert_eq!(v["status"], status, "{v}");
    assert_eq!(
        v["type"],
        format!("https://eclipse.dev/lmos/protocol/v1/errors#{kind}"),
        "{v}"
    );
    for member in ["thingID", "messageID", "title", "detail", "instance"] {
        assert!(
            v[member].as_str().is_some_and(|s| !s.is_empty()),
            "{member} in {v}"
        );
    }
    assert!(v["instance"].as_str().unwrap().starts_with("urn:uuid:"));
}

#[tokio::test]
async fn every_class_of_bad_input_gets_a_correlated_error_and_the_connection_survives() {
    // Alone in this test binary (tests/alone/main.rs).
    let _turn = common::alone().await;
    let sidecar = TestSidecar::start().await;
    let mut bystander = sidecar.ws().await;
    bystander
        .send(lmos(THING, "subscribeEvent", json!({"event": "e"})))
        .await;
    bystander.barrier().await;
    let mut client = sidecar.ws().await;

    client
        .send_raw(WsMessage::Text("{\"thingID\": \"urn:x\",".into()))
        .await;
    let e = client.recv().await;
    assert_error(&e, "400", "invalid-json");
    assert_eq!(e["thingID"], "urn:lmos:test-sidecar");
    assert!(e.get("correlationID").is_none());
    assert!(e["detail"].as_str().unwrap().contains("line 1"), "{e}");

    client
        .send_raw(WsMessage::Binary(vec![1, 2, 3].into()))
        .await;
    assert_error(&client.recv().await, "400", "binary-frame");

    client.send_raw(WsMessage::Text("[1, 2]".into())).await;
    assert_error(&client.recv().await, "400", "not-an-object");

    client
        .send(lmos(THING, "teleport", json!({"messageID": "m-unknown"})))
        .await;
    let e = client.recv().await;
    assert_error(&e, "400", "unknown-message-type");
    assert_eq!(e["correlationID"], "m-unknown");
    assert_eq!(e["thingID"], THING);
    assert!(e["detail"].as_str().unwrap().contains("teleport"));

    client
        .send(lmos(
            THING,
            "subscribeEvent",
            json!({"messageID": "m-missing"}),
        ))
        .await;
    let e = client.recv().await;
    assert_error(&e, "400", "missing-member");
    assert_eq!(e["correlationID"], "m-missing");
    assert!(e["detail"].as_str().unwrap().contains("`event`"), "{e}");

    client
        .send(lmos(
            THING,
            "observeProperty",
            json!({"messageID": "m-typed", "correlationID": "c-typed", "name": 42}),
        ))
        .await;
    let e = client.recv().await;
    assert_error(&e, "400", "invalid-member");
    assert_eq!(
        e["correlationID"], "c-typed",
        "the request's correlationID wins over its messageID"
    );
    assert!(e["detail"].as_str().unwrap().contains("`name`"));

    client
        .send(json!({"messageID": "m-nothing", "messageType": "subscribeAllEvents"}))
        .await;
    let e = client.recv().await;
    assert_error(&e, "400", "missing-member");
    assert!(e["detail"].as_str().unwrap().contains("thingID"));

    client
        .send(lmos(
            THING,
            "error",
            json!({"messageID": "m-error", "type": "t", "title": "t", "status": "500", "detail": "d", "instance": "i"}),
        ))
        .await;
    let e = client.recv().await;
    assert_error(&e, "501", "not-supported");
    assert_eq!(e["correlationID"], "m-error");
    assert!(e["detail"].as_str().unwrap().contains("host="), "{e}");

    // The same connection still works, and so does everyone else's.
    client
        .send(lmos(
            THING,
            "subscribeEvent",
            json!({"event": "e", "correlationID": "after"}),
        ))
        .await;
    client.barrier().await;
    let mut agent = sidecar.ws().await;
    agent.send(event(THING, "e", json!("still here"))).await;
    let got = client.recv().await;
    assert_eq!(
        (got["data"].as_str(), got["correlationID"].as_str()),
        (Some("still here"), Some("after"))
    );
    assert_eq!(bystander.recv().await["data"], "still here");
    sidecar.stop().await;
}

#[tokio::test]
async fn oversized_messages_get_an_error_and_the_connection_survives() {
    // Alone in this test binary (tests/alone/main.rs).
    let _turn = common::alone().await;
    let mut config = common::test_config();
    config.gateway.max_message_size = 1024;
    let sidecar = TestSidecar::start_with(config).await;
    let mut client = sidecar.ws().await;
    client
        .send(event(THING, "big", json!("x".repeat(2000))))
        .await;
    assert_error(&client.recv().await, "413", "message-too-large");
    client
        .send(lmos(THING, "subscribeAllEvents", json!({})))
        .await;
    client.barrier().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn garbage_published_over_mqtt_does_not_reach_or_break_websocket_consumers() {
    // Alone in this test binary (tests/alone/main.rs).
    let _turn = common::alone().await;
    let sidecar = TestSidecar::start().await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(THING, "subscribeAllEvents", json!({})))
        .await;
    consumer.barrier().await;
    let mut agent = sidecar.mqtt("agent").await;
    agent
        .client
        .publish(
            format!("lmos/{THING}/events/e"),
            rumqttc::QoS::AtLeastOnce,
            false,
            "not json",
        )
        .await
        .unwrap();
    agent.publish_event(THING, "e", json!(1)).await;
    assert_eq!(consumer.recv().await["data"], 1);
    sidecar.stop().await;
}

/// Issue 15: what an MQTT client publishes for consumers meets the checks a
/// WebSocket publisher meets. Incomplete or mislabelled messages reach no
/// WebSocket consumer, are counted in `/metrics`, and are logged once per
/// topic however often they repeat.
#[tokio::test]
async fn malformed_messages_published_over_mqtt_never_reach_websocket_consumers() {
    let logs = common::CapturedLogs::install("warn");
    let sidecar = TestSidecar::start().await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(THING, "subscribeAllEvents", json!({})))
        .await;
    consumer
        .send(lmos(THING, "observeProperty", json!({"name": "p"})))
        .await;
    consumer.barrier().await;
    let mut agent = sidecar.mqtt("agent").await;
    let topic = format!("lmos/{THING}/events/e");
    let complete = event(THING, "e", json!(1));
    let without = |member: &str| {
        let mut v = complete.clone();
        v.as_object_mut().unwrap().remove(member);
        v
    };
    let mut other_thing = complete.clone();
    other_thing["thingID"] = json!("urn:someone-else");
    let mut other_event = complete.clone();
    other_event["event"] = json!("f");
    let bad = [
        json!({"messageType": "event"}),
        without("thingID"),
        without("messageID"),
        without("event"),
        without("data"),
        without("timestamp"),
        json!({"messageType": "event", "thingID": THING, "messageID": "m", "event": "e", "data": 1, "timestamp": "yesterday"}),
        other_thing,
        other_event,
        common::reading(THING, "e", json!(1)),
    ];
    for payload in &bad {
        agent.publish(&topic, payload, false).await;
    }
    // A property topic carrying an event.
    agent
        .publish(&format!("lmos/{THING}/properties/p"), &complete, true)
        .await;
    agent.publish_event(THING, "e", json!("good")).await;
    let got = consumer.recv().await;
    assert_eq!(
        got["data"], "good",
        "only the complete event arrives: {got}"
    );
    consumer.assert_nothing_pending().await;

    // The property topic is another subscription: its refusal may come
    // after the good event.
    // The message about another Thing is refused earlier, at publish, by
    // the MQTT authorization (auth/mqtt.rs); every other one here.
    let wanted = bad.len() - 1 + 1;
    let mut count = 0;
    for _ in 0..100 {
        let metrics = common::http(sidecar.http, "GET", "/metrics", None, b"")
            .await
            .body;
        count = metrics
            .lines()
            .find(|l| {
                l.starts_with("lmos_sidecar_dropped_messages_total")
                    && l.contains("invalid_payload")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0) as usize;
        if count >= wanted {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(count, wanted, "every refusal counted: {}", logs.text());

    let text = logs.text();
    let lines = |topic: &str| {
        text.lines()
            .filter(|l| l.contains("invalid-payload") && l.contains(topic))
            .count()
    };
    assert_eq!(lines("/events/e"), 1, "once per topic: {text}");
    assert_eq!(lines("/properties/p"), 1, "{text}");
    sidecar.stop().await;
}
