//! What a principal can make the broker keep besides its sessions (issue
//! 43): retained messages, bounded per principal (`quotas.retained`,
//! `quotas.retained_bytes`) and in all (`mqtt.max_retained`), and last
//! wills (`quotas.will_bytes`), tried by clients that want more.

use std::time::Duration;

use bytes::BytesMut;
use lmos_testkit as common;

use common::mqtt5::{self, Props, PUBACK, PUBREC};
use common::raw_mqtt::{self, Client};
use common::*;
use lmos_sidecar::auth::credentials::hash_password;
use lmos_sidecar::config::{Grants, PrincipalConfig};
use rumqttc::v5::mqttbytes::v5 as wire;

fn principal(name: &str) -> PrincipalConfig {
    PrincipalConfig {
        name: name.into(),
        password_hash: hash_password(&format!("{name}-pw")),
        ..PrincipalConfig::default()
    }
}

/// bob and alice, who need no rights for `junk/...`; each may keep
/// `count` retained messages of at most `bytes` in all.
async fn sidecar(count: u64, bytes: u64) -> TestSidecar {
    let mut c = test_config();
    c.mqtt.authentication = true;
    c.auth.anonymous = Grants::default();
    c.auth.principals = vec![principal("bob"), principal("alice")];
    c.quotas.retained = count;
    c.quotas.retained_bytes = bytes;
    c.quotas.will_bytes = 10_000;
    TestSidecar::start_with(c).await
}

/// A connected client of `user` at protocol `level`, with a will of
/// `will` bytes if any; the CONNACK's code.
async fn connect(
    addr: std::net::SocketAddr,
    level: u8,
    id: &str,
    user: &str,
    will: Option<usize>,
) -> (Client, Vec<u8>) {
    let payload = vec![b'w'; will.unwrap_or(0)];
    let will = will.map(|_| ("junk/will", &payload[..], false));
    connect_with_will(addr, level, (id, user), will).await
}

async fn connect_with_will(
    addr: std::net::SocketAddr,
    level: u8,
    (id, user): (&str, &str),
    will: Option<(&str, &[u8], bool)>,
) -> (Client, Vec<u8>) {
    let mut c = Client::open(addr).await;
    let pw = format!("{user}-pw");
    c.send(&raw_mqtt::connect_will(level, id, Some((user, &pw)), will))
        .await;
    let ack = c.recv().await.expect("CONNACK");
    (c, ack)
}

async fn v5(sidecar: &TestSidecar, id: &str, user: &str) -> Client {
    let (c, ack) = connect(sidecar.mqtt5, 5, id, user, None).await;
    assert_eq!(mqtt5::connack(&ack).reason, 0, "accepted: {ack:?}");
    c
}

/// A retained publication at `qos` 1 or 2; the acknowledgement's reason
/// code and Reason String (a PUBREC's exchange completed).
async fn retain(c: &mut Client, pkid: u16, qos: u8, topic: &str, payload: &[u8]) -> (u8, String) {
    c.send(&mqtt5::publish(
        topic,
        qos,
        true,
        pkid,
        &Props::new(),
        payload,
    ))
    .await;
    let ack = c.recv().await.expect("an acknowledgement");
    assert_eq!(ack[0], if qos == 1 { PUBACK } else { PUBREC }, "{ack:?}");
    let (id, reason) = mqtt5::ack_of(&ack);
    assert_eq!(id, pkid);
    let why = match wire::Packet::read(&mut BytesMut::from(&ack[..]), None) {
        Ok(wire::Packet::PubAck(a)) => a.properties.and_then(|p| p.reason_string),
        Ok(wire::Packet::PubRec(a)) => a.properties.and_then(|p| p.reason_string),
        other => panic!("{other:?}"),
    };
    if qos == 2 {
        c.send(&mqtt5::ack(mqtt5::PUBREL, pkid)).await;
        let comp = c.recv().await.expect("PUBCOMP");
        assert_eq!(comp[0], mqtt5::PUBCOMP, "{comp:?}");
    }
    (reason, why.unwrap_or_default())
}

/// The topics of the retained messages a new subscriber (as `user`) to
/// `junk/#` gets.
async fn retained_topics(addr: std::net::SocketAddr, user: &str) -> Vec<String> {
    let (mut c, ack) = connect(addr, 5, &format!("look-{user}"), user, None).await;
    assert_eq!(mqtt5::connack(&ack).reason, 0);
    c.subscribe_ok(1, &[("junk/#", 0)]).await;
    let mut got: Vec<String> = c
        .quiet(Duration::from_millis(300))
        .await
        .iter()
        .map(|p| mqtt5::publication(p).topic)
        .collect();
    got.sort();
    got
}

