//! What a principal can make the sidecar keep on disk stays bounded across
//! a restart (issue 43): MQTT 5 user properties count toward a filter's
//! buffer as payload bytes do (rumqttd patch 32), and a principal at its
//! retained-message quota is still at it when the sidecar comes back.

use lmos_testkit as common;

use common::mqtt5::{self, Props};
use common::process::{on_directory, DataDir, Started};
use common::raw_mqtt::{self, Client};
use common::MqttClient;
use lmos_testkit::sidecar_command as sidecar;

/// A sidecar metric's value, 0 when absent.
async fn metric(http: std::net::SocketAddr, line: &str) -> u64 {
    let metrics = common::http(http, "GET", "/metrics", None, b"").await;
    metrics
        .body
        .lines()
        .find_map(|l| l.strip_prefix(line))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test]
async fn user_properties_fill_a_filter_buffer_as_payload_does() {
    // Each filter buffers two segments of 64 KiB. 300 publications with
    // an empty payload and 64 kB of user properties each: a session away
    // must find only the last few (what memory held) after a restart, and
    // the store must not have kept the rest.
    let dir = DataDir::new("properties");
    let small = |cmd: &mut std::process::Command| {
        cmd.env("LMOS_SIDECAR_MQTT__MAX_PAYLOAD_SIZE", "65536")
            .env("LMOS_SIDECAR_MQTT__SEGMENT_SIZE", "65536")
            .env("LMOS_SIDECAR_MQTT__SEGMENT_COUNT", "2");
    };
    let mut cmd = sidecar!();
    small(on_directory(&mut cmd, &dir.0));
    let first = Started::start(&mut cmd);
    let mut subscriber = MqttClient::connect_kept(first.mqtt, "away").await;
    subscriber.subscribe("flood/#").await;
    subscriber.client.disconnect().await.unwrap();
    drop(subscriber);
    let value = "x".repeat(4_000);
    let props = (0..16).fold(Props::new(), |p, i| p.user(&format!("k{i}"), &value));
    assert_eq!(props.users().len(), 16);
    let (mut publisher, _) = mqtt5::connect5(first.mqtt5, "flooder", true, &Props::new()).await;
    for pkid in 1..=300 {
        let publish = mqtt5::publish("flood/x", 1, false, pkid, &props, b"");
        publisher.publish_acked(&publish).await;
    }
    first.terminate();
    let store = std::fs::metadata(dir.0.join("store.redb")).unwrap().len();

    let mut cmd = sidecar!();
    small(on_directory(&mut cmd, &dir.0));
    let second = Started::start(&mut cmd);
    let line = "lmos_sidecar_store{what=\"recovered_queued\"} ";
    let recovered = metric(second.http, line).await;
    assert!(
        (1..10).contains(&recovered),
        "only what two 64 KiB segments hold is kept: {recovered}"
    );
    // 300 × 64 kB is 19 MB.
    assert!(store < 8 << 20, "the store stayed small: {store} bytes");
    second.terminate();
}

/// bob's retained publication at QoS 1 on `topic`: the PUBACK's reason.
async fn retain(c: &mut Client, pkid: u16, topic: &str, payload: &[u8]) -> u8 {
    c.send(&mqtt5::publish(
        topic,
        1,
        true,
        pkid,
        &Props::new(),
        payload,
    ))
    .await;
    let ack = c.recv().await.expect("PUBACK");
    mqtt5::ack_of(&ack).1
}

async fn connect(mqtt5: std::net::SocketAddr, user: &str) -> Client {
    let mut c = Client::open(mqtt5).await;
    let pw = format!("{user}-pw");
    c.send(&raw_mqtt::connect_will(5, user, Some((user, &pw)), None))
        .await;
    let ack = mqtt5::connack(&c.recv().await.expect("CONNACK"));
    assert_eq!(ack.reason, 0, "{ack:?}");
    c
}

#[tokio::test]
async fn a_principal_at_its_retained_bound_is_still_at_it_after_a_restart() {
    let dir = DataDir::new("retained-owners");
    let principal = |name: &str| crate::principal_toml(name, "");
    let toml = format!(
        "[mqtt]\nauthentication = true\n\n[quotas]\nretained = 2\n\n{}{}",
        principal("bob"),
        principal("alice")
    );
    let start = crate::configured(&dir, &toml);
    let first = start();
    let mut bob = connect(first.mqtt5, "bob").await;
    assert_eq!(retain(&mut bob, 1, "junk/1", b"1").await, 0);
    assert_eq!(retain(&mut bob, 2, "junk/2", b"2").await, 0);
    assert_eq!(retain(&mut bob, 3, "junk/3", b"3").await, 0x97);
    // Acknowledged is on disk: a crash loses nothing of it.
    first.kill();

    let second = start();
    let mut bob = connect(second.mqtt5, "bob").await;
    assert_eq!(
        retain(&mut bob, 1, "junk/3", b"3").await,
        0x97,
        "still at its bound"
    );
    let mut alice = connect(second.mqtt5, "alice").await;
    assert_eq!(retain(&mut alice, 1, "junk/a", b"a").await, 0);
    // Deleting one gives room back.
    assert_eq!(retain(&mut bob, 2, "junk/1", b"").await, 0);
    assert_eq!(retain(&mut bob, 3, "junk/3", b"3").await, 0);
    second.terminate();
}
