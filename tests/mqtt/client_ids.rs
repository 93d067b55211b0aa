//! `mqtt.max_client_id_length` (issue 43): a kept session writes its
//! client ID into the key of every publication queued for it, so a longer
//! ID than the bound is refused at CONNECT, in each version's own words.
//! So is an ID with a character the embedded broker reserves (`/`, `+`,
//! `#`, `$`), which was answered "server unavailable" before.

use lmos_testkit as common;

use common::mqtt5::{self, Props};
use common::raw_mqtt::Client;
use common::*;
use rumqttc::ConnectReturnCode;

const REASON_STRING: u8 = 0x1F;

/// `lmos_sidecar_limit_hits_total{transport="mqtt"}` for `limit`.
async fn mqtt_limit_hits(sidecar: &TestSidecar, limit: &str) -> u64 {
    let metrics = http(sidecar.http, "GET", "/metrics", None, b"").await.body;
    let prefix = format!(r#"lmos_sidecar_limit_hits_total{{limit="{limit}",transport="mqtt"}} "#);
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.parse().unwrap())
}

#[tokio::test]
async fn a_client_id_one_byte_past_the_bound_is_refused_and_one_at_it_connects() {
    // The default bound: 256 bytes.
    let sidecar = TestSidecar::start().await;
    let at = "a".repeat(256);
    let over = "b".repeat(257);

    // MQTT 3.1.1: identifier rejected (return code 2).
    let id = over.clone();
    let refused = mqtt_refusal(sidecar.mqtt, move |o| {
        o.set_client_id(id);
    })
    .await;
    assert_eq!(refused, Some(ConnectReturnCode::BadClientId));
    let id = at.clone();
    let accepted = mqtt_refusal(sidecar.mqtt, move |o| {
        o.set_client_id(id);
    });
    assert_eq!(accepted.await, None);

    // MQTT 5: 0x85 Client Identifier not valid, saying which key.
    let mut client = Client::open(sidecar.mqtt5).await;
    client
        .send(&mqtt5::connect(&over, true, &Props::new()))
        .await;
    let ack = mqtt5::connack(&client.recv().await.expect("a CONNACK"));
    assert_eq!(ack.reason, 0x85, "{ack:?}");
    let why = ack.props.text_of(REASON_STRING).unwrap_or_default();
    assert!(why.contains("mqtt.max_client_id_length"), "{why}");
    assert!(client.recv().await.is_none(), "and closed");
    mqtt5::connect5(sidecar.mqtt5, &at, true, &Props::new()).await;

    assert_eq!(mqtt_limit_hits(&sidecar, "max_client_id_length").await, 2);
}

#[tokio::test]
async fn a_client_id_with_a_reserved_character_is_refused_in_clear_words() {
    let sidecar = TestSidecar::start().await;
    for id in ["app/device-1", "a+b", "a#b", "$sys-like"] {
        let name = id.to_owned();
        let refused = mqtt_refusal(sidecar.mqtt, move |o| {
            o.set_client_id(name);
        })
        .await;
        assert_eq!(refused, Some(ConnectReturnCode::BadClientId), "{id}");
        let mut client = Client::open(sidecar.mqtt5).await;
        client.send(&mqtt5::connect(id, true, &Props::new())).await;
        let ack = mqtt5::connack(&client.recv().await.expect("a CONNACK"));
        assert_eq!(ack.reason, 0x85, "{id}: {ack:?}");
        let why = ack.props.text_of(REASON_STRING).unwrap_or_default();
        assert!(why.contains("may not contain"), "{why}");
    }
    // Other characters are anyone's: the broker takes them.
    let fine = mqtt_refusal(sidecar.mqtt, |o| {
        o.set_client_id("app:device-1.é_ü@x".into());
    });
    assert_eq!(fine.await, None);
}

#[tokio::test]
async fn kept_sessions_are_bounded_in_all_whoever_asks() {
    // All anonymous (one principal, allowed 1000): the total bound refuses
    // the third.
    let mut c = test_config();
    c.mqtt.max_kept_sessions = 2;
    let sidecar = TestSidecar::start_with(c).await;
    for id in ["k1", "k2"] {
        let kept = mqtt_refusal(sidecar.mqtt, |o| {
            o.set_client_id(id.into());
            o.set_clean_session(false);
        });
        assert_eq!(kept.await, None, "{id}");
    }
    let third = mqtt_refusal(sidecar.mqtt, |o| {
        o.set_client_id("k3".into());
        o.set_clean_session(false);
    });
    assert_eq!(third.await, Some(ConnectReturnCode::ServiceUnavailable));
    let mut client = Client::open(sidecar.mqtt5).await;
    let props = Props::new().int(mqtt5::SESSION_EXPIRY, 60);
    client.send(&mqtt5::connect("k4", true, &props)).await;
    let ack = mqtt5::connack(&client.recv().await.expect("a CONNACK"));
    assert_eq!(ack.reason, 0x97, "quota exceeded: {ack:?}");
    assert_eq!(mqtt_limit_hits(&sidecar, "max_kept_sessions").await, 2);
}