async fn limit_hits(sidecar: &TestSidecar, limit: &str) -> u64 {
    let metrics = http(sidecar.http, "GET", "/metrics", None, b"").await.body;
    let prefix = format!(r#"lmos_sidecar_limit_hits_total{{limit="{limit}",transport="mqtt"}} "#);
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn a_principal_past_its_retained_quota_gets_quota_exceeded_and_another_still_retains() {
    let sidecar = sidecar(2, 1_000).await;
    let mut watcher = v5(&sidecar, "watcher", "alice").await;
    watcher.subscribe_ok(1, &[("junk/#", 1)]).await;
    let mut bob = v5(&sidecar, "bob-1", "bob").await;
    assert_eq!(retain(&mut bob, 1, 1, "junk/1", b"one").await.0, 0);
    assert_eq!(retain(&mut bob, 2, 2, "junk/2", b"two").await.0, 0);
    let (reason, why) = retain(&mut bob, 3, 1, "junk/3", b"three").await;
    assert_eq!(reason, 0x97, "Quota exceeded");
    assert!(why.contains("quotas.retained"), "{why}");
    let (reason, _) = retain(&mut bob, 4, 2, "junk/3", b"three").await;
    assert_eq!(reason, 0x97, "PUBREC says so too");
    // Another principal still retains.
    let mut alice = v5(&sidecar, "alice-1", "alice").await;
    assert_eq!(retain(&mut alice, 1, 1, "junk/a", b"a").await.0, 0);
    // Replacing its own message takes no more room.
    assert_eq!(retain(&mut bob, 5, 1, "junk/1", b"uno").await.0, 0);
    // Bytes: topic, properties and payload.
    let (reason, why) = retain(&mut bob, 6, 1, "junk/2", &[b'x'; 1_000]).await;
    assert_eq!(reason, 0x97);
    assert!(why.contains("quotas.retained_bytes"), "{why}");
    // The refused ones were neither retained nor delivered.
    let delivered: Vec<String> = watcher
        .quiet(Duration::from_millis(300))
        .await
        .iter()
        .map(|p| mqtt5::publication(p).topic)
        .collect();
    assert_eq!(delivered, ["junk/1", "junk/2", "junk/a", "junk/1"]);
    assert_eq!(
        retained_topics(sidecar.mqtt5, "alice").await,
        ["junk/1", "junk/2", "junk/a"]
    );
    assert!(limit_hits(&sidecar, "quotas.retained").await >= 2);
    assert!(limit_hits(&sidecar, "quotas.retained_bytes").await >= 1);
}

#[tokio::test]
async fn deleting_or_losing_a_retained_message_gives_room_back() {
    let sidecar = sidecar(2, 1_000).await;
    let mut bob = v5(&sidecar, "bob-1", "bob").await;
    assert_eq!(retain(&mut bob, 1, 1, "junk/1", b"one").await.0, 0);
    assert_eq!(retain(&mut bob, 2, 1, "junk/2", b"two").await.0, 0);
    assert_eq!(retain(&mut bob, 3, 1, "junk/3", b"3").await.0, 0x97);
    // An empty payload deletes bob's junk/1.
    assert_eq!(retain(&mut bob, 4, 1, "junk/1", b"").await.0, 0);
    assert_eq!(retain(&mut bob, 5, 1, "junk/3", b"3").await.0, 0);
    assert_eq!(retain(&mut bob, 6, 1, "junk/4", b"4").await.0, 0x97);
    // alice replacing bob's junk/2 makes it hers: bob has room again.
    let mut alice = v5(&sidecar, "alice-1", "alice").await;
    assert_eq!(retain(&mut alice, 1, 1, "junk/2", b"hers").await.0, 0);
    assert_eq!(retain(&mut bob, 7, 1, "junk/4", b"4").await.0, 0);
    assert_eq!(
        retained_topics(sidecar.mqtt5, "alice").await,
        ["junk/2", "junk/3", "junk/4"]
    );
}

#[tokio::test]
async fn a_3_1_1_retained_publication_past_the_quota_is_dropped_and_counted() {
    let sidecar = sidecar(1, 1_000).await;
    let (mut bob, ack) = connect(sidecar.mqtt, 4, "bob-4", "bob", None).await;
    assert_eq!((ack[0], ack[3]), (0x20, 0), "{ack:?}");
    let publish = |topic: &str, qos: u8, pkid: u16| {
        let mut p = raw_mqtt::publish(4, topic, qos, pkid, &[], b"v");
        p[0] |= 1;
        p
    };
    bob.send(&publish("junk/1", 1, 1)).await;
    assert_eq!(bob.recv().await.expect("PUBACK"), [0x40, 2, 0, 1]);
    // 3.1.1 has no negative PUBACK: acknowledged, not kept.
    bob.send(&publish("junk/2", 1, 2)).await;
    assert_eq!(bob.recv().await.expect("PUBACK"), [0x40, 2, 0, 2]);
    bob.send(&publish("junk/3", 0, 0)).await;
    assert!(bob.until_pong().await.is_empty());
    assert_eq!(retained_topics(sidecar.mqtt5, "alice").await, ["junk/1"]);
    assert_eq!(limit_hits(&sidecar, "quotas.retained").await, 2);
}

#[tokio::test]
async fn the_sidecar_wide_retained_cap_holds_for_everyone_even_unquoted() {
    // Anonymous, the only principal, has no quota: the cap still holds.
    let mut c = test_config();
    c.mqtt.max_retained = 2;
    let sidecar = TestSidecar::start_with(c).await;
    let mut anyone = Client::connect_clean(sidecar.mqtt5, 5, "anyone").await;
    assert_eq!(retain(&mut anyone, 1, 1, "junk/1", b"1").await.0, 0);
    assert_eq!(retain(&mut anyone, 2, 1, "junk/2", b"2").await.0, 0);
    let (reason, why) = retain(&mut anyone, 3, 1, "junk/3", b"3").await;
    assert_eq!(reason, 0x97);
    assert!(why.contains("mqtt.max_retained"), "{why}");
    assert_eq!(limit_hits(&sidecar, "max_retained").await, 1);
}

#[tokio::test]
async fn a_connect_whose_will_passes_the_principals_will_bytes_is_refused() {
    let sidecar = sidecar(10, 1_000).await;
    let (mut first, ack) = connect(sidecar.mqtt5, 5, "bob-1", "bob", Some(6_000)).await;
    assert_eq!(mqtt5::connack(&ack).reason, 0);
    let (_, ack) = connect(sidecar.mqtt5, 5, "bob-2", "bob", Some(6_000)).await;
    let ack = mqtt5::connack(&ack);
    assert_eq!(ack.reason, 0x97, "Quota exceeded: {ack:?}");
    let why = ack.props.text_of(0x1F).unwrap_or_default();
    assert!(why.contains("quotas.will_bytes"), "{why}");
    let (_, ack) = connect(sidecar.mqtt, 4, "bob-3", "bob", Some(6_000)).await;
    assert_eq!((ack[0], ack[3]), (0x20, 3), "3.1.1: server unavailable");
    // Without a will, or as another principal, it connects.
    let (_, ack) = connect(sidecar.mqtt5, 5, "bob-4", "bob", None).await;
    assert_eq!(mqtt5::connack(&ack).reason, 0);
    let (_alice, ack) = connect(sidecar.mqtt5, 5, "alice-1", "alice", Some(6_000)).await;
    assert_eq!(mqtt5::connack(&ack).reason, 0);
    assert_eq!(limit_hits(&sidecar, "quotas.will_bytes").await, 2);
    // The first connection's end gives its will's bytes back.
    first.bye(&Props::new()).await;
    let (_, ack) = connect(sidecar.mqtt5, 5, "bob-2", "bob", Some(6_000)).await;
    assert_eq!(mqtt5::connack(&ack).reason, 0, "room again");
}

#[tokio::test]
async fn a_retained_will_counts_as_its_principals_retained_message() {
    // A will with RETAIN becomes a retained message when published: were it
    // not counted, connecting and vanishing would retain without bound.
    let sidecar = sidecar(2, 1_000).await;
    let mut bob = v5(&sidecar, "bob-1", "bob").await;
    assert_eq!(retain(&mut bob, 1, 1, "junk/1", b"one").await.0, 0);
    assert_eq!(retain(&mut bob, 2, 1, "junk/2", b"two").await.0, 0);
    let will = Some(("junk/3", &b"gone"[..], true));
    let (_, ack) = connect_with_will(sidecar.mqtt5, 5, ("bob-2", "bob"), will).await;
    let ack = mqtt5::connack(&ack);
    assert_eq!(ack.reason, 0x97, "{ack:?}");
    let why = ack.props.text_of(0x1F).unwrap_or_default();
    assert!(why.contains("quotas.retained"), "{why}");
    // A retained will on a topic it already holds takes no more room.
    let will = Some(("junk/1", &b"gone"[..], true));
    let (_, ack) = connect_with_will(sidecar.mqtt5, 5, ("bob-3", "bob"), will).await;
    assert_eq!(mqtt5::connack(&ack).reason, 0);
}
