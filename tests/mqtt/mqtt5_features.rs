//! MQTT 5 features rumqttd 0.20 lacks and the guard emulates in front of
//! it: the limits announced in CONNACK, delivery at the lower of the
//! published and granted QoS with properties intact, message and session
//! expiry, topic aliases in both directions, the client's Maximum Packet
//! Size and Receive Maximum, and the server's Receive Maximum.
//!
//! Each behaviour is one the Eclipse Paho interoperability suite
//! (`eclipse/paho.mqtt.testing`, `interoperability/client_test5.py`)
//! asserts, or one the MQTT 5 specification requires; the bytes are
//! written out (`common::mqtt5`) so that no client library resolves an
//! alias or holds back an acknowledgement on the test's behalf. Every
//! assertion is about what a client sees on the wire.
//!
//! Each test's body is an `async fn(SocketAddr)` run against a fresh
//! sidecar. Client IDs and topics are unique per run, so the same bodies
//! also run against one shared broker: they were checked against
//! Mosquitto 2.0 where it implements the behaviour.

use lmos_testkit as common;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use common::mqtt5::{self as m5, connect5, Props};
use common::mqtt5::{
    CONTENT_TYPE, MAXIMUM_PACKET_SIZE, MESSAGE_EXPIRY, PAYLOAD_FORMAT, PUBACK, PUBREC,
    RECEIVE_MAXIMUM, SESSION_EXPIRY, TOPIC_ALIAS, TOPIC_ALIAS_MAXIMUM, USER_PROPERTY,
};
use common::raw_mqtt::{self as raw, Client};
use common::TestSidecar;

/// How long a test waits for something that must not come. A PINGREQ
/// round trip alone is no barrier: a broker may answer a ping before it
/// has routed a publication from another connection.
const SETTLE: Duration = Duration::from_millis(300);

async fn on_sidecar<F: Future<Output = ()>>(case: impl FnOnce(SocketAddr) -> F) {
    let sidecar = TestSidecar::start().await;
    case(sidecar.mqtt).await;
    sidecar.stop().await;
}

