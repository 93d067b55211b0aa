//! Shared subscriptions (`$share/{name}/{filter}`, MQTT 5 §4.8.2) as
//! clients see them (rumqttd patch 28): one group per share name and
//! filter, a kept session's membership across its disconnection, and a
//! router that survives a kept member leaving with a delivery in flight
//! (upstream rumqttd panicked there, taking the whole broker down); and, on
//! the same resume path, the packet identifiers of what a resumed session
//! gets again (patch 29).

use lmos_testkit as common;

use std::net::SocketAddr;
use std::time::Duration;

use common::mqtt5::{self as m5, connect5, Props, SESSION_EXPIRY};
use common::raw_mqtt::Client;
use common::TestSidecar;

fn unique(name: &str) -> String {
    format!("{name}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

fn kept() -> Props {
    Props::new().int(SESSION_EXPIRY, 600)
}

async fn publish(c: &mut Client, topic: &str, pkid: u16, payload: &[u8]) {
    c.publish_acked(&m5::publish(topic, 1, false, pkid, &Props::new(), payload))
        .await;
}

async fn publisher(addr: SocketAddr) -> Client {
    connect5(addr, &unique("shared-pub"), true, &Props::new())
        .await
        .0
}

#[tokio::test]
async fn a_kept_member_leaving_with_a_delivery_in_flight_keeps_it_and_the_broker() {
    let sidecar = TestSidecar::start().await;
    let addr = sidecar.mqtt;
    let id = unique("shared-kept");
    let (mut member, _) = connect5(addr, &id, false, &kept()).await;
    assert_eq!(
        member.subscribe_ok(1, &[("$share/g/shared/t", 1)]).await,
        [1]
    );
    let mut publisher = publisher(addr).await;
    publish(&mut publisher, "shared/t", 1, b"one").await;
    assert_eq!(member.next_publish(false).await.payload, b"one");
    // Gone without acknowledging: the router keeps the session, and the
    // group, whose only member is now away.
    drop(member);
    tokio::time::sleep(Duration::from_millis(200)).await;
    publish(&mut publisher, "shared/t", 2, b"two").await;

    let (mut member, ack) = connect5(addr, &id, false, &kept()).await;
    assert!(ack.session_present);
    let again = member.next_publish(true).await;
    assert_eq!((again.payload.as_slice(), again.dup), (&b"one"[..], true));
    assert_eq!(
        member.next_publish(true).await.payload,
        b"two",
        "sent while away"
    );
    publish(&mut publisher, "shared/t", 3, b"three").await;
    assert_eq!(member.next_publish(true).await.payload, b"three");
    // And every other client is still served.
    let (mut other, _) = connect5(addr, &unique("other"), true, &Props::new()).await;
    assert_eq!(other.subscribe_ok(1, &[("other/t", 1)]).await, [1]);
    publish(&mut publisher, "other/t", 4, b"alive").await;
    assert_eq!(other.next_publish(true).await.payload, b"alive");
    sidecar.stop().await;
}

#[tokio::test]
async fn one_share_name_over_two_filters_is_two_shared_subscriptions() {
    let sidecar = TestSidecar::start().await;
    let (mut member, _) = connect5(sidecar.mqtt, &unique("two"), true, &Props::new()).await;
    let granted = member
        .subscribe_ok(1, &[("$share/g/two/a", 1), ("$share/g/two/b", 1)])
        .await;
    assert_eq!(granted, [1, 1]);
    let mut publisher = publisher(sidecar.mqtt).await;
    let mut got = Vec::new();
    for round in 0..3u16 {
        publish(
            &mut publisher,
            "two/a",
            2 * round + 1,
            format!("a{round}").as_bytes(),
        )
        .await;
        publish(
            &mut publisher,
            "two/b",
            2 * round + 2,
            format!("b{round}").as_bytes(),
        )
        .await;
        for _ in 0..2 {
            got.push(String::from_utf8(member.next_publish(true).await.payload).unwrap());
        }
    }
    got.sort();
    assert_eq!(got, ["a0", "a1", "a2", "b0", "b1", "b2"]);
    assert!(member.quiet(Duration::from_millis(300)).await.is_empty());
    sidecar.stop().await;
}

#[tokio::test]
async fn unsubscribing_another_filter_keeps_the_shared_subscription() {
    let sidecar = TestSidecar::start().await;
    let (mut member, _) = connect5(sidecar.mqtt, &unique("stay"), true, &Props::new()).await;
    let (mut peer, _) = connect5(sidecar.mqtt, &unique("peer"), true, &Props::new()).await;
    assert_eq!(
        member
            .subscribe_ok(1, &[("$share/g/stay/t", 1), ("else/t", 1)])
            .await,
        [1, 1]
    );
    assert_eq!(peer.subscribe_ok(1, &[("$share/g/stay/t", 1)]).await, [1]);
    member.send(&m5::unsubscribe(2, "else/t")).await;
    let unsuback = member.recv().await.expect("UNSUBACK");
    assert_eq!(unsuback[0], 0xB0, "{unsuback:?}");
    let mut publisher = publisher(sidecar.mqtt).await;
    for n in 0..4u16 {
        publish(&mut publisher, "stay/t", n + 1, b"shared").await;
    }
    let (mine, theirs) = (
        member.quiet(Duration::from_millis(500)).await.len(),
        peer.quiet(Duration::from_millis(10)).await.len(),
    );
    assert_eq!(mine + theirs, 4, "each once, to one member");
    assert!(
        mine > 0 && theirs > 0,
        "both still members: {mine} and {theirs}"
    );
    sidecar.stop().await;
}

/// What a kept session was sent and had not acknowledged comes again under the
/// packet identifiers it was sent under, flagged DUP (MQTT-4.4.0-1), so a
/// QoS 2 receiver can tell it has it already.
#[tokio::test]
async fn a_resumed_session_gets_its_unacknowledged_publications_under_their_identifiers() {
    let sidecar = TestSidecar::start().await;
    let addr = sidecar.mqtt;
    let id = unique("resend");
    let (mut member, _) = connect5(addr, &id, false, &kept()).await;
    assert_eq!(member.subscribe_ok(1, &[("resend/#", 2)]).await, [2]);
    let mut publisher = publisher(addr).await;
    // Two acknowledged first, so that the identifiers in flight are not
    // the ones a fresh connection would start with.
    for n in 10..12u16 {
        publish(&mut publisher, "resend/t", n, b"acknowledged").await;
        assert_eq!(member.next_publish(true).await.payload, b"acknowledged");
    }
    for (n, qos) in [(1u16, 1u8), (2, 2), (3, 1)] {
        let body = format!("m{n}");
        let publish = m5::publish("resend/t", qos, false, n, &Props::new(), body.as_bytes());
        publisher.publish_acked(&publish).await;
    }
    let mut first = Vec::new();
    for _ in 0..3 {
        let p = member.next_publish(false).await;
        first.push((p.pkid.expect("QoS 1 or 2"), p.payload));
    }
    drop(member);
    tokio::time::sleep(Duration::from_millis(200)).await;

    let (mut member, ack) = connect5(addr, &id, false, &kept()).await;
    assert!(ack.session_present);
    for (pkid, payload) in &first {
        let again = member.next_publish(true).await;
        assert_eq!(
            (again.pkid, &again.payload, again.dup),
            (Some(*pkid), payload, true),
            "the same identifier, DUP"
        );
    }
    publish(&mut publisher, "resend/t", 9, b"new").await;
    let new = member.next_publish(true).await;
    assert_eq!(new.payload, b"new");
    assert!(!new.dup);
    assert!(
        first.iter().all(|(pkid, _)| Some(*pkid) != new.pkid),
        "a new identifier for a new publication"
    );
    sidecar.stop().await;
}
