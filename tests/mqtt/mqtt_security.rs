//! Authentication and per-Thing authorization on the sidecar's MQTT
//! listeners, with the sidecar's own rules, tried by clients that want more
//! than they are granted.

use lmos_testkit as common;

use common::*;
use lmos_sidecar::auth::credentials::hash_password;
use lmos_sidecar::config::{Grants, PrincipalConfig};
use rumqttc::{ConnectReturnCode, MqttOptions, SubscribeReasonCode};
use serde_json::json;

const THING: &str = "urn:a";

fn principal(name: &str, host: &[&str], consume: &[&str], operate: &[&str]) -> PrincipalConfig {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
    PrincipalConfig {
        name: name.into(),
        password_hash: hash_password(&format!("{name}-pw")),
        host: v(host),
        consume: v(consume),
        operate: v(operate),
        ..PrincipalConfig::default()
    }
}

async fn secured() -> TestSidecar {
    let mut c = test_config();
    c.mqtt.authentication = true;
    c.auth.anonymous = Grants::default();
    c.auth.principals = vec![
        principal("agent", &[THING], &[], &[]),
        principal("reader", &[], &[THING], &[]),
        principal("operator", &[], &[THING], &[THING]),
    ];
    TestSidecar::start_with(c).await
}

async fn refusal(sidecar: &TestSidecar, credentials: Option<(&str, &str)>) -> ConnectReturnCode {
    let refused = connects(sidecar, |o| {
        o.set_client_id("refused".into());
        if let Some((u, p)) = credentials {
            o.set_credentials(u, p);
        }
    });
    refused.await.expect("refused")
}

/// The `agent` principal connects over MQTT, announces itself (retained,
/// with a last will saying offline) and serves its requests: all of which
/// its `host` grant allows.
async fn agent(sidecar: &TestSidecar) -> MqttClient {
    let credentials = Some(("agent", "agent-pw"));
    let agent = mqtt_agent(sidecar.mqtt, "agent", THING, credentials).await;
    wait_for_stats(sidecar, |s| s.hosted_things == 1).await;
    agent
}

#[tokio::test]
async fn mqtt_clients_get_only_what_their_principal_is_granted() {
    let sidecar = secured().await;
    assert_eq!(
        refusal(&sidecar, None).await,
        ConnectReturnCode::NotAuthorized
    );
    assert_eq!(
        refusal(&sidecar, Some(("reader", "guess"))).await,
        ConnectReturnCode::BadUserNamePassword
    );

    // The agent announces itself and serves its requests.
    let mut agent = agent(&sidecar).await;

    // The reader may follow the Thing, not its requests, not every Thing.
    let mut reader =
        MqttClient::connect_as(sidecar.mqtt, "reader", "reader", "reader-pw", None).await;
    let codes = reader
        .subscribe_codes(&[
            &format!("lmos/{THING}/events/+"),
            &format!("lmos/{THING}/agent/requests/+"),
            "lmos/+/events/+",
        ])
        .await;
    assert_eq!(
        codes,
        vec![
            SubscribeReasonCode::Success(rumqttc::QoS::AtLeastOnce),
            SubscribeReasonCode::Failure,
            SubscribeReasonCode::Failure
        ]
    );

    // A fake event and a forbidden invocation are acknowledged (MQTT 3.1.1
    // has no negative PUBACK) but go nowhere.
    reader.publish_event(THING, "alarm", json!("fake")).await;
    let invoke = |who: &str| {
        lmos(
            THING,
            "invokeAction",
            json!({"action": "go", "input": {"who": who}, "correlationID": who}),
        )
    };
    reader
        .publish(
            &format!("lmos/{THING}/requests/invokeAction"),
            &invoke("reader"),
            false,
        )
        .await;
    let mut operator =
        MqttClient::connect_as(sidecar.mqtt, "operator", "operator", "operator-pw", None).await;
    operator
        .publish(
            &format!("lmos/{THING}/requests/invokeAction"),
            &invoke("operator"),
            false,
        )
        .await;
    let (_, forwarded, _) = agent.recv_json().await;
    assert_eq!(forwarded["input"]["who"], "operator", "{forwarded}");
    agent.publish_event(THING, "alarm", json!("real")).await;
    let (_, delivered, _) = reader.recv_json().await;
    assert_eq!(
        delivered["data"], "real",
        "the fake event was delivered: {delivered}"
    );

    let text = http(sidecar.http, "GET", "/metrics", None, b"").await.body;
    for series in [
        r#"lmos_sidecar_auth_failures_total{reason="missing",transport="mqtt"} 1"#,
        r#"lmos_sidecar_auth_failures_total{reason="invalid",transport="mqtt"} 1"#,
        r#"lmos_sidecar_denied_total{access="host",transport="mqtt"} 2"#,
        r#"lmos_sidecar_denied_total{access="consume",transport="mqtt"} 1"#,
        r#"lmos_sidecar_denied_total{access="operate",transport="mqtt"} 1"#,
    ] {
        assert!(text.contains(series), "{series} in {text}");
    }
    sidecar.stop().await;
}

