//! The Kotlin dialect of `lmosprotocol` (eclipse-thingweb/kotlin-wot,
//! `kotlin-wot-binding-websocket/src/main/kotlin/websocket/Messages.kt`):
//! Kotlin consumers and agents against draft ones, over WebSocket and MQTT.
//!
//! Every Kotlin message here is shaped as Jackson writes that file's classes
//! with kotlin-wot's `JsonMapper` (default naming, `JavaTimeModule`,
//! `Instant`s as decimal seconds, `null`s written): `messageType` first (the
//! type id), then the constructor parameters in order.

use lmos_testkit as common;

use common::{lmos, reading, MqttClient, TestSidecar, WsClient};
use lmos_sidecar::topics::Topics;
use serde_json::{json, Value};

const THING: &str = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";
/// An `Instant` as Jackson writes it (WRITE_DATES_AS_TIMESTAMPS, nanoseconds);
/// an f64 keeps what it can, as the sidecar's reader does.
#[allow(clippy::excessive_precision)]
const INSTANT: f64 = 1737399600.123456789;

fn id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn topics() -> Topics {
    Topics::new("lmos").unwrap()
}

/// Constructors of `Messages.kt`'s classes, serialised.
mod kotlin {
    use super::*;

    pub fn read_property(thing: &str, property: &str) -> Value {
        json!({"messageType": "readProperty", "thingId": thing, "messageId": id(), "property": property})
    }

    pub fn write_property(thing: &str, property: &str, data: Value) -> Value {
        json!({"messageType": "writeProperty", "thingId": thing, "messageId": id(), "property": property, "data": data})
    }

    pub fn observe_property(thing: &str, property: &str) -> Value {
        json!({"messageType": "observeProperty", "thingId": thing, "messageId": id(), "property": property, "lastPropertyReading": INSTANT})
    }

    pub fn unobserve_property(thing: &str, property: &str) -> Value {
        json!({"messageType": "unobserveProperty", "thingId": thing, "messageId": id(), "property": property})
    }

    pub fn read_all_properties(thing: &str) -> Value {
        json!({"messageType": "readAllProperties", "thingId": thing, "messageId": id()})
    }

    pub fn read_multiple_properties(thing: &str, properties: &[&str]) -> Value {
        json!({"messageType": "readMultipleProperties", "thingId": thing, "messageId": id(), "properties": properties})
    }

    pub fn write_all_properties(thing: &str, data: Value) -> Value {
        json!({"messageType": "writeAllProperties", "thingId": thing, "messageId": id(), "data": data})
    }

    pub fn invoke_action(thing: &str, action: &str, input: Value) -> Value {
        json!({"messageType": "invokeAction", "thingId": thing, "messageId": id(), "action": action, "input": input})
    }

    pub fn subscribe_event(thing: &str, event: &str) -> Value {
        json!({"messageType": "subscribeevent", "thingId": thing, "messageId": id(), "event": event, "lastEvent": INSTANT})
    }

    pub fn unsubscribe_event(thing: &str, event: &str) -> Value {
        json!({"messageType": "unsubscribeEvent", "thingId": thing, "messageId": id(), "event": event})
    }

    pub fn property_reading(thing: &str, correlation: Value, property: &str, data: Value) -> Value {
        json!({"messageType": "propertyReading", "thingId": thing, "messageId": id(), "correlationId": correlation, "property": property, "data": data, "timestamp": INSTANT})
    }

    pub fn action_status(
        thing: &str,
        correlation: &Value,
        action: &str,
        status: &str,
        output: Value,
    ) -> Value {
        json!({"messageType": "actionStatus", "thingId": thing, "messageId": id(), "correlationId": correlation, "action": action, "status": status, "output": output})
    }

    pub fn event(thing: &str, event: &str, data: Value) -> Value {
        json!({"messageType": "event", "thingId": thing, "messageId": id(), "correlationId": null, "event": event, "href": null, "data": data, "timestamp": INSTANT})
    }

