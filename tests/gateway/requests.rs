//! Requests to agents and their replies, over both transports on both sides.

use lmos_testkit as common;

use common::{lmos, wait_for_stats, MqttClient, Parties, TestSidecar, WsClient};
use serde_json::{json, Value};

const THING: &str = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";

fn is_uuid(v: &Value) -> bool {
    v.as_str().is_some_and(|s| uuid::Uuid::parse_str(s).is_ok())
}

/// The agent side of a request: what it received, and a reply to it.
async fn agent_receives(agent: &mut WsClient, message_type: &str) -> Value {
    let request = agent.recv().await;
    assert_eq!(request["messageType"], message_type, "{request}");
    assert!(
        is_uuid(&request["correlationID"]),
        "requests reach agents with a route ID: {request}"
    );
    request
}

fn reply_to(request: &Value, message_type: &str, members: Value) -> Value {
    let mut reply = lmos(THING, message_type, members);
    reply["correlationID"] = request["correlationID"].clone();
    reply
}

fn status(request: &Value, action: &str, status: &str, output: Option<Value>) -> Value {
    let mut members = json!({"action": action, "status": status});
    if let Some(o) = output {
        members["output"] = o;
    }
    reply_to(request, "actionStatus", members)
}

#[tokio::test]
async fn read_and_write_properties_between_websocket_consumer_and_agent() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.ws_agent(THING).await;
    let mut consumer = sidecar.ws().await;
    let mut observer = sidecar.ws().await;
    observer
        .send(lmos(
            THING,
            "observeProperty",
            json!({"name": "modelConfiguration", "correlationID": "obs"}),
        ))
        .await;
    observer.barrier().await;

    consumer
        .send(lmos(
            THING,
            "readProperty",
            json!({"name": "modelConfiguration", "correlationID": "read-1", "messageID": "m-read"}),
        ))
        .await;
    let request = agent_receives(&mut agent, "readProperty").await;
    assert_eq!(
        (request["name"].as_str(), request["messageID"].as_str()),
        (Some("modelConfiguration"), Some("m-read"))
    );
    agent
        .send(reply_to(&request, "propertyReading", json!({"name": "modelConfiguration", "value": {"modelName": "gpt-4o"}, "timestamp": "2025-01-20T19:00:00Z"})))
        .await;
    let reading = consumer.recv().await;
    assert_eq!(reading["messageType"], "propertyReading");
    assert_eq!(reading["correlationID"], "read-1");
    assert_eq!(reading["value"], json!({"modelName": "gpt-4o"}));

    // writeProperty without a correlation ID: the reply carries its messageID.
    let write = lmos(
        THING,
        "writeProperty",
        json!({"name": "modelConfiguration", "data": {"modelName": "o3"}}),
    );
    consumer.send(write.clone()).await;
    let request = agent_receives(&mut agent, "writeProperty").await;
    assert_eq!(request["data"], json!({"modelName": "o3"}));
    agent
        .send(reply_to(&request, "propertyReadings", json!({"data": {"modelConfiguration": {"modelName": "o3"}}, "timestamp": "2025-01-20T19:00:01Z"})))
        .await;
    let confirmed = consumer.recv().await;
    assert_eq!(confirmed["messageType"], "propertyReadings");
    assert_eq!(confirmed["correlationID"], write["messageID"]);
    // Observers see what was written.
    let seen = observer.recv().await;
    assert_eq!(
        (seen["value"].clone(), seen["correlationID"].as_str()),
        (json!({"modelName": "o3"}), Some("obs"))
    );

    consumer
        .send(lmos(
            THING,
            "writeMultipleProperties",
            json!({"data": {"a": 1, "b": 2}, "correlationID": "wm"}),
        ))
        .await;
    let request = agent_receives(&mut agent, "writeMultipleProperties").await;
    agent
        .send(reply_to(
            &request,
            "propertyReadings",
            json!({"data": {"a": 1, "b": 2}, "timestamp": "2025-01-20T19:00:02Z"}),
        ))
        .await;
    let confirmed = consumer.recv().await;
    assert_eq!(
        (
            confirmed["correlationID"].as_str(),
            confirmed["data"].clone()
        ),
        (Some("wm"), json!({"a": 1, "b": 2}))
    );
    observer.assert_nothing_pending().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn invoke_streams_every_status_then_query_and_cancel_see_how_it_ended() {
    let sidecar = TestSidecar::start().await;
    let status_filter = format!("lmos/{THING}/actions/getWeather/status/+");
    let Parties {
        mut agent,
        mut consumer,
        mut follower,
    } = sidecar.invocation_parties(THING, &status_filter).await;

    consumer
        .send(lmos(THING, "invokeAction", json!({"action": "getWeather", "input": {"question": "NYC?"}, "correlationID": "inv-1"})))
        .await;
    let request = agent_receives(&mut agent, "invokeAction").await;
    assert_eq!(request["input"], json!({"question": "NYC?"}));
    agent
        .send(status(&request, "getWeather", "pending", None))
        .await;
    agent
        .send(status(
            &request,
            "getWeather",
            "running",
            Some(json!("Looking outside...")),
        ))
        .await;
    agent
        .send(status(
            &request,
            "getWeather",
            "completed",
            Some(json!("Sunny, 25°C.")),
        ))
        .await;

    for (expected, output) in [
        ("pending", Value::Null),
        ("running", json!("Looking outside...")),
        ("completed", json!("Sunny, 25°C.")),
    ] {
        let got = consumer.recv().await;
        assert_eq!(
            (got["status"].as_str(), got["correlationID"].as_str()),
            (Some(expected), Some("inv-1")),
            "{got}"
        );
        assert_eq!(got.get("output").cloned().unwrap_or(Value::Null), output);
        let (topic, followed, _) = follower.recv_json().await;
        assert_eq!(
            topic,
            format!("lmos/{THING}/actions/getWeather/status/inv-1")
        );
        assert_eq!(followed["status"], expected);
    }

    consumer
        .send(lmos(
            THING,
            "queryAction",
            json!({"action": "getWeather", "correlationID": "inv-1"}),
        ))
        .await;
    let latest = consumer.recv().await;
    assert_eq!(
        (latest["status"].as_str(), latest["correlationID"].as_str()),
        (Some("completed"), Some("inv-1"))
    );
    // Without a correlation ID, a query names this consumer's latest
    // invocation and is answered under its own messageID.
    let query = lmos(THING, "queryAction", json!({"action": "getWeather"}));
    consumer.send(query.clone()).await;
    let latest = consumer.recv().await;
    assert_eq!(
        (latest["status"].as_str(), &latest["correlationID"]),
        (Some("completed"), &query["messageID"])
    );

    consumer
        .send(lmos(
            THING,
            "cancelAction",
            json!({"action": "getWeather", "correlationID": "inv-1"}),
        ))
        .await;
    let too_late = consumer.recv().await;
    assert_eq!(
        too_late["status"], "completed",
        "already finished: {too_late}"
    );

    consumer
        .send(lmos(
            THING,
            "queryAction",
            json!({"action": "getWeather", "correlationID": "no-such"}),
        ))
        .await;
    let e = consumer.recv().await;
    assert_eq!(
        (e["messageType"].as_str(), e["status"].as_str()),
        (Some("error"), Some("404"))
    );
    agent.assert_nothing_pending().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn two_invocations_of_one_action_are_told_apart_and_cancelled_one_by_one() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.ws_agent(THING).await;
    let mut consumer = sidecar.ws().await;
    for c in ["a", "b"] {
        consumer
            .send(lmos(
                THING,
                "invokeAction",
                json!({"action": "draw", "correlationID": c}),
            ))
            .await;
    }
    let first = agent_receives(&mut agent, "invokeAction").await;
    let second = agent_receives(&mut agent, "invokeAction").await;
    assert_ne!(first["correlationID"], second["correlationID"]);
    agent.send(status(&first, "draw", "pending", None)).await;
    agent.send(status(&second, "draw", "pending", None)).await;
    let mut pending: Vec<String> = vec![consumer.recv().await, consumer.recv().await]
        .into_iter()
        .map(|v| v["correlationID"].as_str().unwrap().to_owned())
        .collect();
    pending.sort();
    assert_eq!(pending, ["a", "b"]);

    consumer
        .send(lmos(
            THING,
            "cancelAction",
            json!({"action": "draw", "correlationID": "b", "reason": "changed my mind"}),
        ))
        .await;
    let cancel = agent_receives(&mut agent, "cancelAction").await;
    assert_eq!(
        cancel["correlationID"], second["correlationID"],
        "the agent is told which invocation"
    );
    assert_eq!(cancel["reason"], "changed my mind");
    agent.send(status(&second, "draw", "cancelled", None)).await;
    let cancelled = consumer.recv().await;
    assert_eq!(
        (
            cancelled["status"].as_str(),
            cancelled["correlationID"].as_str()
        ),
        (Some("cancelled"), Some("b"))
    );

    consumer
        .send(lmos(
            THING,
            "queryAction",
            json!({"action": "draw", "correlationID": "a"}),
        ))
        .await;
    assert_eq!(consumer.recv().await["status"], "pending");
    sidecar.stop().await;
}