#[tokio::test]
async fn a_consumer_cannot_answer_for_a_thing_it_does_not_host() {
    let sidecar = secured().await;
    let mut agent = agent(&sidecar).await;

    // The operator asks over the WebSocket-free path: MQTT with a reply topic.
    let mut operator =
        MqttClient::connect_as(sidecar.mqtt, "operator", "operator", "operator-pw", None).await;
    operator
        .subscribe(&format!("lmos/{THING}/replies/op-1"))
        .await;
    let read = lmos(
        THING,
        "readProperty",
        json!({"name": "p", "correlationID": "op-1"}),
    );
    operator
        .publish(&format!("lmos/{THING}/requests/readProperty"), &read, false)
        .await;
    let (_, request, _) = agent.recv_json().await;

    // Someone else tries to answer first, on the agent's reply topic and
    // straight on the consumer's: both are dropped at the guard.
    let mut reader =
        MqttClient::connect_as(sidecar.mqtt, "reader", "reader", "reader-pw", None).await;
    let forged = json!({"thingID": THING, "messageID": "forged", "messageType": "propertyReading", "name": "p", "value": "forged", "timestamp": "2025-01-01T00:00:00Z", "correlationID": request["correlationID"]});
    reader
        .publish(&format!("lmos/{THING}/agent/replies"), &forged, false)
        .await;
    let forged_direct = json!({"thingID": THING, "messageID": "forged2", "messageType": "propertyReading", "name": "p", "value": "forged", "timestamp": "2025-01-01T00:00:00Z", "correlationID": "op-1"});
    reader
        .publish(&format!("lmos/{THING}/replies/op-1"), &forged_direct, false)
        .await;

    let genuine = json!({"thingID": THING, "messageID": "genuine", "messageType": "propertyReading", "name": "p", "value": "genuine", "timestamp": "2025-01-01T00:00:00Z", "correlationID": request["correlationID"]});
    agent
        .publish(&format!("lmos/{THING}/agent/replies"), &genuine, false)
        .await;
    let (_, reply, _) = operator.recv_json().await;
    assert_eq!(reply["value"], "genuine", "{reply}");
    sidecar.stop().await;
}

/// The sidecar publishes replies itself, so a reply topic inside the LMOS
/// subtree would be a way around the guard: it is refused, and the error
/// goes to the default reply topic.
#[tokio::test]
async fn a_reply_topic_inside_the_lmos_topics_is_refused() {
    let sidecar = TestSidecar::start().await;
    let mut consumer = sidecar.mqtt("reply-to-abuser").await;
    consumer.subscribe("lmos/urn:victim/events/+").await;
    consumer.subscribe(&format!("lmos/{THING}/replies/+")).await;
    let read = lmos(
        THING,
        "readProperty",
        json!({"name": "p", "correlationID": "c1", "replyTo": "lmos/urn:victim/events/alarm"}),
    );
    consumer
        .publish(&format!("lmos/{THING}/requests/readProperty"), &read, false)
        .await;
    let (topic, reply, _) = consumer.recv_json().await;
    assert_eq!(topic, format!("lmos/{THING}/replies/c1"), "{reply}");
    assert_eq!(reply["messageType"], "error");
    assert_eq!(reply["status"], "400");
    assert!(
        reply["detail"]
            .as_str()
            .unwrap()
            .contains("inside the LMOS topics"),
        "{reply}"
    );
    sidecar.stop().await;
}

/// Nothing within `wait` on this client.
async fn silent(client: &mut MqttClient, wait: std::time::Duration) -> bool {
    tokio::time::timeout(wait, client.recv()).await.is_err()
}