/// `name` made unique, for client IDs and topics.
fn unique(name: &str) -> String {
    format!("{name}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

/// A v5 client that subscribed to `filters` and was granted what it asked.
async fn subscriber(addr: SocketAddr, connect: &Props, filters: &[(&str, u8)]) -> Client {
    let (mut c, _) = connect5(addr, &unique("sub"), true, connect).await;
    let granted: Vec<u8> = filters.iter().map(|(_, o)| o & 3).collect();
    assert_eq!(c.subscribe_ok(1, filters).await, granted, "{filters:?}");
    c
}

/// A PUBLISH without properties.
fn plain(topic: &str, qos: u8, pkid: u16, payload: &[u8]) -> Vec<u8> {
    m5::publish(topic, qos, false, pkid, &Props::new(), payload)
}

async fn publisher(addr: SocketAddr) -> Client {
    connect5(addr, &unique("pub"), true, &Props::new()).await.0
}

// 1. CONNACK ---------------------------------------------------------------

#[tokio::test]
async fn connack_announces_the_guards_limits() {
    on_sidecar(connack_limits).await;
}

/// Receive Maximum is `mqtt.max_inflight_count` (100 by default), Topic
/// Alias Maximum 64, Maximum Packet Size at least the 1 MiB payload limit.
async fn connack_limits(addr: SocketAddr) {
    let (mut c, ack) = connect5(addr, &unique("limits"), true, &Props::new()).await;
    assert!(!ack.session_present, "{ack:?}");
    assert_eq!(ack.props.get(RECEIVE_MAXIMUM), Some(100), "{ack:?}");
    assert_eq!(ack.props.get(TOPIC_ALIAS_MAXIMUM), Some(64), "{ack:?}");
    let size = ack.props.get(MAXIMUM_PACKET_SIZE);
    assert!(size.is_some_and(|s| s >= 1_048_576), "{ack:?}");
    c.bye(&Props::new()).await;
}

// 2. Delivery QoS and properties ------------------------------------------

/// The properties every publication in the QoS tests carries.
fn marked() -> Props {
    Props::new()
        .int(PAYLOAD_FORMAT, 1)
        .text(CONTENT_TYPE, "My name")
        .user("a", "2")
        .user("c", "3")
}

/// Exactly [`marked`]'s properties, user properties in order: nothing the
/// server uses inside may leak out.
fn assert_marked(p: &m5::Publish) {
    let users = vec![("a".into(), "2".into()), ("c".into(), "3".into())];
    assert_eq!(p.props.users(), users, "{p:?}");
    assert_eq!(p.props.get(PAYLOAD_FORMAT), Some(1), "{p:?}");
    assert_eq!(p.props.text_of(CONTENT_TYPE).as_deref(), Some("My name"));
    assert_eq!(
        p.props.ids(),
        [PAYLOAD_FORMAT, CONTENT_TYPE, USER_PROPERTY],
        "{p:?}"
    );
}

#[tokio::test]
async fn delivery_qos_is_the_lower_of_published_and_granted() {
    on_sidecar(delivery_qos).await;
}

/// Paho's `test_user_properties` and `test_payload_format`; MQTT 5
/// 3.8.4 (the QoS "is the minimum of" the two) and 3.3.2.3.7 (user
/// properties forwarded unaltered, in order).
async fn delivery_qos(addr: SocketAddr) {
    let topic = unique("qos");
    let mut s2 = subscriber(addr, &Props::new(), &[(&topic, 2)]).await;
    let mut s1 = subscriber(addr, &Props::new(), &[(&topic, 1)]).await;
    let mut v4 = Client::connect_clean(addr, 4, &unique("v4")).await;
    v4.send(&raw::subscribe(4, 1, &[(&topic, 1)])).await;
    assert_eq!(v4.recv().await.expect("SUBACK"), [0x90, 3, 0, 1, 1]);

    let mut p = publisher(addr).await;
    for qos in 0..=2u8 {
        let payload = format!("qos {qos}");
        let publish = m5::publish(&topic, qos, false, 10, &marked(), payload.as_bytes());
        p.publish_acked(&publish).await;
    }
    for (sub, granted) in [(&mut s2, 2u8), (&mut s1, 1)] {
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(sub.next_publish(true).await);
        }
        // The order is kept per QoS only (MQTT 5 4.6).
        got.sort_by(|a, b| a.payload.cmp(&b.payload));
        for (qos, g) in got.iter().enumerate() {
            assert_eq!(g.payload, format!("qos {qos}").as_bytes());
            assert_eq!(g.qos, (qos as u8).min(granted), "granted {granted}: {g:?}");
            assert_eq!((g.topic.as_str(), g.retain), (topic.as_str(), false));
            assert_marked(g);
        }
        assert!(sub.quiet(SETTLE).await.is_empty(), "three, once each");
    }
    // An MQTT 3.1.1 subscriber at QoS 1: QoS 0 stays 0, QoS 2 becomes 1.
    let mut qos_of = HashMap::new();
    for _ in 0..3 {
        let got = v4.recv().await.expect("a PUBLISH");
        let (_, payload) = raw::published(4, &got);
        qos_of.insert(String::from_utf8(payload).unwrap(), (got[0] >> 1) & 3);
    }
    let expected = [("qos 0", 0), ("qos 1", 1), ("qos 2", 1)];
    assert_eq!(qos_of, expected.map(|(p, q)| (p.to_owned(), q)).into());
}

#[tokio::test]
async fn the_sidecars_own_publications_arrive_at_the_granted_qos() {
    let sidecar = TestSidecar::start().await;
    let thing = unique("urn:dev:qos");
    let topic = format!("lmos/{thing}/events/alarm");
    let addr = sidecar.mqtt;
    let mut s2 = subscriber(addr, &Props::new(), &[(&topic, 2)]).await;
    let mut s1 = subscriber(addr, &Props::new(), &[(&topic, 1)]).await;
    let mut v4 = Client::connect_clean(addr, 4, &unique("v4")).await;
    v4.send(&raw::subscribe(4, 1, &[(&topic, 1)])).await;
    assert_eq!(v4.recv().await.expect("SUBACK"), [0x90, 3, 0, 1, 1]);

    // An event from a WebSocket agent: the sidecar publishes it, and a
    // subscriber that asked for QoS 1 or 2 must get it acknowledged.
    let mut agent = sidecar.ws().await;
    agent
        .send(common::event(&thing, "alarm", serde_json::json!(1)))
        .await;
    assert_eq!(s2.next_publish(true).await.qos, 2);
    assert_eq!(s1.next_publish(true).await.qos, 1);
    let got = v4.recv().await.expect("a PUBLISH");
    assert_eq!((got[0] >> 1) & 3, 1, "{got:?}");
    sidecar.stop().await;
}

#[tokio::test]
async fn retained_messages_keep_their_qos_and_properties() {
    on_sidecar(retained_qos).await;
}

/// Paho's `test_retained_message`: three retained messages at QoS 0, 1, 2
/// come to a QoS 2 subscription at their own QoS, retained, with their
/// user properties.
async fn retained_qos(addr: SocketAddr) {
    let base = unique("retained");
    let mut p = publisher(addr).await;
    for qos in 0..=2u8 {
        let topic = format!("{base}/{qos}");
        let payload = format!("qos {qos}");
        let publish = m5::publish(&topic, qos, true, 1, &marked(), payload.as_bytes());
        p.publish_acked(&publish).await;
    }
    let (mut s, _) = connect5(addr, &unique("sub"), true, &Props::new()).await;
    let filter = format!("{base}/+");
    // Retain Handling 0: retained messages are sent at subscribe.
    let options = m5::options(2, false, false, 0);
    s.send(&m5::subscribe(1, &Props::new(), &[(&filter, options)]))
        .await;
    // Retained messages may come before or after the SUBACK.
    let (mut got, mut subacked) = (Vec::new(), false);
    while got.len() < 3 || !subacked {
        let packet = s.recv().await.expect("the SUBACK and three PUBLISHes");
        if packet[0] == 0x90 {
            assert_eq!(packet.last(), Some(&2), "granted QoS 2: {packet:?}");
            subacked = true;
            continue;
        }
        let g = m5::publication(&packet);
        match g.qos {
            1 => s.send(&m5::ack(PUBACK, g.pkid.unwrap())).await,
            2 => s.send(&m5::ack(PUBREC, g.pkid.unwrap())).await,
            _ => {}
        }
        got.push(g);
    }
    got.sort_by(|a, b| a.topic.cmp(&b.topic));
    for (qos, g) in got.iter().enumerate() {
        assert_eq!(g.topic, format!("{base}/{qos}"));
        assert_eq!((g.qos, g.retain), (qos as u8, true), "{g:?}");
        assert_marked(g);
    }
    assert!(s.quiet(SETTLE).await.is_empty(), "three, once each");
}

#[tokio::test]
async fn many_downgraded_deliveries_never_stall() {
    on_sidecar(many_downgraded).await;
}

/// Far more QoS 0 publications than the broker's window of 100 unacknowledged
/// messages reach a QoS 2 subscriber, all at QoS 0, in order (MQTT 5
/// 4.6: same topic, same QoS).
async fn many_downgraded(addr: SocketAddr) {
    let topic = unique("many");
    let mut s = subscriber(addr, &Props::new(), &[(&topic, 2)]).await;
    let mut p = publisher(addr).await;
    for i in 0..300 {
        let payload = i.to_string();
        p.send(&plain(&topic, 0, 0, payload.as_bytes())).await;
    }
    for i in 0..300 {
        let g = s.next_publish(true).await;
        assert_eq!((g.qos, g.payload), (0, i.to_string().into_bytes()), "#{i}");
    }
    assert!(s.quiet(SETTLE).await.is_empty(), "300, once each");
}

// 3. Message expiry ---------------------------------------------------------

#[tokio::test]
async fn expired_messages_are_dropped_and_the_rest_carry_the_time_left() {
    on_sidecar(message_expiry).await;
}

/// Paho's `test_publication_expiry`; MQTT 5 3.3.2.3.3: a message whose
/// interval passed is not delivered, the others carry what is left.
async fn message_expiry(addr: SocketAddr) {
    let (id, topic) = (unique("expiry"), unique("expiry"));
    let stay = Props::new().int(SESSION_EXPIRY, 600);
    let (mut s, _) = connect5(addr, &id, true, &stay).await;
    assert_eq!(s.subscribe_ok(1, &[(&topic, 1)]).await, [1]);
    s.bye(&Props::new()).await;

    let mut p = publisher(addr).await;
    let expiry = |secs| Props::new().int(MESSAGE_EXPIRY, secs);
    p.publish_acked(&m5::publish(&topic, 1, false, 1, &expiry(1), b"expires"))
        .await;
    p.publish_acked(&m5::publish(&topic, 1, false, 2, &expiry(60), b"lasts"))
        .await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;

    let (mut s, ack) = connect5(addr, &id, false, &Props::new()).await;
    assert!(ack.session_present, "{ack:?}");
    let g = s.next_publish(true).await;
    assert_eq!((g.payload.as_slice(), g.qos), (&b"lasts"[..], 1), "{g:?}");
    let left = g.props.get(MESSAGE_EXPIRY);
    assert!(left.is_some_and(|l| (50..=58).contains(&l)), "{g:?}");
    assert!(s.quiet(SETTLE).await.is_empty(), "the expired one never");

    p.publish_acked(&m5::publish(&topic, 1, false, 3, &expiry(60), b"live"))
        .await;
    let g = s.next_publish(true).await;
    assert_eq!(g.payload, b"live");
    let left = g.props.get(MESSAGE_EXPIRY);
    assert!(left.is_some_and(|l| (55..=60).contains(&l)), "{g:?}");
}

#[tokio::test]
async fn a_3_1_1_subscriber_gets_mqtt_5_publications_in_3_1_1() {
    on_sidecar(for_a_3_1_1_subscriber).await;
}

/// The guard writes a 3.1.1 subscriber's publications itself from what
/// the broker's link hands over (issue 32): each is plain 3.1.1, without
/// the properties it was published with; an expired one is not delivered;
/// QoS is the lower of published and granted; a retained one sent at
/// subscription carries RETAIN, a redelivery DUP under its identifier.
async fn for_a_3_1_1_subscriber(addr: SocketAddr) {
    let (id, topic, kept) = (unique("v4-sub"), unique("v4"), unique("v4-kept"));
    let props = || {
        Props::new()
            .text(CONTENT_TYPE, "text/plain")
            .int(MESSAGE_EXPIRY, 60)
    };
    let mut p = publisher(addr).await;
    p.publish_acked(&m5::publish(&kept, 1, true, 1, &props(), b"kept"))
        .await;
    let resume = |clean| {
        let connect = raw::connect_with(4, &id, clean, 60);
        async move {
            let mut s = Client::open(addr).await;
            s.send(&connect).await;
            (s.recv().await.expect("CONNACK"), s)
        }
    };
    let (ack, mut s) = resume(false).await;
    assert_eq!(ack, [0x20, 2, 0, 0], "a new session");
    s.send(&raw::subscribe(4, 1, &[(&topic, 1), (&kept, 1)]))
        .await;
    assert_eq!(s.recv().await.unwrap(), [0x90, 4, 0, 1, 1, 1]);
    let got = s.recv().await.expect("the retained one");
    assert_eq!(got[0], 0x33, "QoS 1, RETAIN: {got:?}");
    assert_eq!(raw::published(4, &got), (kept.clone(), b"kept".to_vec()));
    s.send(&raw::packet(0x40, &got[got.len() - 6..got.len() - 4]))
        .await;
    s.send(&[0xE0, 0]).await;
    assert!(s.until_closed().await.is_empty());

    // Queued while it is away: one that expires, one that lasts, and one
    // published at QoS 2 to its QoS 1 subscription.
    let expiring = Props::new().int(MESSAGE_EXPIRY, 1);
    p.publish_acked(&m5::publish(&topic, 1, false, 2, &expiring, b"expires"))
        .await;
    p.publish_acked(&m5::publish(&topic, 1, false, 3, &props(), b"lasts"))
        .await;
    let two = m5::publish(&topic, 2, false, 4, &props(), b"two");
    assert_eq!(p.publish_acked(&two).await, 0);
    tokio::time::sleep(Duration::from_millis(2_500)).await;

    let (ack, mut s) = resume(false).await;
    assert_eq!(ack, [0x20, 2, 1, 0], "its session");
    let lasts = s.recv().await.expect("lasts");
    assert_eq!(
        raw::published(4, &lasts),
        (topic.clone(), b"lasts".to_vec())
    );
    let body = raw::string(topic.as_bytes());
    assert_eq!(lasts[0], 0x32, "{lasts:?}");
    assert_eq!(&lasts[2..2 + body.len()], &body[..]);
    assert_eq!(
        lasts.len(),
        2 + body.len() + 2 + b"lasts".len(),
        "no properties"
    );
    let pkid = &lasts[2 + body.len()..2 + body.len() + 2];
    s.send(&raw::packet(0x40, pkid)).await;
    let two = s.recv().await.expect("two");
    assert_eq!(two[0], 0x32, "at the granted QoS 1: {two:?}");
    assert_eq!(raw::published(4, &two), (topic.clone(), b"two".to_vec()));
    assert!(s.until_pong().await.is_empty(), "nothing more yet");
    drop(s);

    let (ack, mut s) = resume(false).await;
    assert_eq!(ack, [0x20, 2, 1, 0]);
    let again = s.recv().await.expect("two, again");
    assert_eq!(again[0], 0x3A, "DUP: {again:?}");
    assert_eq!(again[1..], two[1..], "under its identifier");
    s.send(&raw::packet(0x40, &two[two.len() - 5..two.len() - 3]))
        .await;
    assert!(s.until_pong().await.is_empty(), "the expired one never");
}

// 4. Session expiry ---------------------------------------------------------

#[tokio::test]
async fn clean_start_over_a_kept_session_is_answered_at_once() {
    on_sidecar(clean_start_over_kept).await;
}

/// Paho's `test_session_expiry`, its last steps: a session kept after its
/// connection (expiry 5 s, not yet expired), then the same client ID with
/// Clean Start and another expiry. The kept session is ended and the new
/// one answered at once, not present; and that again with the new one.
async fn clean_start_over_kept(addr: SocketAddr) {
    let (id, topic) = (unique("clean-over-kept"), unique("clean-over-kept"));
    let keep = |secs| Props::new().int(SESSION_EXPIRY, secs);
    // A session that expired first, as in Paho's test.
    let (mut s, _) = connect5(addr, &id, false, &keep(1)).await;
    assert_eq!(s.subscribe_ok(1, &[(&topic, 2)]).await, [2]);
    s.bye(&Props::new()).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (mut s, ack) = connect5(addr, &id, false, &keep(5)).await;
    assert!(!ack.session_present, "expired: {ack:?}");
    s.bye(&Props::new()).await;
    for round in 0..2 {
        let (mut s, ack) = connect5(addr, &id, true, &keep(1)).await;
        assert!(!ack.session_present, "round {round}: {ack:?}");
        assert_eq!(s.subscribe_ok(1, &[(&topic, 2)]).await, [2]);
        s.bye(&keep(5)).await;
    }
    let (_s, ack) = connect5(addr, &id, false, &keep(5)).await;
    assert!(ack.session_present, "{ack:?}");
}

/// Reconnects `id` without Clean Start; whether its session was there.
async fn resume(addr: SocketAddr, id: &str, props: &Props) -> (Client, bool) {
    let (c, ack) = connect5(addr, id, false, props).await;
    (c, ack.session_present)
}

#[tokio::test]
async fn a_session_with_an_expiry_interval_outlives_its_connection() {
    on_sidecar(session_kept).await;
}

/// Paho's `test_offline_message_queueing`: QoS 1 messages published while
/// the client is away wait in its session.
async fn session_kept(addr: SocketAddr) {
    let (id, topic) = (unique("kept"), unique("kept"));
    let stay = Props::new().int(SESSION_EXPIRY, 600);
    let (mut s, ack) = connect5(addr, &id, true, &stay).await;
    assert!(!ack.session_present);
    assert_eq!(s.subscribe_ok(1, &[(&topic, 1)]).await, [1]);
    s.bye(&Props::new()).await;
    let mut p = publisher(addr).await;
    for (pkid, payload) in [(1, "one"), (2, "two")] {
        p.publish_acked(&plain(&topic, 1, pkid, payload.as_bytes()))
            .await;
    }
    let (mut s, present) = resume(addr, &id, &Props::new()).await;
    assert!(present, "session present");
    for payload in ["one", "two"] {
        let g = s.next_publish(true).await;
        assert_eq!(
            (g.topic.as_str(), g.payload.as_slice()),
            (topic.as_str(), payload.as_bytes())
        );
    }
}

#[tokio::test]
async fn a_resumed_session_gets_its_unacknowledged_publications_again_and_no_qos_0_twice() {
    on_sidecar(resent_on_resume).await;
}

/// MQTT 5 4.4: a resumed session is sent its unacknowledged QoS 1
/// publications again; a QoS 0 publication between them, delivered at
/// QoS 0 on the QoS 1 subscription, went out once and is not resent.
async fn resent_on_resume(addr: SocketAddr) {
    let (id, topic) = (unique("resent"), unique("resent"));
    let stay = Props::new().int(SESSION_EXPIRY, 600);
    let (mut s, _) = connect5(addr, &id, true, &stay).await;
    assert_eq!(s.subscribe_ok(1, &[(&topic, 1)]).await, [1]);
    let mut p = publisher(addr).await;
    p.publish_acked(&plain(&topic, 1, 1, b"first")).await;
    p.publish_acked(&plain(&topic, 0, 0, b"between")).await;
    p.publish_acked(&plain(&topic, 1, 2, b"last")).await;
    let mut got = Vec::new();
    for _ in 0..3 {
        let g = s.next_publish(false).await;
        got.push((String::from_utf8(g.payload).unwrap(), g.qos));
    }
    let sent = [("first", 1), ("between", 0), ("last", 1)];
    assert_eq!(got, sent.map(|(p, q)| (p.to_owned(), q)));
    // Gone without acknowledging either QoS 1 publication.
    s.bye(&Props::new()).await;

    let (mut s, present) = resume(addr, &id, &Props::new()).await;
    assert!(present, "session present");
    let mut again = Vec::new();
    for _ in 0..2 {
        let g = s.next_publish(true).await;
        again.push((String::from_utf8(g.payload).unwrap(), g.qos));
    }
    let resent = [("first", 1), ("last", 1)];
    assert_eq!(again, resent.map(|(p, q)| (p.to_owned(), q)));
    assert!(s.quiet(SETTLE).await.is_empty(), "nothing more: {topic}");
}

#[tokio::test]
async fn a_session_without_an_expiry_interval_ends_with_its_connection() {
    on_sidecar(session_not_kept).await;
}

/// Paho's `test_session_expiry`, first part; MQTT 5 3.1.2.11.2: an absent
/// Session Expiry Interval is 0, even without Clean Start.
async fn session_not_kept(addr: SocketAddr) {
    let (id, topic) = (unique("gone"), unique("gone"));
    let (mut s, present) = resume(addr, &id, &Props::new()).await;
    assert!(!present, "a new client ID has no session");
    assert_eq!(s.subscribe_ok(1, &[(&topic, 1)]).await, [1]);
    s.bye(&Props::new()).await;
    let (mut s, present) = resume(addr, &id, &Props::new()).await;
    assert!(!present, "the session ended with the connection");
    let mut p = publisher(addr).await;
    p.publish_acked(&plain(&topic, 1, 1, b"x")).await;
    assert!(s.quiet(SETTLE).await.is_empty(), "its subscription ended");
}

#[tokio::test]
async fn a_session_ends_when_its_expiry_interval_has_passed() {
    on_sidecar(session_expires).await;
}

/// Paho's `test_session_expiry`, second part, with shorter intervals.
async fn session_expires(addr: SocketAddr) {
    let (id, topic) = (unique("expires"), unique("expires"));
    let two = Props::new().int(SESSION_EXPIRY, 2);
    let (mut s, _) = connect5(addr, &id, true, &two).await;
    assert_eq!(s.subscribe_ok(1, &[(&topic, 1)]).await, [1]);
    s.bye(&Props::new()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut s, present) = resume(addr, &id, &two).await;
    assert!(present, "still there after 0.5 s of 2");
    s.bye(&Props::new()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (mut s, present) = resume(addr, &id, &Props::new()).await;
    assert!(!present, "gone after 3 s of 2");
    let mut p = publisher(addr).await;
    p.publish_acked(&plain(&topic, 1, 1, b"x")).await;
    assert!(s.quiet(SETTLE).await.is_empty(), "its subscription expired");
}

#[tokio::test]
async fn disconnect_can_change_the_session_expiry_interval() {
    on_sidecar(session_expiry_on_disconnect).await;
}

/// Paho's `test_session_expiry`, last part; MQTT 5 3.14.2.2.2.
async fn session_expiry_on_disconnect(addr: SocketAddr) {
    let (id, topic) = (unique("changed"), unique("changed"));
    let one = Props::new().int(SESSION_EXPIRY, 1);
    let (mut s, _) = connect5(addr, &id, true, &one).await;
    assert_eq!(s.subscribe_ok(1, &[(&topic, 1)]).await, [1]);
    s.bye(&Props::new().int(SESSION_EXPIRY, 30)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (mut s, present) = resume(addr, &id, &one).await;
    assert!(present, "kept 30 s as DISCONNECT said, not 1 s");
    s.bye(&Props::new().int(SESSION_EXPIRY, 0)).await;
    let (_s, present) = resume(addr, &id, &Props::new()).await;
    assert!(!present, "ended at once by DISCONNECT's 0");
}

#[tokio::test]
async fn an_mqtt_311_persistent_session_is_kept() {
    on_sidecar(session_311).await;
}

/// MQTT 3.1.1 3.1.2.4: Clean Session 0 keeps the session after DISCONNECT,
/// QoS 1 messages included, whatever MQTT 5 clients do.
async fn session_311(addr: SocketAddr) {
    let (id, topic) = (unique("v4-kept"), unique("v4-kept"));
    let mut c = Client::open(addr).await;
    c.send(&raw::connect_with(4, &id, false, 60)).await;
    assert_eq!(c.recv().await.expect("CONNACK"), [0x20, 2, 0, 0]);
    c.send(&raw::subscribe(4, 1, &[(&topic, 1)])).await;
    assert_eq!(c.recv().await.expect("SUBACK"), [0x90, 3, 0, 1, 1]);
    c.send(&[0xE0, 0]).await;
    assert!(c.until_closed().await.is_empty());
    let mut p = publisher(addr).await;
    p.publish_acked(&plain(&topic, 1, 1, b"kept")).await;
    let mut c = Client::open(addr).await;
    c.send(&raw::connect_with(4, &id, false, 60)).await;
    assert_eq!(c.recv().await.expect("CONNACK"), [0x20, 2, 1, 0], "present");
    let got = c.recv().await.expect("the queued message");
    assert_eq!(got[0] & 0xF6, 0x32, "a QoS 1 PUBLISH: {got:?}");
    assert_eq!(raw::published(4, &got), (topic, b"kept".to_vec()));
}

// 5. Client topic aliases ---------------------------------------------------

#[tokio::test]
async fn invalid_topic_aliases_end_the_connection() {
    on_sidecar(invalid_aliases).await;
}

/// Paho's `test_client_topic_alias`; MQTT 5 3.3.2.3.4: alias 0 or above
/// the server's Topic Alias Maximum is 0x94, an alias with no mapping on
/// this connection a Protocol Error (0x82). Nothing is published.
async fn invalid_aliases(addr: SocketAddr) {
    let topic = unique("alias");
    let mut watcher = subscriber(addr, &Props::new(), &[(&topic, 0)]).await;
    for (name, alias, reason) in [(topic.as_str(), 0, 0x94), (&topic, 65, 0x94), ("", 1, 0x82)] {
        let (mut c, _) = connect5(addr, &unique("aliaser"), true, &Props::new()).await;
        let alias_props = Props::new().int(TOPIC_ALIAS, alias);
        c.send(&m5::publish(name, 1, false, 1, &alias_props, b"x"))
            .await;
        let last = c.until_closed().await;
        assert_eq!(last.len(), 1, "alias {alias}: only a DISCONNECT: {last:?}");
        assert_eq!(m5::disconnect_reason(&last[0]), reason, "alias {alias}");
    }
    assert!(watcher.quiet(SETTLE).await.is_empty(), "nothing published");
}

#[tokio::test]
async fn a_topic_alias_stands_for_its_topic_until_the_connection_ends() {
    on_sidecar(client_alias).await;
}

/// Paho's `test_client_topic_alias`: alias 1 set with a topic, then used
/// alone, reaches subscribers on the topic; a new connection of the same
/// session starts without aliases (MQTT 5 3.3.2.3.4).
async fn client_alias(addr: SocketAddr) {
    let (id, topic) = (unique("aliaser"), format!("{}/a/b", unique("alias")));
    let mut watcher = subscriber(addr, &Props::new(), &[(&topic, 1)]).await;
    let stay = Props::new().int(SESSION_EXPIRY, 600);
    let (mut c, _) = connect5(addr, &id, true, &stay).await;
    let one = Props::new().int(TOPIC_ALIAS, 1);
    c.publish_acked(&m5::publish(&topic, 1, false, 1, &one, b"set"))
        .await;
    c.publish_acked(&m5::publish("", 1, false, 2, &one, b"used"))
        .await;
    for payload in ["set", "used"] {
        let g = watcher.next_publish(true).await;
        assert_eq!(
            (g.topic.as_str(), g.payload.as_slice()),
            (topic.as_str(), payload.as_bytes())
        );
        assert_eq!(g.props.get(TOPIC_ALIAS), None, "the watcher allows none");
    }
    c.bye(&Props::new()).await;

    let (mut c, present) = resume(addr, &id, &Props::new()).await;
    assert!(present, "the session is kept");
    c.publish_acked(&plain(&topic, 1, 3, b"plain")).await;
    assert_eq!(watcher.next_publish(true).await.payload, b"plain");
    c.send(&m5::publish("", 1, false, 4, &one, b"stale")).await;
    let last = c.until_closed().await;
    assert_eq!(last.len(), 1, "only a DISCONNECT: {last:?}");
    assert_eq!(m5::disconnect_reason(&last[0]), 0x82, "alias 1 is unknown");
    assert!(watcher.quiet(SETTLE).await.is_empty(), "nothing published");
}

// 6. Server topic aliases ---------------------------------------------------

/// The topics the alias tests publish on, in order: more topics than the
/// client allows aliases, each coming back.
const ALIASED: [u8; 6] = [1, 2, 1, 3, 1, 2];

/// Publishes on `base`/n for each of [`ALIASED`], one at a time, and
/// returns each delivery with the topic it was published on.
async fn deliveries(addr: SocketAddr, s: &mut Client, base: &str) -> Vec<(m5::Publish, String)> {
    let mut p = publisher(addr).await;
    let mut out = Vec::new();
    for (i, n) in ALIASED.iter().enumerate() {
        let topic = format!("{base}/{n}");
        let payload = i.to_string();
        p.publish_acked(&plain(&topic, 1, 1, payload.as_bytes()))
            .await;
        let g = s.next_publish(true).await;
        assert_eq!(g.payload, payload.as_bytes());
        out.push((g, topic));
    }
    out
}

#[tokio::test]
async fn server_topic_aliases_resolve_to_the_published_topic() {
    on_sidecar(server_aliases).await;
}

/// Paho's `test_server_topic_alias`; MQTT 5 3.3.2.3.4: aliases are per
/// topic name (not per subscription filter), never above the client's
/// Topic Alias Maximum, and a known one is used with an empty topic.
async fn server_aliases(addr: SocketAddr) {
    let base = unique("srv-alias");
    let allow_two = Props::new().int(TOPIC_ALIAS_MAXIMUM, 2);
    let mut s = subscriber(addr, &allow_two, &[(&format!("{base}/+"), 1)]).await;
    let mut known: HashMap<u32, String> = HashMap::new();
    let mut reused = 0;
    for (g, published) in deliveries(addr, &mut s, &base).await {
        let resolved = match g.props.get(TOPIC_ALIAS) {
            None => g.topic.clone(),
            Some(a) => {
                assert!((1..=2).contains(&a), "alias {a} of at most 2: {g:?}");
                if g.topic.is_empty() {
                    reused += 1;
                    known.get(&a).cloned().expect("an alias set before")
                } else {
                    known.insert(a, g.topic.clone());
                    g.topic.clone()
                }
            }
        };
        assert_eq!(resolved, published, "{g:?}");
    }
    assert!(reused > 0, "an alias was used with an empty topic");
}

#[tokio::test]
async fn a_client_allowing_no_topic_aliases_gets_none() {
    on_sidecar(no_server_aliases).await;
}

/// Paho's `test_server_topic_alias`, second and third parts: Topic Alias
/// Maximum absent or 0.
async fn no_server_aliases(addr: SocketAddr) {
    for connect in [Props::new(), Props::new().int(TOPIC_ALIAS_MAXIMUM, 0)] {
        let base = unique("no-alias");
        let mut s = subscriber(addr, &connect, &[(&format!("{base}/+"), 1)]).await;
        for (g, published) in deliveries(addr, &mut s, &base).await {
            assert_eq!(g.props.get(TOPIC_ALIAS), None, "{connect:?}: {g:?}");
            assert_eq!(g.topic, published);
        }
    }
}

// 7. Client Maximum Packet Size ---------------------------------------------

#[tokio::test]
async fn nothing_larger_than_the_clients_maximum_packet_size_is_sent() {
    on_sidecar(client_packet_size).await;
}

/// Paho's `test_maximum_packet_size`; MQTT 5 3.1.2.11.4: a packet too large
/// for the client is discarded, as if sent, and the connection goes on.
async fn client_packet_size(addr: SocketAddr) {
    let topic = unique("mps");
    let small = Props::new().int(MAXIMUM_PACKET_SIZE, 64);
    let mut s = subscriber(addr, &small, &[(&topic, 2)]).await;
    let mut p = publisher(addr).await;
    for (qos, payload) in [
        (0, vec![b'.'; 32]),
        (1, vec![b'.'; 64]),
        (1, b"small".to_vec()),
    ] {
        p.publish_acked(&plain(&topic, qos, 1, &payload)).await;
    }
    let g = s.next_publish(true).await;
    assert_eq!((g.qos, g.payload.len()), (0, 32), "{g:?}");
    let g = s.next_publish(true).await;
    assert_eq!((g.qos, g.payload.as_slice()), (1, &b"small"[..]), "{g:?}");
    assert!(s.quiet(SETTLE).await.is_empty(), "never the large one");
}

// 8. Client Receive Maximum -------------------------------------------------

#[tokio::test]
async fn deliveries_stop_at_the_clients_receive_maximum() {
    on_sidecar(client_receive_maximum).await;
}

/// Paho's `test_flow_control1`; MQTT 5 4.9: no more unacknowledged QoS 1
/// deliveries than the client's Receive Maximum.
async fn client_receive_maximum(addr: SocketAddr) {
    let topic = unique("flow");
    let two = Props::new().int(RECEIVE_MAXIMUM, 2);
    let mut s = subscriber(addr, &two, &[(&topic, 1)]).await;
    let mut p = publisher(addr).await;
    for i in 1..=3u16 {
        let payload = format!("message {i}");
        p.publish_acked(&plain(&topic, 1, i, payload.as_bytes()))
            .await;
    }
    let first = s.next_publish(false).await;
    let pkid = first.pkid.unwrap();
    let second = s.next_publish(false).await;
    assert_eq!((first.payload, first.qos), (b"message 1".to_vec(), 1));
    assert_eq!((&second.payload, second.qos), (&b"message 2".to_vec(), 1));
    let early = s.quiet(Duration::from_millis(500)).await;
    assert!(early.is_empty(), "no third while two wait: {early:?}");
    s.send(&m5::ack(PUBACK, pkid)).await;
    let third = s.next_publish(false).await;
    assert_eq!((&third.payload, third.qos), (&b"message 3".to_vec(), 1));
    for g in [second, third] {
        s.send(&m5::ack(PUBACK, g.pkid.unwrap())).await;
    }
    assert!(s.quiet(SETTLE).await.is_empty(), "three, once each");
}

// 9. Server Receive Maximum -------------------------------------------------

#[tokio::test]
async fn exceeding_the_servers_receive_maximum_disconnects() {
    on_sidecar(unreleased_flood).await;
}

/// Paho's `test_flow_control2`; MQTT 5 3.3.4: one QoS 2 PUBLISH more than
/// the CONNACK's Receive Maximum, none released, is DISCONNECT 0x93.
async fn unreleased_flood(addr: SocketAddr) {
    let (mut c, ack) = connect5(addr, &unique("flood"), true, &Props::new()).await;
    let max = ack.props.get(RECEIVE_MAXIMUM).expect("a Receive Maximum");
    assert!(max < 1_000, "small enough to exceed: {ack:?}");
    let max = max as u16;
    let topic = unique("flood");
    let mut all = Vec::new();
    for pkid in 1..=max + 1 {
        all.extend(plain(&topic, 2, pkid, b"x"));
    }
    c.send(&all).await;
    let got = c.until_closed().await;
    let (last, before) = got.split_last().expect("a DISCONNECT");
    assert_eq!(m5::disconnect_reason(last), 0x93, "{last:?}");
    let pubrecs = before.iter().filter(|p| p[0] == PUBREC).count();
    assert_eq!(pubrecs, before.len(), "only PUBRECs before: {before:?}");
    assert!(pubrecs <= usize::from(max), "{pubrecs} PUBRECs");
}

#[tokio::test]
async fn completed_qos_2_exchanges_do_not_count_against_the_receive_maximum() {
    on_sidecar(released_flood).await;
}

/// As [`unreleased_flood`], but each exchange completed before the next:
/// all are accepted and delivered, and the connection stays.
async fn released_flood(addr: SocketAddr) {
    let topic = unique("released");
    let mut s = subscriber(addr, &Props::new(), &[(&topic, 0)]).await;
    let (mut c, ack) = connect5(addr, &unique("released"), true, &Props::new()).await;
    let max = ack.props.get(RECEIVE_MAXIMUM).expect("a Receive Maximum") as u16;
    for pkid in 1..=max + 1 {
        let payload = pkid.to_string();
        c.publish_acked(&plain(&topic, 2, pkid, payload.as_bytes()))
            .await;
    }
    assert!(c.quiet(SETTLE).await.is_empty(), "no DISCONNECT");
    for pkid in 1..=max + 1 {
        let g = s.next_publish(true).await;
        assert_eq!((g.qos, g.payload), (0, pkid.to_string().into_bytes()));
    }
}

// 10. Still served ----------------------------------------------------------

#[tokio::test]
async fn after_alias_and_flow_control_attacks_a_fresh_client_is_served() {
    on_sidecar(|addr| async move {
        invalid_aliases(addr).await;
        unreleased_flood(addr).await;
        still_served(addr).await;
    })
    .await;
}

/// A fresh v5 client subscribes and gets a QoS 2 publication at its QoS 1,
/// with its user property.
async fn still_served(addr: SocketAddr) {
    let topic = unique("fresh");
    let mut s = subscriber(addr, &Props::new(), &[(&topic, 1)]).await;
    let mut p = publisher(addr).await;
    let kv = Props::new().user("k", "v");
    p.publish_acked(&m5::publish(&topic, 2, false, 1, &kv, b"fresh"))
        .await;
    let g = s.next_publish(true).await;
    assert_eq!((g.topic.as_str(), g.qos), (topic.as_str(), 1), "{g:?}");
    assert_eq!((g.payload.as_slice(), g.props.clone()), (&b"fresh"[..], kv));
}

// Policies ----------------------------------------------------------------

/// `packet`, an MQTT 5 CONNECT of `m5::connect`, asking for `keep_alive`.
fn with_keep_alive(mut packet: Vec<u8>, keep_alive: u16) -> Vec<u8> {
    assert!(packet[1] < 0x80, "a one-byte remaining length");
    packet[10..12].copy_from_slice(&keep_alive.to_be_bytes());
    packet
}

/// `mqtt.max_keep_alive_s` and `mqtt.refused_filters`, the policies
/// Paho's `test_server_keep_alive` and `test_subscribe_failure` assert
/// (`config/paho-policies.toml`): an MQTT 5 client asking for more than
/// the maximum, or for none, is told the maximum in its CONNACK (Server
/// Keep Alive) and held to it; a refused filter fails in its place in the
/// SUBACK, on both versions, and the others work.
#[tokio::test]
async fn configured_policies_cap_the_keep_alive_and_refuse_filters() {
    const SERVER_KEEP_ALIVE: u8 = 0x13;
    let mut config = common::test_config();
    config.mqtt.max_keep_alive_s = 60;
    config.mqtt.refused_filters = vec!["test/nosubscribe".into()];
    let sidecar = TestSidecar::start_with(config).await;
    let addr = sidecar.mqtt;
    for (asked, told) in [(120u16, Some(60u32)), (0, Some(60)), (30, None), (60, None)] {
        let mut c = Client::open(addr).await;
        let connect = m5::connect(&unique("keep-alive"), true, &Props::new());
        c.send(&with_keep_alive(connect, asked)).await;
        let ack = m5::connack(&c.recv().await.expect("CONNACK"));
        assert_eq!(ack.reason, 0, "asked {asked}: {ack:?}");
        assert_eq!(ack.props.get(SERVER_KEEP_ALIVE), told, "asked {asked}");
    }
    // 3.1.1 cannot be told: served as it asks.
    let mut v4 = Client::open(addr).await;
    v4.send(&raw::connect_with(4, &unique("keep-alive-4"), true, 120))
        .await;
    assert_eq!(v4.recv().await.expect("CONNACK")[..4], [0x20, 2, 0, 0]);

    let filters = [("test/nosubscribe", 1), ("test/fine", 1)];
    let (mut s, _) = connect5(addr, &unique("refused"), true, &Props::new()).await;
    assert_eq!(s.subscribe_ok(1, &filters).await, [0x80, 1]);
    let mut v4 = Client::connect_clean(addr, 4, &unique("refused-4")).await;
    v4.send(&raw::subscribe(4, 1, &filters)).await;
    let ack = v4.recv().await.expect("SUBACK");
    assert_eq!(ack[ack.len() - 2..], [0x80, 1], "{ack:?}");
    sidecar.stop().await;

    // Held to it: told 1 s instead of none, a silent client is cut off
    // after 1.5 s.
    let mut config = common::test_config();
    config.mqtt.max_keep_alive_s = 1;
    let sidecar = TestSidecar::start_with(config).await;
    let mut silent = Client::open(sidecar.mqtt).await;
    let connect = m5::connect(&unique("silent"), true, &Props::new());
    silent.send(&with_keep_alive(connect, 0)).await;
    let ack = m5::connack(&silent.recv().await.expect("CONNACK"));
    assert_eq!(ack.props.get(SERVER_KEEP_ALIVE), Some(1));
    let last = silent.until_closed().await;
    assert!(
        last.iter().all(|p| p[0] == 0xE0),
        "nothing but a DISCONNECT: {last:?}"
    );
    sidecar.stop().await;
}