#[tokio::test]
async fn mqtt_311_consumer_uses_the_reply_topic_convention() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.ws_agent(THING).await;
    let mut consumer = sidecar.mqtt("consumer").await;
    consumer
        .subscribe(&format!("lmos/{THING}/replies/c-mqtt"))
        .await;
    consumer.subscribe("my/inbox").await;

    let read = lmos(
        THING,
        "readProperty",
        json!({"name": "p", "correlationID": "c-mqtt"}),
    );
    consumer
        .publish(&format!("lmos/{THING}/requests/readProperty"), &read, false)
        .await;
    let request = agent_receives(&mut agent, "readProperty").await;
    agent
        .send(reply_to(
            &request,
            "propertyReading",
            json!({"name": "p", "value": 7, "timestamp": "2025-01-20T19:00:00Z"}),
        ))
        .await;
    let (topic, reply, _) = consumer.recv_json().await;
    assert_eq!(topic, format!("lmos/{THING}/replies/c-mqtt"));
    assert_eq!(
        (reply["value"].clone(), reply["correlationID"].as_str()),
        (json!(7), Some("c-mqtt"))
    );

    // With `replyTo`, replies go where the consumer says.
    let read = lmos(
        THING,
        "readProperty",
        json!({"name": "p", "replyTo": "my/inbox"}),
    );
    consumer
        .publish(&format!("lmos/{THING}/requests/readProperty"), &read, false)
        .await;
    let request = agent_receives(&mut agent, "readProperty").await;
    assert_eq!(
        request["replyTo"], "my/inbox",
        "unknown members reach the agent"
    );
    agent
        .send(reply_to(
            &request,
            "propertyReading",
            json!({"name": "p", "value": 8, "timestamp": "2025-01-20T19:00:00Z"}),
        ))
        .await;
    let (topic, reply, _) = consumer.recv_json().await;
    assert_eq!(
        (topic.as_str(), &reply["correlationID"]),
        ("my/inbox", &read["messageID"])
    );

    // Bad requests are answered on the reply topic too.
    let bad = lmos(THING, "readProperty", json!({"correlationID": "c-mqtt"}));
    consumer
        .publish(&format!("lmos/{THING}/requests/readProperty"), &bad, false)
        .await;
    let (_, e, _) = consumer.recv_json().await;
    assert_eq!(
        (e["messageType"].as_str(), e["status"].as_str()),
        (Some("error"), Some("400"))
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn mqtt5_consumer_gets_replies_on_its_response_topic_with_its_correlation_data() {
    use rumqttc::v5::mqttbytes::v5::PublishProperties;
    use rumqttc::v5::mqttbytes::QoS;

    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.ws_agent(THING).await;
    let (client, mut rx) =
        common::mqtt5_client(sidecar.mqtt5, "consumer5", "consumer5/replies").await;
    let properties = PublishProperties {
        response_topic: Some("consumer5/replies".into()),
        correlation_data: Some(bytes::Bytes::from_static(b"opaque-42")),
        ..Default::default()
    };
    let read = lmos(THING, "readProperty", json!({"name": "p"}));
    client
        .publish_with_properties(
            format!("lmos/{THING}/requests/readProperty"),
            QoS::AtLeastOnce,
            false,
            read.to_string(),
            properties,
        )
        .await
        .unwrap();
    let request = agent_receives(&mut agent, "readProperty").await;
    agent
        .send(reply_to(
            &request,
            "propertyReading",
            json!({"name": "p", "value": 5, "timestamp": "2025-01-20T19:00:00Z"}),
        ))
        .await;
    let publish = common::mqtt5_next_publish(&mut rx).await;
    assert_eq!(publish.topic, "consumer5/replies");
    let data = publish.properties.and_then(|p| p.correlation_data);
    assert_eq!(data.as_deref(), Some(&b"opaque-42"[..]));
    let reply: Value = serde_json::from_slice(&publish.payload).unwrap();
    assert_eq!(
        (reply["value"].clone(), &reply["correlationID"]),
        (json!(5), &read["messageID"])
    );
    sidecar.stop().await;
}

/// An MQTT agent of the Thing, known to the sidecar.
async fn mqtt_agent(sidecar: &TestSidecar) -> MqttClient {
    let agent = common::mqtt_agent(sidecar.mqtt, "mqtt-agent", THING, None).await;
    wait_for_stats(sidecar, |s| s.hosted_things == 1).await;
    agent
}

#[tokio::test]
async fn websocket_consumer_invokes_an_mqtt_agent_that_then_vanishes() {
    let sidecar = TestSidecar::start().await;
    let mut agent = mqtt_agent(&sidecar).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(
            THING,
            "invokeAction",
            json!({"action": "getWeather", "correlationID": "ws-inv"}),
        ))
        .await;
    let (topic, request, _) = agent.recv_json().await;
    assert_eq!(topic, format!("lmos/{THING}/agent/requests/invokeAction"));
    assert!(is_uuid(&request["correlationID"]));
    agent
        .publish(
            &format!("lmos/{THING}/agent/replies"),
            &status(&request, "getWeather", "pending", None),
            false,
        )
        .await;
    let pending = consumer.recv().await;
    assert_eq!(
        (
            pending["status"].as_str(),
            pending["correlationID"].as_str()
        ),
        (Some("pending"), Some("ws-inv"))
    );

    // The agent's connection drops without a DISCONNECT: its last will
    // reports it offline and the running invocation fails.
    agent.vanish();
    let failed = consumer.recv().await;
    assert_eq!(
        (failed["status"].as_str(), failed["correlationID"].as_str()),
        (Some("failed"), Some("ws-inv")),
        "{failed}"
    );
    assert!(failed["output"]["error"]
        .as_str()
        .unwrap()
        .contains("disconnected"));
    wait_for_stats(&sidecar, |s| {
        s.hosted_things == 0 && s.pending_requests == 0
    })
    .await;

    // With no agent left, requests are refused at once.
    consumer
        .send(lmos(
            THING,
            "readProperty",
            json!({"name": "p", "correlationID": "late"}),
        ))
        .await;
    let e = consumer.recv().await;
    assert_eq!(
        (e["status"].as_str(), e["correlationID"].as_str()),
        (Some("503"), Some("late"))
    );
    assert!(e["detail"].as_str().unwrap().contains(THING));
    sidecar.stop().await;
}

