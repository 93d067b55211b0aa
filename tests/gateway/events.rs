//! Events end to end: agents publish over MQTT or WebSocket, consumers
//! receive over WebSocket or MQTT.

use lmos_testkit as common;

use common::{event, lmos, TestSidecar};
use serde_json::json;

const THING: &str = "urn:uuid:3f1d3a7a-4f97-2e6b-c45f-f3c2e1c84c77";

#[tokio::test]
async fn mqtt_agent_event_reaches_websocket_subscriber_with_its_correlation_id() {
    let sidecar = TestSidecar::start().await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(THING, "subscribeEvent", json!({"event": "userFeedbackReceived", "correlationId": "b45e8f90-8824-4c23-bc37-c6c4ddad4b2c"})))
        .await;
    consumer.barrier().await;

    let mut agent = sidecar.mqtt("agent").await;
    let mut sent = event(THING, "userFeedbackReceived", json!({"rating": 4}));
    sent["x-vendor"] = json!({"kept": true});
    sent["correlationId"] = json!("agent-side");
    agent
        .publish(
            &format!("lmos/{THING}/events/userFeedbackReceived"),
            &sent,
            false,
        )
        .await;

    let got = consumer.recv().await;
    assert_eq!(got["messageType"], "event");
    assert_eq!(got["event"], "userFeedbackReceived");
    assert_eq!(got["data"], json!({"rating": 4}));
    assert_eq!(got["thingID"], THING);
    assert_eq!(got["messageID"], sent["messageID"]);
    assert_eq!(got["correlationID"], "b45e8f90-8824-4c23-bc37-c6c4ddad4b2c");
    assert!(
        got.get("correlationId").is_none(),
        "one spelling only: {got}"
    );
    assert_eq!(got["x-vendor"], json!({"kept": true}));
    sidecar.stop().await;
}

#[tokio::test]
async fn without_a_correlation_id_deliveries_carry_the_subscribe_message_id() {
    let sidecar = TestSidecar::start().await;
    let mut consumer = sidecar.ws().await;
    let subscribe = lmos(THING, "subscribeAllEvents", json!({}));
    consumer.send(subscribe.clone()).await;
    consumer.barrier().await;

    let mut agent = sidecar.mqtt("agent").await;
    agent.publish_event(THING, "a", json!(1)).await;
    agent.publish_event(THING, "b", json!(2)).await;

    let first = consumer.recv().await;
    let second = consumer.recv().await;
    assert_eq!(
        (first["event"].as_str(), second["event"].as_str()),
        (Some("a"), Some("b"))
    );
    assert_eq!(first["correlationID"], subscribe["messageID"]);
    assert_eq!(second["correlationID"], subscribe["messageID"]);
    sidecar.stop().await;
}

#[tokio::test]
async fn websocket_agent_event_reaches_mqtt_subscriber_verbatim() {
    let sidecar = TestSidecar::start().await;
    let mut subscriber = sidecar.mqtt("subscriber").await;
    subscriber.subscribe("lmos/+/events/alarm").await;

    let mut agent = sidecar.ws().await;
    // The draft's own spelling and non-UUID IDs, plus trace context.
    let text = r#"{"thingId":"urn:dev:ops:32473-WoTLamp-1234","messageId":"defg4567-8901-2345-hijk-lmnopqrstuvw","messageType":"event","event":"alarm","data":{"level":"high"},"timestamp":"2025-01-20T19:00:00Z","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"congo=t61rcWkgMzE"}"#;
    agent
        .send_raw(tokio_tungstenite::tungstenite::Message::Text(text.into()))
        .await;

    let publish = subscriber.recv().await;
    assert_eq!(
        publish.topic,
        "lmos/urn:dev:ops:32473-WoTLamp-1234/events/alarm"
    );
    assert_eq!(std::str::from_utf8(&publish.payload).unwrap(), text);
    sidecar.stop().await;
}