    pub fn acknowledgement(thing: &str, correlation: &Value, message: &str) -> Value {
        json!({"messageType": "acknowledgement", "thingId": thing, "messageId": id(), "correlationId": correlation, "message": message})
    }
}

/// What a Kotlin reader needs, and no draft spelling.
fn assert_kotlin(v: &Value) {
    assert!(v["thingId"].is_string(), "no thingId: {v}");
    assert!(v["messageId"].is_string(), "no messageId: {v}");
    for draft in ["thingID", "messageID", "correlationID", "name", "value"] {
        assert!(v.get(draft).is_none(), "`{draft}` in a Kotlin message: {v}");
    }
}

/// The draft's form, and no Kotlin spelling.
fn assert_draft(v: &Value) {
    assert!(v["thingID"].is_string(), "no thingID: {v}");
    assert!(v["messageID"].is_string(), "no messageID: {v}");
    for kotlin in ["thingId", "messageId", "correlationId", "property"] {
        assert!(
            v.get(kotlin).is_none(),
            "`{kotlin}` in a draft message: {v}"
        );
    }
    // Jackson writes `"href": null`; the sidecar's own `href` (an
    // invocation's status resource) is a string.
    if let Some(href) = v.get("href") {
        assert!(href.is_string(), "a Kotlin `href` in a draft message: {v}");
    }
    if let Some(ts) = v.get("timestamp") {
        assert!(ts.is_string(), "timestamp is RFC 3339: {v}");
    }
}

/// A Kotlin `Instant` reads a number as decimal seconds.
fn assert_instant(v: &Value) {
    assert!(
        v["timestamp"].is_number(),
        "timestamp as Jackson writes it: {v}"
    );
}

/// The request a draft agent receives, checked for the draft's form.
async fn draft_request(agent: &mut WsClient, message_type: &str) -> Value {
    let request = agent.recv().await;
    assert_eq!(request["messageType"], message_type, "{request}");
    assert_draft(&request);
    request
}

fn draft_reply(request: &Value, message_type: &str, members: Value) -> Value {
    let mut reply = lmos(THING, message_type, members);
    reply["correlationID"] = request["correlationID"].clone();
    reply
}