/// A malformed request cannot aim its error reply at another principal's
/// Thing, neither with `replyTo` nor with an MQTT 5 Response Topic: the
/// error goes to the requester's own reply topic. (Before, the error's
/// `"status":"400"` published on `agent/status` read as "offline", and the
/// victim's agent stayed unreachable.)
#[tokio::test]
async fn a_malformed_request_cannot_aim_its_error_at_another_things_topics() {
    let mut c = test_config();
    c.mqtt.authentication = true;
    c.auth.anonymous = Grants::default();
    c.auth.principals = vec![
        principal("agent", &[THING], &[], &[]),
        principal("watcher", &[], &[THING], &[]),
        principal("mallory", &["urn:m"], &["urn:m"], &["urn:m"]),
    ];
    let sidecar = TestSidecar::start_with(c).await;
    let _agent = agent(&sidecar).await;
    let mut watcher =
        MqttClient::connect_as(sidecar.mqtt, "watcher", "watcher", "watcher-pw", None).await;
    for filter in [
        "agent/status",
        "events/+",
        "td",
        "properties/+",
        "actions/#",
        "replies/theirs",
    ] {
        watcher.subscribe(&format!("lmos/{THING}/{filter}")).await;
    }
    let (topic, status, retained) = watcher.recv_json().await;
    assert_eq!(topic, format!("lmos/{THING}/agent/status"));
    assert!(retained && status["status"] == "online", "{status}");

    let mut mallory =
        MqttClient::connect_as(sidecar.mqtt, "mallory", "mallory", "mallory-pw", None).await;
    mallory.subscribe("lmos/urn:m/replies/+").await;
    let targets = [
        format!("lmos/{THING}/agent/status"),
        format!("lmos/{THING}/events/alarm"),
        format!("lmos/{THING}/td"),
        format!("lmos/{THING}/properties/p"),
        format!("lmos/{THING}/actions/plan/status/1"),
        format!("lmos/{THING}/replies/theirs"),
    ];
    for (i, target) in targets.iter().enumerate() {
        // An invokeAction without `action`: refused as malformed.
        let malformed = serde_json::json!({
            "thingID": "urn:m", "messageID": uuid::Uuid::new_v4().to_string(),
            "messageType": "invokeAction", "correlationID": format!("c{i}"),
            "replyTo": target,
        });
        mallory
            .publish("lmos/urn:m/requests/invokeAction", &malformed, false)
            .await;
        let (topic, reply, _) = mallory.recv_json().await;
        assert_eq!(topic, format!("lmos/urn:m/replies/c{i}"), "{reply}");
        assert_eq!(reply["messageType"], "error", "{reply}");
        assert_eq!(reply["correlationID"], format!("c{i}"), "{reply}");
    }

    // The same with an MQTT 5 Response Topic.
    use rumqttc::v5::mqttbytes::v5::PublishProperties;
    let mut o = rumqttc::v5::MqttOptions::new("mallory5", "127.0.0.1", sidecar.mqtt.port());
    o.set_credentials("mallory", "mallory-pw");
    let (client5, mut eventloop) = rumqttc::v5::AsyncClient::new(o, 10);
    tokio::spawn(async move { while eventloop.poll().await.is_ok() {} });
    let malformed = serde_json::json!({
        "thingID": "urn:m", "messageID": "m5", "messageType": "invokeAction",
        "correlationID": "c5",
    });
    let properties = PublishProperties {
        response_topic: Some(format!("lmos/{THING}/agent/status")),
        correlation_data: Some(bytes::Bytes::from_static(b"x")),
        ..PublishProperties::default()
    };
    client5
        .publish_with_properties(
            "lmos/urn:m/requests/invokeAction",
            rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
            false,
            malformed.to_string(),
            properties,
        )
        .await
        .unwrap();
    let (topic, reply, _) = mallory.recv_json().await;
    assert_eq!(topic, "lmos/urn:m/replies/c5", "{reply}");

    assert!(
        silent(&mut watcher, std::time::Duration::from_millis(300)).await,
        "nothing reached the victim's topics"
    );
    wait_for_stats(&sidecar, |s| s.hosted_things == 1).await;
    let metrics = http(sidecar.http, "GET", "/metrics", None, b"").await.body;
    assert!(
        metrics.contains(r#"lmos_sidecar_dropped_messages_total{reason="reply_topic_refused"} 7"#),
        "{metrics}"
    );
    sidecar.stop().await;
}

/// MQTT limit hits are counted like the WebSocket ones.
#[tokio::test]
async fn mqtt_limit_hits_are_counted() {
    let mut c = test_config();
    c.mqtt.max_subscriptions = 1;
    let sidecar = TestSidecar::start_with(c).await;
    let mut client = sidecar.mqtt("limited").await;
    let codes = client.subscribe_codes(&["a/1", "a/2"]).await;
    assert_eq!(
        codes,
        vec![
            SubscribeReasonCode::Success(rumqttc::QoS::AtLeastOnce),
            SubscribeReasonCode::Failure
        ]
    );
    let text = http(sidecar.http, "GET", "/metrics", None, b"").await.body;
    let series = r#"lmos_sidecar_limit_hits_total{limit="max_subscriptions",transport="mqtt"} 1"#;
    assert!(text.contains(series), "{text}");
    sidecar.stop().await;
}

/// Issue 15: over MQTT too, an invocation is its principal's. The guard
/// tells the router who published a request; another MQTT connection of
/// the same principal, with another reply topic, finds the invocation by
/// its correlation ID, and another principal's does not.
#[tokio::test]
async fn an_invocation_made_over_mqtt_is_found_by_its_principal_only() {
    let mut c = test_config();
    c.mqtt.authentication = true;
    c.auth.anonymous = Grants::default();
    c.auth.principals = vec![
        principal("agent", &[THING], &[], &[]),
        principal("operator", &[], &[THING], &[THING]),
        principal("other", &[], &[THING], &[THING]),
    ];
    let sidecar = TestSidecar::start_with(c).await;
    let mut agent = agent(&sidecar).await;
    let mut phone =
        MqttClient::connect_as(sidecar.mqtt, "phone", "operator", "operator-pw", None).await;
    phone
        .subscribe(&format!("lmos/{THING}/replies/op-inv"))
        .await;
    let invoke = lmos(
        THING,
        "invokeAction",
        json!({"action": "plan", "correlationID": "op-inv"}),
    );
    phone
        .publish(
            &format!("lmos/{THING}/requests/invokeAction"),
            &invoke,
            false,
        )
        .await;
    let (_, forwarded, _) = agent.recv_json().await;
    let mut running = lmos(
        THING,
        "actionStatus",
        json!({"action": "plan", "status": "running", "output": "so far"}),
    );
    running["correlationID"] = forwarded["correlationID"].clone();
    agent
        .publish(&format!("lmos/{THING}/agent/replies"), &running, false)
        .await;
    let (topic, status, _) = phone.recv_json().await;
    assert_eq!(topic, format!("lmos/{THING}/replies/op-inv"));
    assert_eq!(status["status"], "running", "{status}");

    let query = |reply_to: &str| {
        lmos(
            THING,
            "queryAction",
            json!({"action": "plan", "correlationID": "op-inv", "replyTo": reply_to}),
        )
    };
    let mut laptop =
        MqttClient::connect_as(sidecar.mqtt, "laptop", "operator", "operator-pw", None).await;
    let laptop_topic = format!("lmos/{THING}/replies/laptop");
    laptop.subscribe(&laptop_topic).await;
    laptop
        .publish(
            &format!("lmos/{THING}/requests/queryAction"),
            &query(&laptop_topic),
            false,
        )
        .await;
    let (topic, found, _) = laptop.recv_json().await;
    assert_eq!(topic, laptop_topic);
    assert_eq!(
        (found["status"].as_str(), found["output"].as_str()),
        (Some("running"), Some("so far")),
        "{found}"
    );

    let mut other = MqttClient::connect_as(sidecar.mqtt, "other", "other", "other-pw", None).await;
    let other_topic = format!("lmos/{THING}/replies/other");
    other.subscribe(&other_topic).await;
    other
        .publish(
            &format!("lmos/{THING}/requests/queryAction"),
            &query(&other_topic),
            false,
        )
        .await;
    let (_, refused, _) = other.recv_json().await;
    assert_eq!(
        (refused["messageType"].as_str(), refused["status"].as_str()),
        (Some("error"), Some("404")),
        "{refused}"
    );
    sidecar.stop().await;
}

/// A CONNECT's refusal code, or `None` when it is accepted.
async fn connects(
    sidecar: &TestSidecar,
    configure: impl FnOnce(&mut MqttOptions),
) -> Option<ConnectReturnCode> {
    lmos_testkit::mqtt_refusal(sidecar.mqtt, configure).await
}

#[tokio::test]
async fn a_principal_cannot_take_over_resume_or_end_anothers_session() {
    let sidecar = secured().await;
    let as_reader = |o: &mut MqttOptions| {
        o.set_credentials("reader", "reader-pw");
        o.set_clean_session(false);
    };
    let mut reader = MqttClient::connect_with(sidecar.mqtt, "reader-1", as_reader).await;
    reader.subscribe(&format!("lmos/{THING}/events/+")).await;
    // Another principal naming the reader's client ID, kept or clean, is
    // refused (3.1.1: identifier rejected), and the reader stays connected.
    for clean in [false, true] {
        let code = connects(&sidecar, |o| {
            o.set_client_id("reader-1".into());
            o.set_credentials("operator", "operator-pw");
            o.set_clean_session(clean);
        })
        .await;
        assert_eq!(code, Some(ConnectReturnCode::BadClientId), "clean {clean}");
    }
    let mut agent = agent(&sidecar).await;
    let topic = format!("lmos/{THING}/events/alarm");
    agent.publish(&topic, &json!({"level": 1}), false).await;
    let got = tokio::time::timeout(WAIT, reader.publishes.recv()).await;
    assert!(matches!(got, Ok(Some(_))), "the reader was not cut off");
    // Its session kept while away: still not another's to resume.
    reader.client.disconnect().await.unwrap();
    drop(reader);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    agent.publish(&topic, &json!({"level": 2}), false).await;
    let code = connects(&sidecar, |o| {
        o.set_client_id("reader-1".into());
        o.set_credentials("operator", "operator-pw");
        o.set_clean_session(false);
    })
    .await;
    assert_eq!(code, Some(ConnectReturnCode::BadClientId));
    let mut reader = MqttClient::connect_with(sidecar.mqtt, "reader-1", as_reader).await;
    assert!(reader.session_present);
    let missed = tokio::time::timeout(WAIT, reader.publishes.recv()).await;
    let missed = missed.expect("what it missed").expect("connected");
    assert_eq!(missed.payload, json!({"level": 2}).to_string());
    let metrics = http(sidecar.http, "GET", "/metrics", None, b"").await;
    assert!(
        metrics
            .body
            .contains("lmos_sidecar_denied_total{access=\"session\",transport=\"mqtt\"} 3"),
        "{}",
        metrics.body
    );
}

#[tokio::test]
async fn kept_sessions_are_bounded_per_principal() {
    let mut c = test_config();
    c.mqtt.max_kept_sessions_per_principal = 2;
    let sidecar = TestSidecar::start_with(c).await;
    for id in ["k1", "k2"] {
        let code = connects(&sidecar, |o| {
            o.set_client_id(id.into());
            o.set_clean_session(false);
        })
        .await;
        assert_eq!(code, None, "{id}");
    }
    // One more kept session: refused (3.1.1: server unavailable; MQTT 5:
    // quota exceeded). A clean one, or resuming a kept one, is fine.
    let third = |clean: bool| {
        move |o: &mut MqttOptions| {
            o.set_client_id("k3".into());
            o.set_clean_session(clean);
        }
    };
    assert_eq!(
        connects(&sidecar, third(false)).await,
        Some(ConnectReturnCode::ServiceUnavailable)
    );
    assert_eq!(connects(&sidecar, third(true)).await, None);
    let again = connects(&sidecar, |o| {
        o.set_client_id("k1".into());
        o.set_clean_session(false);
    });
    assert_eq!(again.await, None);
    let mut o = rumqttc::v5::MqttOptions::new("k5", "127.0.0.1", sidecar.mqtt.port());
    o.set_clean_start(false);
    o.set_session_expiry_interval(Some(60));
    let (_client, mut events) = rumqttc::v5::AsyncClient::new(o, 10);
    let refused = tokio::time::timeout(WAIT, async {
        loop {
            match events.poll().await {
                Err(rumqttc::v5::ConnectionError::ConnectionRefused(code)) => return code,
                Ok(rumqttc::v5::Event::Incoming(rumqttc::v5::mqttbytes::v5::Packet::ConnAck(
                    a,
                ))) => {
                    panic!("accepted: {a:?}")
                }
                Ok(_) => continue,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .expect("an answer in time");
    assert_eq!(
        refused,
        rumqttc::v5::mqttbytes::v5::ConnectReturnCode::QuotaExceeded
    );
    let metrics = http(sidecar.http, "GET", "/metrics", None, b"").await;
    assert!(
        metrics.body.contains(
            "lmos_sidecar_limit_hits_total{limit=\"max_kept_sessions\",transport=\"mqtt\"} 2"
        ),
        "{}",
        metrics.body
    );
}