#[tokio::test]
async fn websocket_agent_to_websocket_consumers() {
    let sidecar = TestSidecar::start().await;
    let mut named = sidecar.ws().await;
    let mut all = sidecar.ws().await;
    let mut other_thing = sidecar.ws().await;
    named
        .send(lmos(
            THING,
            "subscribeEvent",
            json!({"event": "done", "correlationID": "named"}),
        ))
        .await;
    all.send(lmos(
        THING,
        "subscribeAllEvents",
        json!({"correlationID": "all"}),
    ))
    .await;
    other_thing
        .send(lmos("urn:other", "subscribeAllEvents", json!({})))
        .await;
    for c in [&mut named, &mut all, &mut other_thing] {
        c.barrier().await;
    }

    let mut agent = sidecar.ws().await;
    agent.send(event(THING, "progress", json!(50))).await;
    agent.send(event(THING, "done", json!(100))).await;

    let got = named.recv().await;
    assert_eq!(
        (got["event"].as_str(), got["correlationID"].as_str()),
        (Some("done"), Some("named"))
    );
    let a = all.recv().await;
    let b = all.recv().await;
    assert_eq!(
        (a["event"].as_str(), b["event"].as_str()),
        (Some("progress"), Some("done"))
    );
    assert_eq!(b["correlationID"], "all");
    named.assert_nothing_pending().await;
    other_thing.assert_nothing_pending().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn named_and_all_events_subscriptions_deliver_once() {
    let sidecar = TestSidecar::start().await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(
            THING,
            "subscribeAllEvents",
            json!({"correlationID": "all"}),
        ))
        .await;
    consumer
        .send(lmos(
            THING,
            "subscribeEvent",
            json!({"event": "e", "correlationID": "named"}),
        ))
        .await;
    consumer.barrier().await;

    let mut agent = sidecar.ws().await;
    agent.send(event(THING, "e", json!(1))).await;
    agent.send(event(THING, "f", json!(2))).await;
    let e = consumer.recv().await;
    let f = consumer.recv().await;
    assert_eq!(
        (e["event"].as_str(), e["correlationID"].as_str()),
        (Some("e"), Some("named"))
    );
    assert_eq!(
        (f["event"].as_str(), f["correlationID"].as_str()),
        (Some("f"), Some("all"))
    );
    consumer.assert_nothing_pending().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn unsubscribe_stops_delivery() {
    let sidecar = TestSidecar::start().await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(THING, "subscribeEvent", json!({"event": "a"})))
        .await;
    consumer
        .send(lmos(THING, "subscribeEvent", json!({"event": "b"})))
        .await;
    consumer.barrier().await;
    consumer
        .send(lmos(THING, "unsubscribeEvent", json!({"event": "a"})))
        .await;
    consumer.barrier().await;

    let mut agent = sidecar.mqtt("agent").await;
    // Published in order on one topic filter: if "a" were still delivered it
    // would arrive before "b".
    agent.publish_event(THING, "a", json!(1)).await;
    agent.publish_event(THING, "b", json!(2)).await;
    assert_eq!(consumer.recv().await["event"], "b");

    consumer
        .send(lmos(THING, "unsubscribeEvent", json!({"event": "b"})))
        .await;
    consumer
        .send(lmos(THING, "subscribeAllEvents", json!({})))
        .await;
    consumer
        .send(lmos(THING, "unsubscribeAllEvents", json!({})))
        .await;
    consumer.barrier().await;
    agent.publish_event(THING, "b", json!(3)).await;
    consumer.assert_nothing_pending().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn thing_ids_with_topic_characters_are_escaped_and_reversible() {
    let sidecar = TestSidecar::start().await;
    let thing = "https://example.com/things/lamp+1#main";
    let mut subscriber = sidecar.mqtt("subscriber").await;
    subscriber.subscribe("lmos/+/events/+").await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(thing, "subscribeEvent", json!({"event": "on/off"})))
        .await;
    consumer.barrier().await;

    let mut agent = sidecar.ws().await;
    agent.send(event(thing, "on/off", json!(true))).await;

    let (topic, payload, _) = subscriber.recv_json().await;
    assert_eq!(
        topic,
        "lmos/https:%2F%2Fexample%2Ecom%2Fthings%2Flamp%2B1%23main/events/on%2Foff"
    );
    assert_eq!(payload["thingID"], thing);
    let got = consumer.recv().await;
    assert_eq!(
        (got["thingID"].as_str(), got["event"].as_str()),
        (Some(thing), Some("on/off"))
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn events_published_over_mqtt5_reach_websocket_consumers() {
    let sidecar = TestSidecar::start().await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(THING, "subscribeEvent", json!({"event": "v5"})))
        .await;
    consumer.barrier().await;

    let mut options = rumqttc::v5::MqttOptions::new("agent5", "127.0.0.1", sidecar.mqtt5.port());
    options.set_keep_alive(std::time::Duration::from_secs(30));
    let (client, mut eventloop) = rumqttc::v5::AsyncClient::new(options, 10);
    let payload = event(THING, "v5", json!("hello")).to_string();
    client
        .publish(
            format!("lmos/{THING}/events/v5"),
            rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
            false,
            payload,
        )
        .await
        .unwrap();
    let driver = tokio::spawn(async move { while eventloop.poll().await.is_ok() {} });

    assert_eq!(consumer.recv().await["data"], "hello");
    driver.abort();
    sidecar.stop().await;
}