#[tokio::test]
async fn a_kotlin_consumer_reads_writes_and_invokes_on_a_draft_agent() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.ws_agent(THING).await;
    let mut consumer = sidecar.ws().await;

    // readProperty: the Kotlin client matches the reply by correlationId =
    // its messageId, and reads `property` and `data`.
    let read = kotlin::read_property(THING, "modelConfiguration");
    consumer.send(read.clone()).await;
    let request = draft_request(&mut agent, "readProperty").await;
    assert_eq!(request["name"], "modelConfiguration");
    agent
        .send(draft_reply(&request, "propertyReading", json!({"name": "modelConfiguration", "value": {"modelName": "gpt-4o"}, "timestamp": "2025-01-20T19:00:00.125Z"})))
        .await;
    let reply = consumer.recv().await;
    assert_kotlin(&reply);
    assert_instant(&reply);
    assert_eq!(reply["messageType"], "propertyReading");
    assert_eq!(reply["correlationId"], read["messageId"]);
    assert_eq!(reply["thingId"], THING);
    assert_eq!(reply["property"], "modelConfiguration");
    assert_eq!(reply["data"], json!({"modelName": "gpt-4o"}));
    assert_eq!(reply["timestamp"], json!(1737399600.125));

    // writeProperty.
    let write = kotlin::write_property(THING, "modelConfiguration", json!({"modelName": "o3"}));
    consumer.send(write.clone()).await;
    let request = draft_request(&mut agent, "writeProperty").await;
    assert_eq!(
        (&request["name"], &request["data"]),
        (&json!("modelConfiguration"), &json!({"modelName": "o3"}))
    );
    agent
        .send(draft_reply(&request, "propertyReading", json!({"name": "modelConfiguration", "value": {"modelName": "o3"}, "timestamp": "2025-01-20T19:00:01Z"})))
        .await;
    let reply = consumer.recv().await;
    assert_kotlin(&reply);
    assert_eq!(reply["correlationId"], write["messageId"]);
    assert_eq!(reply["data"], json!({"modelName": "o3"}));

    // writeAllProperties: the draft's writeMultipleProperties.
    let write_all =
        kotlin::write_all_properties(THING, json!({"modelConfiguration": {"modelName": "o4"}}));
    consumer.send(write_all.clone()).await;
    let request = draft_request(&mut agent, "writeMultipleProperties").await;
    assert_eq!(
        request["data"],
        json!({"modelConfiguration": {"modelName": "o4"}})
    );
    agent
        .send(draft_reply(&request, "propertyReadings", json!({"data": {"modelConfiguration": {"modelName": "o4"}}, "timestamp": "2025-01-20T19:00:02Z"})))
        .await;
    let reply = consumer.recv().await;
    assert_kotlin(&reply);
    assert_instant(&reply);
    assert_eq!(reply["messageType"], "propertyReadings");
    assert_eq!(reply["correlationId"], write_all["messageId"]);
    assert_eq!(
        reply["data"],
        json!({"modelConfiguration": {"modelName": "o4"}})
    );

    // invokeAction: every status with correlationId = the messageId, and a
    // status the Kotlin enum lacks becomes `pending`.
    let invoke = kotlin::invoke_action(
        THING,
        "getWeather",
        json!({"question": "Berlin?", "interactionMode": "text"}),
    );
    consumer.send(invoke.clone()).await;
    let request = draft_request(&mut agent, "invokeAction").await;
    assert_eq!(request["input"]["question"], "Berlin?");
    agent
        .send(draft_reply(
            &request,
            "actionStatus",
            json!({"action": "getWeather", "status": "running", "output": "partial"}),
        ))
        .await;
    agent
        .send(draft_reply(
            &request,
            "actionStatus",
            json!({"action": "getWeather", "status": "completed", "output": "Sunny."}),
        ))
        .await;
    for (status, output) in [("pending", "partial"), ("completed", "Sunny.")] {
        let reply = consumer.recv().await;
        assert_kotlin(&reply);
        assert_eq!(reply["messageType"], "actionStatus");
        assert_eq!(reply["correlationId"], invoke["messageId"]);
        assert_eq!(
            (reply["status"].as_str(), reply["output"].as_str()),
            (Some(status), Some(output))
        );
        assert_eq!(reply["action"], "getWeather");
    }

    // Jackson writes an absent input as null: the agent gets none.
    consumer
        .send(kotlin::invoke_action(THING, "getWeather", Value::Null))
        .await;
    let request = draft_request(&mut agent, "invokeAction").await;
    assert!(request.get("input").is_none(), "{request}");
}