#[tokio::test]
async fn mqtt_consumer_reaches_an_mqtt_agent_through_the_sidecar() {
    let sidecar = TestSidecar::start().await;
    let mut agent = mqtt_agent(&sidecar).await;
    let mut consumer = sidecar.mqtt("consumer").await;
    consumer.subscribe(&format!("lmos/{THING}/replies/+")).await;
    let write = lmos(
        THING,
        "writeProperty",
        json!({"name": "p", "data": 3, "correlationID": "w1"}),
    );
    consumer
        .publish(
            &format!("lmos/{THING}/requests/writeProperty"),
            &write,
            false,
        )
        .await;
    let (_, request, _) = agent.recv_json().await;
    assert_eq!(request["messageType"], "writeProperty");
    let reply = reply_to(
        &request,
        "propertyReadings",
        json!({"data": {"p": 3}, "timestamp": "2025-01-20T19:00:00Z"}),
    );
    agent
        .publish(&format!("lmos/{THING}/agent/replies"), &reply, false)
        .await;
    let (topic, got, _) = consumer.recv_json().await;
    assert_eq!(
        (topic, got["correlationID"].as_str()),
        (format!("lmos/{THING}/replies/w1"), Some("w1"))
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn an_agent_that_disconnects_fails_what_waits_on_it() {
    let sidecar = TestSidecar::start().await;
    let agent = sidecar.ws_agent(THING).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(
            THING,
            "readProperty",
            json!({"name": "p", "correlationID": "r"}),
        ))
        .await;
    wait_for_stats(&sidecar, |s| s.pending_requests == 1).await;
    drop(agent);
    let e = consumer.recv().await;
    assert_eq!(
        (
            e["messageType"].as_str(),
            e["status"].as_str(),
            e["correlationID"].as_str()
        ),
        (Some("error"), Some("503"), Some("r"))
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn an_agent_that_does_not_answer_gets_the_consumer_a_timeout_error() {
    let mut config = common::test_config();
    config.requests.timeout_ms = 200;
    let sidecar = TestSidecar::start_with(config).await;
    let mut agent = sidecar.ws_agent(THING).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(
            THING,
            "readProperty",
            json!({"name": "p", "correlationID": "t"}),
        ))
        .await;
    let request = agent_receives(&mut agent, "readProperty").await;
    let e = consumer.recv().await;
    assert_eq!(
        (e["status"].as_str(), e["correlationID"].as_str()),
        (Some("504"), Some("t"))
    );
    assert!(e["detail"].as_str().unwrap().contains("200 ms"));
    // A late answer to a read goes nowhere, and nothing is left behind.
    let mut late = lmos(
        THING,
        "propertyReading",
        json!({"name": "p", "value": 1, "timestamp": "2025-01-20T19:00:00Z"}),
    );
    late["correlationID"] = request["correlationID"].clone();
    agent.send(late).await;
    consumer.assert_nothing_pending().await;
    wait_for_stats(&sidecar, |s| {
        s.pending_requests == 0 && s.remembered_requests == 0
    })
    .await;
    sidecar.stop().await;
}

/// An invocation whose agent stays silent past `requests.action_liveness_ms`
/// gets the consumer a 504, and the result that comes later still reaches
/// it, the invocation's status topic and queryAction.
#[tokio::test]
async fn a_late_result_of_a_silent_invocation_still_arrives() {
    let mut config = common::test_config();
    config.requests.action_liveness_ms = 200;
    let sidecar = TestSidecar::start_with(config).await;
    let status_topic = format!("lmos/{THING}/actions/slow/status/t");
    let Parties {
        mut agent,
        mut consumer,
        mut follower,
    } = sidecar.invocation_parties(THING, &status_topic).await;
    consumer
        .send(lmos(
            THING,
            "invokeAction",
            json!({"action": "slow", "correlationID": "t"}),
        ))
        .await;
    let request = agent_receives(&mut agent, "invokeAction").await;
    let e = consumer.recv().await;
    assert_eq!(
        (e["status"].as_str(), e["correlationID"].as_str()),
        (Some("504"), Some("t"))
    );
    assert!(e["detail"].as_str().unwrap().contains("action_liveness_ms"));
    agent
        .send(status(&request, "slow", "completed", Some(json!("late"))))
        .await;
    let done = consumer.recv().await;
    assert_eq!(
        (
            done["status"].as_str(),
            done["output"].as_str(),
            done["correlationID"].as_str()
        ),
        (Some("completed"), Some("late"), Some("t"))
    );
    let (_, published, _) = follower.recv_json().await;
    assert_eq!(published["status"], "completed");
    consumer
        .send(lmos(
            THING,
            "queryAction",
            json!({"action": "slow", "correlationID": "t"}),
        ))
        .await;
    assert_eq!(consumer.recv().await["status"], "completed");
    wait_for_stats(&sidecar, |s| s.pending_requests == 0).await;
    sidecar.stop().await;
}

#[tokio::test]
async fn a_consumer_that_disconnects_leaves_only_its_invocations_behind() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.ws_agent(THING).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(THING, "subscribeAllEvents", json!({})))
        .await;
    consumer
        .send(lmos(THING, "observeProperty", json!({"name": "p"})))
        .await;
    consumer
        .send(lmos(
            THING,
            "invokeAction",
            json!({"action": "long", "cancelOnDisconnect": true}),
        ))
        .await;
    consumer
        .send(lmos(THING, "invokeAction", json!({"action": "kept"})))
        .await;
    consumer
        .send(lmos(THING, "readProperty", json!({"name": "p"})))
        .await;
    let cancelled = agent_receives(&mut agent, "invokeAction").await;
    agent
        .send(status(&cancelled, "long", "pending", None))
        .await;
    let kept = agent_receives(&mut agent, "invokeAction").await;
    let _read = agent_receives(&mut agent, "readProperty").await;
    wait_for_stats(&sidecar, |s| {
        s.connections == 2 && s.subscriptions == 2 && s.pending_requests == 3
    })
    .await;

    drop(consumer);
    // The invocation that asked for it is cancelled at the agent...
    let cancel = agent_receives(&mut agent, "cancelAction").await;
    assert_eq!(cancel["correlationID"], cancelled["correlationID"]);
    // ...the other one runs on, and nothing else of the consumer stays.
    wait_for_stats(&sidecar, |s| {
        s.connections == 1
            && s.subscriptions == 0
            && s.pending_requests == 1
            && s.remembered_requests == 1
    })
    .await;
    agent.assert_nothing_pending().await;
    agent.send(status(&kept, "kept", "completed", None)).await;
    wait_for_stats(&sidecar, |s| s.pending_requests == 0).await;
    sidecar.stop().await;
}

