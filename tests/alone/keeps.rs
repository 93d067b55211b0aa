//! What an MQTT principal can make the broker keep, measured in the
//! process's resident memory (issue 43; the test process hosts the
//! sidecar): retained messages stop at the principal's quota, and MQTT 5
//! user properties fill a filter's log as payload bytes do (rumqttd patch
//! 32), where before both grew with every publication.

use crate::rss_mib;
use lmos_testkit as common;

use common::mqtt5::{self, Props};
use common::raw_mqtt::{self, Client};
use common::{MqttClient, TestSidecar};
use lmos_sidecar::auth::credentials::hash_password;
use lmos_sidecar::config::{Grants, PrincipalConfig};

const MIB: usize = 1024 * 1024;

fn principal(name: &str) -> PrincipalConfig {
    PrincipalConfig {
        name: name.into(),
        password_hash: hash_password(&format!("{name}-pw")),
        ..PrincipalConfig::default()
    }
}

async fn connect(addr: std::net::SocketAddr, user: &str) -> Client {
    let mut c = Client::open(addr).await;
    let pw = format!("{user}-pw");
    c.send(&raw_mqtt::connect_will(5, user, Some((user, &pw)), None))
        .await;
    let ack = mqtt5::connack(&c.recv().await.expect("CONNACK"));
    assert_eq!(ack.reason, 0, "{ack:?}");
    c
}

/// A QoS 1 publication; the PUBACK's reason code.
async fn publish(
    c: &mut Client,
    pkid: u16,
    topic: &str,
    retain: bool,
    props: &Props,
    payload: &[u8],
) -> u8 {
    c.send(&mqtt5::publish(topic, 1, retain, pkid, props, payload))
        .await;
    let ack = c.recv().await.expect("PUBACK");
    mqtt5::ack_of(&ack).1
}

#[tokio::test]
async fn retained_messages_stop_at_the_principals_quota_in_memory() {
    let _turn = common::alone().await;
    let mut config = common::test_config();
    config.mqtt.authentication = true;
    config.auth.anonymous = Grants::default();
    config.auth.principals = vec![principal("bob"), principal("alice")];
    config.quotas.retained_bytes = 8 * MIB as u64;
    let sidecar = TestSidecar::start_with(config).await;
    let mut bob = connect(sidecar.mqtt5, "bob").await;
    let payload = vec![b'r'; MIB - 1024];
    let before = rss_mib();
    let mut refused = 0;
    for i in 0..150u16 {
        let topic = format!("junk/{i}");
        match publish(&mut bob, i + 1, &topic, true, &Props::new(), &payload).await {
            0 => {}
            0x97 => refused += 1,
            other => panic!("{other:#x}"),
        }
    }
    let after = rss_mib();
    eprintln!("retained: 150 MiB offered, {refused} refused; VmRSS {before:.0} -> {after:.0} MiB");
    assert!(refused >= 140, "{refused}");
    assert!(
        after - before < 48.0,
        "150 retained MiB against an 8 MiB quota: VmRSS {before:.0} -> {after:.0} MiB"
    );
    // Another principal still retains.
    let mut alice = connect(sidecar.mqtt5, "alice").await;
    assert_eq!(
        publish(&mut alice, 1, "junk/a", true, &Props::new(), b"a").await,
        0
    );
}

#[tokio::test]
async fn user_properties_stop_at_the_per_filter_limit_in_memory() {
    let _turn = common::alone().await;
    let mut config = common::test_config();
    config.mqtt.segment_size = MIB;
    config.mqtt.segment_count = 2;
    let sidecar = TestSidecar::start_with(config).await;
    // A session away: its filter's log keeps what was published for it.
    let mut away = MqttClient::connect_kept(sidecar.mqtt, "away").await;
    away.subscribe("flood/#").await;
    away.client.disconnect().await.unwrap();
    drop(away);
    let value = "p".repeat(60_000);
    let props = (0..16).fold(Props::new(), |p, i| p.user(&format!("k{i}"), &value));
    let (mut flooder, _) = mqtt5::connect5(sidecar.mqtt5, "flooder", true, &Props::new()).await;
    let before = rss_mib();
    for pkid in 1..=150 {
        let publish = mqtt5::publish("flood/x", 1, false, pkid, &props, b"");
        flooder.publish_acked(&publish).await;
    }
    let after = rss_mib();
    eprintln!("user properties: ~140 MiB offered; VmRSS {before:.0} -> {after:.0} MiB");
    assert!(
        after - before < 48.0,
        "150 × 960 kB of user properties against a 2 MiB filter log: VmRSS {before:.0} -> {after:.0} MiB"
    );
}