#[tokio::test]
async fn a_kotlin_consumer_observes_and_subscribes_with_acknowledgements() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.ws_agent(THING).await;
    let mut consumer = sidecar.ws().await;

    // subscribeevent: acknowledged, as the Kotlin server does; the client
    // waits for it before it listens.
    let subscribe = kotlin::subscribe_event(THING, "userFeedbackReceived");
    consumer.send(subscribe.clone()).await;
    let ack = consumer.recv().await;
    assert_kotlin(&ack);
    assert_eq!(ack["messageType"], "acknowledgement");
    assert_eq!(ack["correlationId"], subscribe["messageId"]);
    assert_eq!(ack["message"], "subscribeevent");
    assert_eq!(ack["thingId"], THING);

    // The acknowledgement follows the bus subscription: what the agent
    // publishes from now on arrives.
    agent
        .send(common::event(
            THING,
            "userFeedbackReceived",
            json!({"rating": 4}),
        ))
        .await;
    let event = consumer.recv().await;
    assert_kotlin(&event);
    assert_instant(&event);
    assert_eq!(event["messageType"], "event");
    assert_eq!(event["event"], "userFeedbackReceived");
    assert_eq!(event["data"], json!({"rating": 4}));
    assert_eq!(event["correlationId"], subscribe["messageId"]);

    // observeProperty with no reading yet: acknowledged; then readings.
    let observe = kotlin::observe_property(THING, "modelConfiguration");
    consumer.send(observe.clone()).await;
    let ack = consumer.recv().await;
    assert_eq!(
        (&ack["messageType"], &ack["correlationId"], &ack["message"]),
        (
            &json!("acknowledgement"),
            &observe["messageId"],
            &json!("observeProperty")
        )
    );
    agent
        .send(reading(
            THING,
            "modelConfiguration",
            json!({"modelName": "gpt-4o"}),
        ))
        .await;
    let seen = consumer.recv().await;
    assert_kotlin(&seen);
    assert_eq!(seen["messageType"], "propertyReading");
    assert_eq!(seen["property"], "modelConfiguration");
    assert_eq!(seen["data"], json!({"modelName": "gpt-4o"}));

    // A second Kotlin observer, once a reading exists: the reading answers
    // (correlationId = its messageId), as the Kotlin server answers with the
    // current value; no acknowledgement besides.
    let mut late = sidecar.ws().await;
    let observe = kotlin::observe_property(THING, "modelConfiguration");
    late.send(observe.clone()).await;
    let current = late.recv().await;
    assert_kotlin(&current);
    assert_eq!(current["messageType"], "propertyReading");
    assert_eq!(current["correlationId"], observe["messageId"]);
    assert_eq!(current["data"], json!({"modelName": "gpt-4o"}));
    let unobserve = kotlin::unobserve_property(THING, "modelConfiguration");
    late.send(unobserve.clone()).await;
    let ack = late.recv().await;
    assert_eq!(
        (&ack["messageType"], &ack["correlationId"], &ack["message"]),
        (
            &json!("acknowledgement"),
            &unobserve["messageId"],
            &json!("unobserveProperty")
        )
    );

    let unsubscribe = kotlin::unsubscribe_event(THING, "userFeedbackReceived");
    consumer.send(unsubscribe.clone()).await;
    let ack = consumer.recv().await;
    assert_eq!(
        (&ack["messageType"], &ack["correlationId"], &ack["message"]),
        (
            &json!("acknowledgement"),
            &unsubscribe["messageId"],
            &json!("unsubscribeEvent")
        )
    );
}