/// Issue 15: an invocation belongs to the consumer's principal, not to its
/// connection. A phone that loses its connection asks from the next one by
/// correlation ID, gets the status so far, then the rest as it comes;
/// another connection cancels it.
#[tokio::test]
async fn an_invocation_outlives_its_consumers_connection_and_is_found_from_the_next() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.ws_agent(THING).await;
    let mut phone = sidecar.ws().await;
    phone
        .send(lmos(
            THING,
            "invokeAction",
            json!({"action": "plan", "correlationID": "inv-1"}),
        ))
        .await;
    let invoke = agent_receives(&mut agent, "invokeAction").await;
    agent
        .send(status(&invoke, "plan", "running", Some(json!("thinking"))))
        .await;
    let running = phone.recv().await;
    assert_eq!(running["correlationID"], "inv-1");
    assert_eq!(
        running["href"],
        format!("/things/{}/actions/plan/inv-1", THING),
        "where to ask after it: {running}"
    );
    drop(phone);
    agent.assert_nothing_pending().await;
    agent
        .send(status(
            &invoke,
            "plan",
            "running",
            Some(json!("still thinking")),
        ))
        .await;
    agent.barrier().await;

    // Back on a new connection.
    let mut phone = sidecar.ws().await;
    phone
        .send(lmos(
            THING,
            "queryAction",
            json!({"action": "plan", "correlationID": "inv-1"}),
        ))
        .await;
    let so_far = phone.recv().await;
    assert_eq!(
        (so_far["status"].as_str(), so_far["output"].as_str()),
        (Some("running"), Some("still thinking")),
        "{so_far}"
    );
    agent
        .send(status(
            &invoke,
            "plan",
            "completed",
            Some(json!("the plan")),
        ))
        .await;
    let done = phone.recv().await;
    assert_eq!(done["correlationID"], "inv-1", "{done}");
    assert_eq!(
        (done["status"].as_str(), done["output"].as_str()),
        (Some("completed"), Some("the plan"))
    );

    // Another connection cancels an invocation of this one.
    phone
        .send(lmos(
            THING,
            "invokeAction",
            json!({"action": "plan", "correlationID": "inv-2"}),
        ))
        .await;
    let second = agent_receives(&mut agent, "invokeAction").await;
    let mut laptop = sidecar.ws().await;
    laptop
        .send(lmos(
            THING,
            "cancelAction",
            json!({"action": "plan", "correlationID": "inv-2"}),
        ))
        .await;
    let cancel = agent_receives(&mut agent, "cancelAction").await;
    assert_eq!(cancel["correlationID"], second["correlationID"]);
    agent.send(status(&second, "plan", "cancelled", None)).await;
    assert_eq!(phone.recv().await["status"], "cancelled");
    let answered = laptop.recv().await;
    assert_eq!(
        (
            answered["status"].as_str(),
            answered["correlationID"].as_str()
        ),
        (Some("cancelled"), Some("inv-2")),
        "the canceller hears how it ended: {answered}"
    );
    phone.assert_nothing_pending().await;
    laptop.assert_nothing_pending().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn a_second_agent_for_a_hosted_thing_is_refused() {
    let sidecar = TestSidecar::start().await;
    let _first = sidecar.ws_agent(THING).await;
    let url = format!("{}?host={}", sidecar.ws_url(), common::urlencode(THING));
    let err = tokio_tungstenite::connect_async(common::ws_request(&url, Some("lmosprotocol")))
        .await
        .unwrap_err();
    let tokio_tungstenite::tungstenite::Error::Http(response) = err else {
        panic!("{err:?}")
    };
    assert_eq!(response.status(), 409);
    sidecar.stop().await;
}

