//! Property observation: retained latest value at once, then every change.

use lmos_testkit as common;

use common::{lmos, reading, TestSidecar};
use serde_json::json;

const THING: &str = "urn:uuid:3f1d3a7a-4f97-2e6b-c45f-f3c2e1c84c77";

#[tokio::test]
async fn late_websocket_observer_gets_the_latest_value_at_once_then_changes() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.ws().await;
    agent.send(reading(THING, "temperature", json!(20))).await;
    agent.send(reading(THING, "temperature", json!(21))).await;
    agent.barrier().await;

    let mut observer = sidecar.ws().await;
    observer
        .send(lmos(
            THING,
            "observeProperty",
            json!({"name": "temperature", "correlationID": "obs-1"}),
        ))
        .await;
    let first = observer.recv().await;
    assert_eq!(first["messageType"], "propertyReading");
    assert_eq!(first["value"], 21);
    assert_eq!(first["correlationID"], "obs-1");

    // A second observer while the gateway already follows the Thing gets the
    // value from the gateway's cache, just as fast.
    let mut second = sidecar.ws().await;
    second
        .send(lmos(
            THING,
            "observeProperty",
            json!({"name": "temperature"}),
        ))
        .await;
    assert_eq!(second.recv().await["value"], 21);

    agent.send(reading(THING, "temperature", json!(22))).await;
    assert_eq!(observer.recv().await["value"], 22);
    assert_eq!(second.recv().await["value"], 22);

    observer
        .send(lmos(
            THING,
            "unobserveProperty",
            json!({"name": "temperature"}),
        ))
        .await;
    observer.barrier().await;
    agent.send(reading(THING, "temperature", json!(23))).await;
    assert_eq!(second.recv().await["value"], 23);
    observer.assert_nothing_pending().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn mqtt_agent_reading_is_retained_for_mqtt_and_websocket_observers() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.mqtt("agent").await;
    let topic = format!("lmos/{THING}/properties/modelConfiguration");
    let value = json!({"modelName": "gpt-4o", "temperature": 0.7});
    agent
        .publish(
            &topic,
            &reading(THING, "modelConfiguration", value.clone()),
            true,
        )
        .await;

    let mut observer = sidecar.ws().await;
    observer
        .send(lmos(
            THING,
            "observeProperty",
            json!({"name": "modelConfiguration"}),
        ))
        .await;
    assert_eq!(observer.recv().await["value"], value);

    let mut late = sidecar.mqtt("late").await;
    late.subscribe(&format!("lmos/{THING}/properties/+")).await;
    let (got_topic, payload, retained) = late.recv_json().await;
    assert_eq!(got_topic, topic);
    assert!(
        retained,
        "MQTT subscribers get the property as a retained message"
    );
    assert_eq!(payload["value"], value);
    sidecar.stop().await;
}

#[tokio::test]
async fn websocket_readings_are_retained_for_mqtt_subscribers() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.ws().await;
    agent.send(reading(THING, "mode", json!("eco"))).await;
    agent.barrier().await;

    let mut subscriber = sidecar.mqtt("sub").await;
    subscriber
        .subscribe(&format!("lmos/{THING}/properties/mode"))
        .await;
    let (_, payload, retained) = subscriber.recv_json().await;
    assert!(retained);
    assert_eq!(payload["value"], "eco");
    sidecar.stop().await;
}

#[tokio::test]
async fn property_readings_update_each_observed_property() {
    let sidecar = TestSidecar::start().await;
    let mut observer = sidecar.ws().await;
    observer
        .send(lmos(
            THING,
            "observeProperty",
            json!({"name": "a", "correlationID": "ca"}),
        ))
        .await;
    observer
        .send(lmos(
            THING,
            "observeProperty",
            json!({"name": "b", "correlationID": "cb"}),
        ))
        .await;
    observer.barrier().await;

    let mut agent = sidecar.ws().await;
    agent
        .send(lmos(THING, "propertyReadings", json!({"data": {"a": 1, "b": {"x": 2}}, "timestamp": "2025-01-20T19:00:00Z", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})))
        .await;
    let mut got = vec![observer.recv().await, observer.recv().await];
    got.sort_by_key(|v| v["name"].as_str().unwrap().to_owned());
    assert_eq!(
        (
            got[0]["name"].as_str(),
            got[0]["value"].clone(),
            got[0]["correlationID"].as_str()
        ),
        (Some("a"), json!(1), Some("ca"))
    );
    assert_eq!(
        (
            got[1]["name"].as_str(),
            got[1]["value"].clone(),
            got[1]["correlationID"].as_str()
        ),
        (Some("b"), json!({"x": 2}), Some("cb"))
    );
    for g in &got {
        assert_eq!(g["messageType"], "propertyReading");
        assert_eq!(g["timestamp"], "2025-01-20T19:00:00Z");
        assert_eq!(
            g["traceparent"],
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
        assert_eq!(
            uuid::Uuid::parse_str(g["messageID"].as_str().unwrap())
                .unwrap()
                .get_version_num(),
            4
        );
    }
    sidecar.stop().await;
}

#[tokio::test]
async fn action_status_lands_on_its_invocation_topic() {
    let sidecar = TestSidecar::start().await;
    let mut one = sidecar.mqtt("one").await;
    one.subscribe(&format!("lmos/{THING}/actions/getWeather/status/inv-1"))
        .await;
    let mut all = sidecar.mqtt("all").await;
    all.subscribe(&format!("lmos/{THING}/actions/getWeather/status/+"))
        .await;

    let mut agent = sidecar.ws().await;
    for (inv, status) in [
        ("inv-2", "pending"),
        ("inv-1", "pending"),
        ("inv-1", "completed"),
    ] {
        agent
            .send(lmos(
                THING,
                "actionStatus",
                json!({"action": "getWeather", "status": status, "correlationID": inv}),
            ))
            .await;
    }
    let (topic, payload, _) = one.recv_json().await;
    assert_eq!(
        topic,
        format!("lmos/{THING}/actions/getWeather/status/inv-1")
    );
    assert_eq!(payload["status"], "pending");
    assert_eq!(one.recv_json().await.1["status"], "completed");
    let topics: Vec<String> = vec![
        all.recv_json().await.0,
        all.recv_json().await.0,
        all.recv_json().await.0,
    ];
    assert_eq!(topics.iter().filter(|t| t.ends_with("/inv-1")).count(), 2);
    assert_eq!(topics.iter().filter(|t| t.ends_with("/inv-2")).count(), 1);

    // Without a correlation ID there is no invocation to name.
    agent
        .send(lmos(
            THING,
            "actionStatus",
            json!({"action": "getWeather", "status": "failed"}),
        ))
        .await;
    let error = agent.recv().await;
    assert_eq!(error["messageType"], "error");
    assert_eq!(error["status"], "400");
    assert!(error["detail"].as_str().unwrap().contains("correlationID"));
    sidecar.stop().await;
}