#[tokio::test]
async fn a_kotlin_agent_serves_draft_consumers_over_websocket_and_mqtt() {
    let sidecar = TestSidecar::start().await;
    let t = topics();
    let mut mqtt = sidecar.mqtt("kotlin-dialect-mqtt-consumer").await;
    mqtt.subscribe(&t.thing_events_filter(THING)).await;
    mqtt.subscribe(&t.thing_properties_filter(THING)).await;
    let mut consumer = sidecar.ws().await;
    let subscribe = lmos(
        THING,
        "subscribeEvent",
        json!({"event": "userFeedbackReceived", "correlationID": "feedback"}),
    );
    consumer.send(subscribe).await;
    consumer.barrier().await;

    let mut agent = sidecar.ws_agent(THING).await;
    // Its first message says it speaks Kotlin: a reading, retained.
    agent
        .send(kotlin::property_reading(
            THING,
            Value::Null,
            "modelConfiguration",
            json!({"modelName": "gpt-4o"}),
        ))
        .await;
    // (A live subscriber gets it with the retain flag clear, as MQTT says.)
    let (topic, published, _) = mqtt.recv_json().await;
    assert_eq!(topic, t.property(THING, "modelConfiguration"));
    assert_draft(&published);
    assert_eq!(published["messageType"], "propertyReading");
    assert_eq!(
        (
            &published["name"],
            &published["value"],
            &published["timestamp"]
        ),
        (
            &json!("modelConfiguration"),
            &json!({"modelName": "gpt-4o"}),
            &json!("2025-01-20T19:00:00.123457Z")
        )
    );

    // Events: draft on MQTT and to the draft WebSocket subscriber.
    agent
        .send(kotlin::event(
            THING,
            "userFeedbackReceived",
            json!({"rating": 5}),
        ))
        .await;
    let (topic, published, _) = mqtt.recv_json().await;
    assert_eq!(topic, t.event(THING, "userFeedbackReceived"));
    assert_draft(&published);
    assert_eq!(published["data"], json!({"rating": 5}));
    let event = consumer.recv().await;
    assert_draft(&event);
    assert_eq!(
        (
            &event["messageType"],
            &event["correlationID"],
            &event["data"]
        ),
        (&json!("event"), &json!("feedback"), &json!({"rating": 5}))
    );

    // readProperty from a draft consumer: the Kotlin agent gets `property`
    // and a messageId it answers with as correlationId.
    let read = lmos(
        THING,
        "readProperty",
        json!({"name": "modelConfiguration", "correlationID": "read-1"}),
    );
    consumer.send(read).await;
    let request = agent.recv().await;
    assert_kotlin(&request);
    assert_eq!(
        request,
        json!({"thingId": THING, "messageId": request["messageId"], "messageType": "readProperty", "property": "modelConfiguration"})
    );
    agent
        .send(kotlin::property_reading(
            THING,
            request["messageId"].clone(),
            "modelConfiguration",
            json!({"modelName": "o3"}),
        ))
        .await;
    let reply = consumer.recv().await;
    assert_draft(&reply);
    assert_eq!(
        (
            &reply["messageType"],
            &reply["correlationID"],
            &reply["name"],
            &reply["value"]
        ),
        (
            &json!("propertyReading"),
            &json!("read-1"),
            &json!("modelConfiguration"),
            &json!({"modelName": "o3"})
        )
    );

    // invokeAction: the Kotlin agent's actionStatus reaches the consumer,
    // and the invocation's status topic, in the draft's form.
    let mut statuses = sidecar.mqtt("kotlin-dialect-status-watcher").await;
    let status_topic = t.action_status(THING, "getWeather", "inv-1");
    statuses.subscribe(&status_topic).await;
    let invoke = lmos(
        THING,
        "invokeAction",
        json!({"action": "getWeather", "input": {"question": "Paris?"}, "correlationID": "inv-1"}),
    );
    consumer.send(invoke).await;
    let request = agent.recv().await;
    assert_kotlin(&request);
    assert_eq!(request["messageType"], "invokeAction");
    assert_eq!(request["input"], json!({"question": "Paris?"}));
    assert!(request.get("correlationId").is_none(), "{request}");
    // An acknowledgement asks nothing of the sidecar: ignored, not refused.
    agent
        .send(kotlin::acknowledgement(
            THING,
            &request["messageId"],
            "invokeAction",
        ))
        .await;
    agent
        .send(kotlin::action_status(
            THING,
            &request["messageId"],
            "getWeather",
            "completed",
            json!("Sunny in Paris."),
        ))
        .await;
    let status = consumer.recv().await;
    assert_draft(&status);
    assert_eq!(
        (
            &status["messageType"],
            &status["correlationID"],
            &status["status"],
            &status["output"]
        ),
        (
            &json!("actionStatus"),
            &json!("inv-1"),
            &json!("completed"),
            &json!("Sunny in Paris.")
        )
    );
    let (topic, published, _) = statuses.recv_json().await;
    assert_eq!(topic, status_topic);
    assert_draft(&published);
    assert_eq!(published["status"], "completed");
    consumer.assert_nothing_pending().await;
}