#[tokio::test]
async fn concurrent_consumers_with_colliding_or_absent_correlation_ids_get_only_their_replies() {
    let sidecar = TestSidecar::start().await;
    // Two agents, each answering a read with "<its thing>/<property name>".
    let things = ["urn:agent:one", "urn:agent:two"];
    let mut agents = Vec::new();
    for thing in things {
        let mut agent = sidecar.ws_agent(thing).await;
        agents.push(tokio::spawn(async move {
            loop {
                let request = agent.recv().await;
                let name = request["name"].as_str().unwrap().to_owned();
                let mut reply = lmos(thing, "propertyReading", json!({"name": name, "value": format!("{thing}/{name}"), "timestamp": "2025-01-20T19:00:00Z"}));
                reply["correlationID"] = request["correlationID"].clone();
                agent.send(reply).await;
            }
        }));
    }
    let mut tasks = Vec::new();
    for c in 0..6 {
        let url = sidecar.ws_url();
        tasks.push(tokio::spawn(async move {
            let mut consumer = WsClient::connect(&url).await;
            for i in 0..20 {
                let thing = things[(c + i) % 2];
                let name = format!("c{c}-p{i}");
                // Half collide on one correlation ID, half send none; all
                // are in flight at once across consumers.
                let members = if i % 2 == 0 {
                    json!({"name": name, "correlationID": "same-for-everyone"})
                } else {
                    json!({"name": name})
                };
                let read = lmos(thing, "readProperty", members);
                consumer.send(read.clone()).await;
                let reply = consumer.recv().await;
                assert_eq!(
                    reply["value"],
                    format!("{thing}/{name}"),
                    "a reply crossed between consumers or agents"
                );
                let expected = read.get("correlationID").unwrap_or(&read["messageID"]);
                assert_eq!(&reply["correlationID"], expected);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for a in agents {
        a.abort();
    }
    wait_for_stats(&sidecar, |s| s.pending_requests == 0).await;
    sidecar.stop().await;
}

#[tokio::test]
async fn shutdown_answers_the_requests_still_waiting_then_closes() {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    use tokio_tungstenite::tungstenite::Message as WsMessage;

    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.ws_agent(THING).await;
    let mut consumer = sidecar.ws().await;
    let mut mqtt_consumer = sidecar.mqtt("mqtt-consumer").await;
    mqtt_consumer
        .subscribe(&format!("lmos/{THING}/replies/mq"))
        .await;
    consumer
        .send(lmos(
            THING,
            "invokeAction",
            json!({"action": "long", "correlationID": "ws"}),
        ))
        .await;
    let read = lmos(
        THING,
        "readProperty",
        json!({"name": "p", "correlationID": "mq"}),
    );
    mqtt_consumer
        .publish(&format!("lmos/{THING}/requests/readProperty"), &read, false)
        .await;
    // From two consumers on two transports: in either order.
    let mut received = vec![
        agent.recv().await["messageType"].clone(),
        agent.recv().await["messageType"].clone(),
    ];
    received.sort_by_key(|v| v.to_string());
    assert_eq!(received, [json!("invokeAction"), json!("readProperty")]);

    let stopping = tokio::spawn(sidecar.stop());
    let error = consumer.recv().await;
    assert_eq!(
        (error["status"].as_str(), error["correlationID"].as_str()),
        (Some("503"), Some("ws"))
    );
    assert!(
        error["detail"].as_str().unwrap().contains("shutting down"),
        "{error}"
    );
    let close = loop {
        match tokio::time::timeout(common::WAIT, consumer.stream.next())
            .await
            .expect("closed in time")
        {
            Some(Ok(WsMessage::Close(frame))) => break frame,
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(close.unwrap().code, CloseCode::Away);
    let (_, mqtt_error, _) = mqtt_consumer.recv_json().await;
    assert_eq!(
        (
            mqtt_error["status"].as_str(),
            mqtt_error["correlationID"].as_str()
        ),
        (Some("503"), Some("mq"))
    );
    stopping.await.unwrap();
}
