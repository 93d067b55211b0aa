//! MQTT 5 subscriptions as a client sees them on the wire (issue 32, rumqttd
//! patch 14): the subscription options No Local, Retain As Published and
//! Retain Handling (§3.8.3.1), a repeated SUBSCRIBE replacing the
//! subscription (§3.8.4), one delivery for overlapping subscriptions
//! carrying every matching subscription's identifier (§3.3.4, as the Paho
//! suite's `test_subscribe_identifiers` asserts), and a SUBACK that means
//! "subscribed" (`test_request_response`).
//!
//! Raw MQTT 5 clients from the testkit, so that no client library filters
//! or merges deliveries on the test's behalf.

use lmos_testkit as common;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use common::mqtt5::{self as m5, connect5, options, Props, SUBSCRIPTION_ID};
use common::raw_mqtt::Client;
use common::TestSidecar;

/// How long a test waits for something that must not come.
const SETTLE: Duration = Duration::from_millis(300);

async fn on_sidecar<F: Future<Output = ()>>(case: impl FnOnce(SocketAddr) -> F) {
    let sidecar = TestSidecar::start().await;
    case(sidecar.mqtt).await;
    sidecar.stop().await;
}

fn unique(name: &str) -> String {
    format!("{name}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

async fn client(addr: SocketAddr, name: &str) -> Client {
    connect5(addr, &unique(name), true, &Props::new()).await.0
}

fn plain(topic: &str, qos: u8, retain: bool, pkid: u16, payload: &[u8]) -> Vec<u8> {
    m5::publish(topic, qos, retain, pkid, &Props::new(), payload)
}

/// SUBSCRIBE with a Subscription Identifier, asserting the QoS granted.
async fn subscribe_with_id(c: &mut Client, pkid: u16, id: u32, filter: &str, opts: u8) {
    let props = Props::new().int(SUBSCRIPTION_ID, id);
    c.send(&m5::subscribe(pkid, &props, &[(filter, opts)]))
        .await;
    let ack = c.recv().await.expect("SUBACK");
    assert_eq!(ack[0], 0x90, "SUBACK: {ack:?}");
    assert_eq!(ack[ack.len() - 1], opts & 3, "granted: {ack:?}");
}

/// What arrived unasked within [`SETTLE`], as publications.
async fn nothing_more(c: &mut Client, who: &str) {
    let unasked = c.quiet(SETTLE).await;
    assert!(unasked.is_empty(), "{who} got nothing more: {unasked:?}");
}

#[tokio::test]
async fn no_local_keeps_a_clients_own_publications_from_it() {
    on_sidecar(|addr| async move {
        let topic = unique("nolocal");
        let mut a = client(addr, "a").await;
        let mut b = client(addr, "b").await;
        a.subscribe_ok(1, &[(&topic, options(1, true, false, 0))])
            .await;
        b.subscribe_ok(1, &[(&topic, options(1, false, false, 0))])
            .await;
        a.publish_acked(&plain(&topic, 1, false, 7, b"from a"))
            .await;
        assert_eq!(b.next_publish(true).await.payload, b"from a");
        nothing_more(&mut a, "a, with No Local,").await;
        // No Local leaves out only the client's own publications.
        b.publish_acked(&plain(&topic, 1, false, 8, b"from b"))
            .await;
        assert_eq!(a.next_publish(true).await.payload, b"from b");
        assert_eq!(b.next_publish(true).await.payload, b"from b");
    })
    .await;
}

#[tokio::test]
async fn retain_as_published_keeps_the_flag_and_others_get_it_cleared() {
    on_sidecar(|addr| async move {
        let topic = unique("rap");
        let mut kept = client(addr, "kept").await;
        let mut cleared = client(addr, "cleared").await;
        kept.subscribe_ok(1, &[(&topic, options(1, false, true, 0))])
            .await;
        cleared
            .subscribe_ok(1, &[(&topic, options(1, false, false, 0))])
            .await;
        let mut p = client(addr, "pub").await;
        p.publish_acked(&plain(&topic, 1, true, 1, b"retained"))
            .await;
        p.publish_acked(&plain(&topic, 1, false, 2, b"not")).await;
        let (r, n) = (kept.next_publish(true).await, kept.next_publish(true).await);
        assert_eq!((r.payload.as_slice(), r.retain), (&b"retained"[..], true));
        assert_eq!((n.payload.as_slice(), n.retain), (&b"not"[..], false));
        for _ in 0..2 {
            let c = cleared.next_publish(true).await;
            assert!(!c.retain, "flag cleared without Retain As Published: {c:?}");
        }
        // A retained message sent for a new subscription always has it.
        let mut late = client(addr, "late").await;
        late.subscribe_ok(1, &[(&topic, options(1, false, false, 0))])
            .await;
        assert!(late.next_publish(true).await.retain);
    })
    .await;
}

#[tokio::test]
async fn retain_handling_sends_retained_messages_as_asked() {
    on_sidecar(|addr| async move {
        let topic = unique("rh");
        let filter = format!("{topic}/+");
        let mut p = client(addr, "pub").await;
        for (i, qos) in [0u8, 1, 2].into_iter().enumerate() {
            let retained = plain(&format!("{topic}/{qos}"), qos, true, 1 + i as u16, b"r");
            p.publish_acked(&retained).await;
        }
        // 1: on a new subscription only.
        let mut c = client(addr, "rh1").await;
        c.subscribe_ok(1, &[(&filter, options(2, false, false, 1))])
            .await;
        assert_eq!(retained_qos(&mut c, 3).await, vec![0, 1, 2]);
        c.subscribe_ok(2, &[(&filter, options(2, false, false, 1))])
            .await;
        nothing_more(&mut c, "a repeated subscription with Retain Handling 1").await;
        // 0: on every SUBSCRIBE, the repeated one too.
        for pkid in 3..5 {
            c.subscribe_ok(pkid, &[(&filter, options(2, false, false, 0))])
                .await;
            assert_eq!(retained_qos(&mut c, 3).await, vec![0, 1, 2]);
        }
        // 2: never; what is published afterwards arrives.
        let mut never = client(addr, "rh2").await;
        never
            .subscribe_ok(1, &[(&filter, options(2, false, false, 2))])
            .await;
        nothing_more(&mut never, "Retain Handling 2").await;
        p.publish_acked(&plain(&format!("{topic}/live"), 1, false, 9, b"l"))
            .await;
        let live = never.next_publish(true).await;
        assert_eq!((live.payload.as_slice(), live.retain), (&b"l"[..], false));
    })
    .await;
}

/// The QoS of the next `n` publications, sorted, each asserted retained.
async fn retained_qos(c: &mut Client, n: usize) -> Vec<u8> {
    let mut qos = Vec::new();
    for _ in 0..n {
        let r = c.next_publish(true).await;
        assert!(r.retain, "a retained message: {r:?}");
        qos.push(r.qos);
    }
    // PUBRELs of the QoS 2 one completed, and no more copies.
    nothing_more(c, "the subscriber, after the retained messages").await;
    qos.sort_unstable();
    qos
}

#[tokio::test]
async fn a_repeated_subscribe_replaces_the_subscription() {
    on_sidecar(|addr| async move {
        let topic = unique("again");
        let mut c = client(addr, "sub").await;
        subscribe_with_id(&mut c, 1, 5, &topic, options(0, false, false, 0)).await;
        subscribe_with_id(&mut c, 2, 6, &topic, options(1, false, false, 0)).await;
        let mut p = client(addr, "pub").await;
        p.publish_acked(&plain(&topic, 1, false, 1, b"x")).await;
        let got = c.next_publish(true).await;
        assert_eq!(got.qos, 1, "the new QoS: {got:?}");
        assert_eq!(got.props.all(SUBSCRIPTION_ID), vec![6], "{got:?}");
        nothing_more(&mut c, "the subscriber").await;
        // Caught up and waiting for news, the subscription is replaced
        // once more (no retained messages asked for) and still delivers.
        subscribe_with_id(&mut c, 3, 7, &topic, options(2, false, false, 1)).await;
        nothing_more(&mut c, "the subscriber").await;
        p.publish_acked(&plain(&topic, 2, false, 2, b"y")).await;
        let got = c.next_publish(true).await;
        assert_eq!((got.qos, got.payload.as_slice()), (2, &b"y"[..]), "{got:?}");
        assert_eq!(got.props.all(SUBSCRIPTION_ID), vec![7], "{got:?}");
    })
    .await;
}

#[tokio::test]
async fn overlapping_subscriptions_deliver_once_with_every_identifier() {
    on_sidecar(|addr| async move {
        let topic = unique("overlap");
        let mut c = client(addr, "sub").await;
        subscribe_with_id(&mut c, 1, 2, &topic, options(0, false, false, 0)).await;
        let wide = format!("{topic}/#");
        subscribe_with_id(&mut c, 2, 3, &wide, options(2, false, false, 0)).await;
        let mut p = client(addr, "pub").await;
        p.publish_acked(&plain(&topic, 2, false, 1, b"both")).await;
        let got = c.next_publish(true).await;
        let mut ids = got.props.all(SUBSCRIPTION_ID);
        ids.sort_unstable();
        assert_eq!(ids, vec![2, 3], "one delivery, both identifiers: {got:?}");
        assert_eq!(got.qos, 2, "the highest QoS granted: {got:?}");
        // Matching one of them: that one's identifier.
        p.publish_acked(&plain(&format!("{topic}/x"), 1, false, 2, b"one"))
            .await;
        let one = c.next_publish(true).await;
        assert_eq!(one.payload, b"one");
        assert_eq!(one.props.all(SUBSCRIPTION_ID), vec![3], "{one:?}");
        nothing_more(&mut c, "the subscriber").await;
        // Another client's single subscription is untouched.
        let mut other = client(addr, "other").await;
        subscribe_with_id(&mut other, 1, 9, &topic, options(1, false, false, 0)).await;
        p.publish_acked(&plain(&topic, 1, false, 3, b"again")).await;
        assert_eq!(c.next_publish(true).await.payload, b"again");
        let o = other.next_publish(true).await;
        assert_eq!(o.props.all(SUBSCRIPTION_ID), vec![9], "{o:?}");
        nothing_more(&mut c, "the subscriber").await;
    })
    .await;
}

#[tokio::test]
async fn unsubscribe_sends_no_retained_message() {
    on_sidecar(|addr| async move {
        let topic = unique("unsub");
        let mut p = client(addr, "pub").await;
        p.publish_acked(&plain(&topic, 1, true, 1, b"r")).await;
        let mut c = client(addr, "sub").await;
        c.subscribe_ok(1, &[(&topic, options(1, false, false, 0))])
            .await;
        assert!(c.next_publish(true).await.retain);
        c.send(&m5::unsubscribe(2, &topic)).await;
        let ack = c.recv().await.expect("UNSUBACK");
        assert_eq!(ack[0], 0xB0, "UNSUBACK, not a publication: {ack:?}");
        nothing_more(&mut c, "the client that left").await;
    })
    .await;
}

/// A SUBACK means "subscribed": what another client publishes right after
/// it reaches the subscription, every time.
#[tokio::test]
async fn a_publication_right_after_the_suback_reaches_the_subscription() {
    on_sidecar(|addr| async move {
        let mut p = client(addr, "pub").await;
        for round in 0..20u16 {
            let topic = unique("suback");
            let mut c = client(addr, "sub").await;
            c.subscribe_ok(1, &[(&topic, options(1, true, false, 0))])
                .await;
            p.publish_acked(&plain(&topic, 1, false, 1 + round, b"now"))
                .await;
            assert_eq!(c.next_publish(true).await.payload, b"now", "round {round}");
        }
    })
    .await;
}

/// One delivery for overlapping subscriptions up to 32 filters matching the
/// topic; beyond, one per subscription (each with its own identifier), so
/// that a client holding many overlapping filters cannot make the broker
/// compare each of them with all the others for every publication.
#[tokio::test]
async fn many_overlapping_subscriptions_get_a_copy_each() {
    on_sidecar(|addr| async move {
        let root = unique("many");
        let topic = format!("{root}/a/b/c/d/e");
        let mut c = client(addr, "sub").await;
        for mask in 0..32u32 {
            let levels: Vec<&str> = ["a", "b", "c", "d", "e"]
                .iter()
                .enumerate()
                .map(|(i, l)| if mask & (1 << i) != 0 { "+" } else { *l })
                .collect();
            let filter = format!("{root}/{}", levels.join("/"));
            let pkid = 1 + mask as u16;
            subscribe_with_id(&mut c, pkid, 1 + mask, &filter, options(1, false, false, 0)).await;
        }
        let mut p = client(addr, "pub").await;
        p.publish_acked(&plain(&topic, 1, false, 1, b"32")).await;
        let once = c.next_publish(true).await;
        assert_eq!(once.props.all(SUBSCRIPTION_ID).len(), 32, "{once:?}");
        nothing_more(&mut c, "32 overlapping subscriptions").await;
        let wide = format!("{root}/#");
        subscribe_with_id(&mut c, 100, 100, &wide, options(1, false, false, 0)).await;
        p.publish_acked(&plain(&topic, 1, false, 2, b"33")).await;
        let mut ids = Vec::new();
        for _ in 0..33 {
            let copy = c.next_publish(true).await;
            assert_eq!(copy.props.all(SUBSCRIPTION_ID).len(), 1, "{copy:?}");
            ids.extend(copy.props.all(SUBSCRIPTION_ID));
        }
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 33, "every identifier once: {ids:?}");
        nothing_more(&mut c, "33 overlapping subscriptions").await;
    })
    .await;
}

/// A SUBSCRIBE another client sent just before a publication takes effect
/// first, as on a single-threaded broker (the Paho suite's
/// `test_request_response` and `test_subscribe_options` publish right after
/// another client's SUBSCRIBE without waiting for its SUBACK). Measured:
/// without the guard's ordering ([`order`](../../src/broker/guard/order.rs))
/// about half the rounds missed the publication (23 of 50), with it 0-1 of
/// 50 with the test's client on the sidecar's runtime, none of 60 with
/// the sidecar a process of its own. Several
/// worker threads, as the sidecar runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_right_after_another_clients_subscribe_reaches_it() {
    on_sidecar(|addr| async move {
        let mut p = client(addr, "pub").await;
        let mut c = client(addr, "sub").await;
        let mut missed = Vec::new();
        for round in 0..50u16 {
            let topic = unique("order");
            tokio::time::sleep(Duration::from_millis(5)).await;
            // Back to back, the SUBACK not awaited.
            c.send(&m5::subscribe(round + 1, &Props::new(), &[(&topic, 0)]))
                .await;
            p.send(&plain(&topic, 0, false, 0, b"right after")).await;
            let got = c.quiet(Duration::from_millis(100)).await;
            if !got.iter().any(|packet| packet[0] >> 4 == 3) {
                missed.push(round);
            }
        }
        // A few in fifty at most, for a machine whose threads stall at the
        // wrong microsecond (without the ordering, about half).
        assert!(missed.len() <= 3, "missed in rounds {missed:?}");
    })
    .await;
}