#[tokio::test]
async fn kotlin_events_and_readings_published_over_mqtt_reach_draft_and_kotlin_consumers() {
    let sidecar = TestSidecar::start().await;
    let t = topics();
    let mut draft = sidecar.ws().await;
    draft
        .send(lmos(
            THING,
            "subscribeEvent",
            json!({"event": "userFeedbackReceived", "correlationID": "d"}),
        ))
        .await;
    draft.barrier().await;
    let mut kotlin_consumer = sidecar.ws().await;
    let subscribe = kotlin::subscribe_event(THING, "userFeedbackReceived");
    kotlin_consumer.send(subscribe.clone()).await;
    assert_eq!(
        kotlin_consumer.recv().await["messageType"],
        "acknowledgement"
    );

    let mut agent = MqttClient::connect(sidecar.mqtt, "kotlin-mqtt-agent").await;
    agent
        .publish(
            &t.event(THING, "userFeedbackReceived"),
            &kotlin::event(THING, "userFeedbackReceived", json!({"rating": 3})),
            false,
        )
        .await;
    let event = draft.recv().await;
    assert_draft(&event);
    assert_eq!(
        (&event["correlationID"], &event["data"]),
        (&json!("d"), &json!({"rating": 3}))
    );
    let event = kotlin_consumer.recv().await;
    assert_kotlin(&event);
    assert_instant(&event);
    assert_eq!(
        (&event["correlationId"], &event["data"]),
        (&subscribe["messageId"], &json!({"rating": 3}))
    );

    // A retained Kotlin reading: a new draft observer gets the draft form.
    agent
        .publish(
            &t.property(THING, "modelConfiguration"),
            &kotlin::property_reading(THING, Value::Null, "modelConfiguration", json!(7)),
            true,
        )
        .await;
    draft
        .send(lmos(
            THING,
            "observeProperty",
            json!({"name": "modelConfiguration", "correlationID": "o"}),
        ))
        .await;
    let seen = draft.recv().await;
    assert_draft(&seen);
    assert_eq!(
        (&seen["name"], &seen["value"], &seen["correlationID"]),
        (&json!("modelConfiguration"), &json!(7), &json!("o"))
    );
}

/// The weather agent's description with two more properties: one
/// read-only, one write-only (which readAllProperties leaves out).
fn description() -> Value {
    let mut td: Value =
        serde_json::from_str(include_str!("../../examples/weather_agent.td.json")).unwrap();
    let mut status = td["properties"]["modelConfiguration"].clone();
    status["type"] = json!("string");
    status.as_object_mut().unwrap().remove("properties");
    status["readOnly"] = json!(true);
    let mut secret = status.clone();
    secret["readOnly"] = json!(false);
    secret["writeOnly"] = json!(true);
    td["properties"]["status"] = status;
    td["properties"]["secret"] = secret;
    td
}

#[tokio::test]
async fn reads_of_several_properties_are_answered_with_one_property_readings() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.ws_agent(THING).await;
    agent.send(description()).await;
    common::wait_for_td(&sidecar, THING).await;
    let mut consumer = sidecar.ws().await;

    let answer = |request: &Value| {
        let name = request["name"].as_str().unwrap().to_owned();
        draft_reply(
            request,
            "propertyReading",
            json!({"name": name, "value": format!("{name}-value"), "timestamp": "2025-01-20T19:00:00Z"}),
        )
    };

    let read_all = kotlin::read_all_properties(THING);
    consumer.send(read_all.clone()).await;
    let mut names = Vec::new();
    for _ in 0..2 {
        let request = draft_request(&mut agent, "readProperty").await;
        names.push(request["name"].as_str().unwrap().to_owned());
        agent.send(answer(&request)).await;
    }
    names.sort();
    assert_eq!(names, ["modelConfiguration", "status"]);
    let reply = consumer.recv().await;
    assert_kotlin(&reply);
    assert_instant(&reply);
    assert_eq!(reply["messageType"], "propertyReadings");
    assert_eq!(reply["correlationId"], read_all["messageId"]);
    assert_eq!(
        reply["data"],
        json!({"modelConfiguration": "modelConfiguration-value", "status": "status-value"})
    );

    let read_some = kotlin::read_multiple_properties(THING, &["status"]);
    consumer.send(read_some.clone()).await;
    let request = draft_request(&mut agent, "readProperty").await;
    agent.send(answer(&request)).await;
    let reply = consumer.recv().await;
    assert_eq!(reply["correlationId"], read_some["messageId"]);
    assert_eq!(reply["data"], json!({"status": "status-value"}));

    // One failing read: its error answers, once.
    let read_bad = kotlin::read_multiple_properties(THING, &["status", "nope"]);
    consumer.send(read_bad.clone()).await;
    let request = draft_request(&mut agent, "readProperty").await;
    agent.send(answer(&request)).await;
    let error = consumer.recv().await;
    assert_kotlin(&error);
    assert_eq!(error["messageType"], "error");
    assert_eq!(error["correlationId"], read_bad["messageId"]);
    assert_eq!(error["status"], "404");

    // The next answer is the next request's.
    let read = kotlin::read_property(THING, "status");
    consumer.send(read.clone()).await;
    let request = draft_request(&mut agent, "readProperty").await;
    agent.send(answer(&request)).await;
    let reply = consumer.recv().await;
    assert_eq!(
        (&reply["messageType"], &reply["correlationId"]),
        (&json!("propertyReading"), &read["messageId"])
    );
}

#[tokio::test]
async fn errors_reach_a_kotlin_connection_in_its_shape() {
    let sidecar = TestSidecar::start().await;
    let mut consumer = sidecar.ws().await;

    let assert_error = |error: &Value, correlation: &Value, status: &str| {
        assert_kotlin(error);
        assert_eq!(error["messageType"], "error");
        assert_eq!(&error["correlationId"], correlation);
        // ErrorMessage: every member a non-null string, `status` too.
        for member in ["type", "title", "status", "detail", "instance"] {
            assert!(error[member].is_string(), "{member} in {error}");
        }
        assert_eq!(error["status"], status);
        assert!(error["type"]
            .as_str()
            .unwrap()
            .starts_with("https://eclipse.dev/lmos/protocol/v1/errors#"));
    };

    // No agent hosts the Thing.
    let read = kotlin::read_property(THING, "modelConfiguration");
    consumer.send(read.clone()).await;
    let error = consumer.recv().await;
    assert_error(&error, &read["messageId"], "503");
    assert_eq!(error["thingId"], THING);

    // readAllProperties needs a description to know the properties.
    let read_all = kotlin::read_all_properties(THING);
    consumer.send(read_all.clone()).await;
    assert_error(&consumer.recv().await, &read_all["messageId"], "404");

    // A malformed readMultipleProperties.
    let mut bad = kotlin::read_multiple_properties(THING, &[]);
    bad["properties"] = json!("modelConfiguration");
    consumer.send(bad.clone()).await;
    assert_error(&consumer.recv().await, &bad["messageId"], "400");

    // An empty one is answered at once, with nothing.
    let none = kotlin::read_multiple_properties(THING, &[]);
    consumer.send(none.clone()).await;
    let reply = consumer.recv().await;
    assert_eq!(
        (
            &reply["messageType"],
            &reply["correlationId"],
            &reply["data"]
        ),
        (&json!("propertyReadings"), &none["messageId"], &json!({}))
    );

    // Once known as Kotlin, even what is no LMOS message gets a Kotlin error.
    consumer
        .send_raw(tokio_tungstenite::tungstenite::Message::Text(
            "{\"thingId\": ".into(),
        ))
        .await;
    let error = consumer.recv().await;
    assert_kotlin(&error);
    assert_eq!(error["messageType"], "error");
    assert_eq!(error["status"], "400");
}

#[tokio::test]
async fn draft_connections_keep_the_draft_form() {
    // A connection whose first message is the draft's is answered in it,
    // even when it later sends a Kotlin-only message.
    let sidecar = TestSidecar::start().await;
    let mut consumer = sidecar.ws().await;
    let read = lmos(THING, "readProperty", json!({"name": "p"}));
    consumer.send(read.clone()).await;
    let error = consumer.recv().await;
    assert_draft(&error);
    assert_eq!(error["correlationID"], read["messageID"]);
    let subscribe = kotlin::subscribe_event(THING, "e");
    consumer.send(subscribe).await;
    consumer.assert_nothing_pending().await;
}
