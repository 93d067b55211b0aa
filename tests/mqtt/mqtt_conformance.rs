//! The MQTT face against clients nobody here wrote: every packet a client
//! must not send, malformed filters and topics, MQTT 5 properties meeting
//! MQTT 3.1.1 subscribers, UNSUBSCRIBE of what is not held, keep-alive 0,
//! a message claiming another Thing. After each attack, new 3.1.1 and 5
//! clients still connect, subscribe and receive on both ports.
//!
//! Each behaviour is one the Paho interoperability suite
//! (`eclipse/paho.mqtt.testing`, `interoperability/client_test*.py`) or
//! the MQTT specifications assert; the bytes are written out so that no
//! client library smooths them over.

use lmos_testkit as common;

use std::net::SocketAddr;

use common::raw_mqtt::{self as raw, Client};
use common::{http, TestSidecar};

const PORTS: [fn(&TestSidecar) -> SocketAddr; 2] = [|s| s.mqtt, |s| s.mqtt5];

/// Fresh MQTT 3.1.1 and 5 clients on both ports subscribe, publish and
/// receive, and the sidecar says it is healthy.
async fn everyone_still_served(sidecar: &TestSidecar, tag: &str) {
    for port in PORTS {
        let addr = port(sidecar);
        for level in [4u8, 5] {
            let topic = format!("still/{tag}/{}/{level}", addr.port());
            let mut sub = Client::connect_clean(addr, level, &format!("sub-{tag}-{level}")).await;
            sub.send(&raw::subscribe(level, 1, &[(&topic, 0)])).await;
            let ack = sub.recv().await.expect("SUBACK");
            assert_eq!(ack[0], 0x90, "SUBACK on {addr} v{level}: {ack:?}");
            assert_eq!(*ack.last().unwrap(), 0, "granted QoS 0: {ack:?}");
            let other = if level == 4 { 5 } else { 4 };
            let mut publisher =
                Client::connect_clean(addr, other, &format!("pub-{tag}-{level}")).await;
            publisher
                .send(&raw::publish(other, &topic, 0, 0, &[], b"hello"))
                .await;
            let got = sub.recv().await.expect("the publication");
            assert_eq!(raw::published(level, &got), (topic, b"hello".to_vec()));
        }
    }
    let health = http(sidecar.http, "GET", "/healthz", None, b"").await;
    assert_eq!(health.status, 200, "{}", health.body);
}

#[tokio::test]
async fn packets_only_a_server_sends_close_the_sender_and_nobody_else() {
    let sidecar = TestSidecar::start().await;
    // CONNACK, SUBACK, UNSUBACK, PINGRESP, reserved types 0 and 15 (AUTH
    // without an authentication method), a second CONNECT.
    let forbidden: [&[u8]; 7] = [
        &[0x20, 0x02, 0x00, 0x00],
        &[0x90, 0x03, 0x00, 0x01, 0x00],
        &[0xB0, 0x02, 0x00, 0x01],
        &[0xD0, 0x00],
        &[0x00, 0x00],
        &[0xF0, 0x00],
        &[
            0x10, 0x0D, 0, 4, b'M', b'Q', b'T', b'T', 4, 2, 0, 60, 0, 1, b'x',
        ],
    ];
    for port in PORTS {
        for level in [4u8, 5] {
            for (i, packet) in forbidden.iter().enumerate() {
                // The same client ID each time: rumqttd used to poison a
                // lock when a client ID whose connection had panicked came
                // back.
                let mut c = Client::connect_clean(port(&sidecar), level, "x1").await;
                c.send(packet).await;
                let last = c.until_closed().await;
                if level == 5 {
                    assert_eq!(
                        last.last().map(|p| p[0]),
                        Some(0xE0),
                        "v5 gets a DISCONNECT for packet {i}: {last:?}"
                    );
                    assert!(
                        matches!(last.last().unwrap()[2], 0x81 | 0x82),
                        "malformed or protocol error: {last:?}"
                    );
                } else {
                    assert!(last.is_empty(), "3.1.1 just closes: {last:?}");
                }
            }
        }
    }
    everyone_still_served(&sidecar, "server-packets").await;
    sidecar.stop().await;
}

#[tokio::test]
async fn reserved_flags_and_impossible_qos_close_the_connection() {
    let sidecar = TestSidecar::start().await;
    let cases: [(&str, Vec<u8>); 6] = [
        ("QoS 0 with DUP", raw::packet(0x38, &[0, 1, b't', b'x'])),
        ("QoS 3", raw::packet(0x36, &[0, 1, b't', 0, 1, 0, b'x'])),
        ("SUBSCRIBE flags 0", {
            let mut p = raw::subscribe(4, 1, &[("t", 0)]);
            p[0] = 0x80;
            p
        }),
        ("UNSUBSCRIBE flags 0", {
            let mut p = raw::unsubscribe(4, 1, &["t"]);
            p[0] = 0xA0;
            p
        }),
        ("PUBACK flags", raw::packet(0x41, &[0, 1])),
        ("PINGREQ with a body", raw::packet(0xC0, &[0])),
    ];
    for level in [4u8, 5] {
        for (what, packet) in &cases {
            let mut packet = packet.clone();
            if level == 5 && packet[0] >> 4 == 3 {
                // MQTT 5 PUBLISH: an empty property list before the payload.
                let at = packet.len() - 1;
                packet.insert(at, 0);
                packet[1] += 1;
            }
            let mut c = Client::connect_clean(sidecar.mqtt, level, "flags").await;
            c.send(&packet).await;
            let last = c.until_closed().await;
            if level == 5 {
                assert_eq!(last, vec![vec![0xE0, 1, 0x81]], "{what}");
            } else {
                assert!(last.is_empty(), "{what}: {last:?}");
            }
        }
    }
    // Reserved bits in a SUBSCRIBE's options.
    for (level, options) in [(4u8, 0x04u8), (4, 0x03), (5, 0x40), (5, 0x30)] {
        let mut c = Client::connect_clean(sidecar.mqtt5, level, "options").await;
        c.send(&raw::subscribe(level, 1, &[("t", options)])).await;
        let last = c.until_closed().await;
        assert!(
            last.iter().all(|p| p[0] != 0x90),
            "no SUBACK for options {options:#x}: {last:?}"
        );
    }
    everyone_still_served(&sidecar, "flags").await;
    sidecar.stop().await;
}

#[tokio::test]
async fn malformed_filters_are_refused_one_by_one() {
    let sidecar = TestSidecar::start().await;
    let filters = ["a+/#", "l#", "x/#+", "", "a/#/b", "$SYS/#", "ok/+/fine/#"];
    for (level, refused) in [(4u8, 0x80u8), (5, 0x8F)] {
        let mut c = Client::connect_clean(sidecar.mqtt, level, "filters").await;
        let with_qos: Vec<(&str, u8)> = filters.iter().map(|f| (*f, 1)).collect();
        c.send(&raw::subscribe(level, 7, &with_qos)).await;
        let ack = c.recv().await.expect("SUBACK");
        let codes = &ack[ack.len() - filters.len()..];
        assert_eq!(ack[0], 0x90);
        assert_eq!(
            codes,
            &[refused, refused, refused, refused, refused, refused, 1],
            "v{level}"
        );
        // The connection goes on, and the valid filter works.
        c.send(&raw::publish(level, "ok/1/fine/2", 0, 0, &[], b"p"))
            .await;
        let got = c.recv().await.expect("delivered");
        assert_eq!(raw::published(level, &got).1, b"p");
    }
    everyone_still_served(&sidecar, "filters").await;
    sidecar.stop().await;
}

#[tokio::test]
async fn publishing_to_a_wildcard_or_empty_topic_closes_the_connection() {
    let sidecar = TestSidecar::start().await;
    for topic in ["a/+", "a/#", "+", ""] {
        for level in [4u8, 5] {
            let mut watcher = Client::connect_clean(sidecar.mqtt, 4, "watcher").await;
            watcher
                .send(&raw::subscribe(4, 1, &[("a/#", 0), ("+", 0)]))
                .await;
            watcher.recv().await.expect("SUBACK");
            let mut c = Client::connect_clean(sidecar.mqtt, level, "wild").await;
            c.send(&raw::publish(level, topic, 1, 1, &[], b"x")).await;
            let last = c.until_closed().await;
            if level == 5 {
                assert_eq!(last, vec![vec![0xE0, 1, 0x90]], "{topic:?}");
            } else {
                assert!(last.is_empty(), "{topic:?}: {last:?}");
            }
            assert!(
                watcher.until_pong().await.is_empty(),
                "nothing was published to {topic:?}"
            );
        }
    }
    everyone_still_served(&sidecar, "wild").await;
    sidecar.stop().await;
}

#[tokio::test]
async fn mqtt5_properties_reach_mqtt5_subscribers_and_spare_311_ones() {
    let sidecar = TestSidecar::start().await;
    let mut v4 = Client::connect_clean(sidecar.mqtt, 4, "victim").await;
    v4.send(&raw::subscribe(4, 1, &[("t/props", 1)])).await;
    v4.recv().await.expect("SUBACK");
    let mut v5 = Client::connect_clean(sidecar.mqtt5, 5, "v5-sub").await;
    v5.send(&raw::subscribe(5, 1, &[("t/props", 1)])).await;
    v5.recv().await.expect("SUBACK");

    // User property k=v, content type "text/plain".
    let mut props = vec![0x26, 0, 1, b'k', 0, 1, b'v'];
    props.extend([0x03, 0, 10]);
    props.extend(b"text/plain");
    let mut publisher = Client::connect_clean(sidecar.mqtt, 5, "props-pub").await;
    publisher
        .send(&raw::publish(5, "t/props", 1, 9, &props, b"payload"))
        .await;
    let ack = publisher.recv().await.expect("PUBACK");
    assert_eq!(&ack[..4], &[0x40, ack[1], 0, 9]);

    let got = v4.recv().await.expect("3.1.1 delivery");
    assert_eq!(
        raw::published(4, &got),
        ("t/props".into(), b"payload".to_vec())
    );
    let got = v5.recv().await.expect("MQTT 5 delivery");
    assert_eq!(raw::published(5, &got).1, b"payload");
    let has = |part: &[u8]| got.windows(part.len()).any(|w| w == part);
    assert!(has(&props[..7]), "the user property arrives: {got:?}");
    assert!(has(&props[7..]), "the content type arrives: {got:?}");
    everyone_still_served(&sidecar, "props").await;
    sidecar.stop().await;
}

#[tokio::test]
async fn unsubscribe_is_always_acknowledged_once() {
    let sidecar = TestSidecar::start().await;
    for level in [4u8, 5] {
        let mut c = Client::connect_clean(sidecar.mqtt, level, "unsub").await;
        // Nothing held.
        c.send(&raw::unsubscribe(level, 3, &["never/held"])).await;
        let ack = c.recv().await.expect("UNSUBACK");
        match level {
            4 => assert_eq!(ack, [0xB0, 2, 0, 3]),
            _ => assert_eq!(ack, [0xB0, 4, 0, 3, 0, 0x11]),
        }
        // Two held, one not: one UNSUBACK, a code each in MQTT 5.
        c.send(&raw::subscribe(level, 4, &[("u/a", 0), ("u/b", 0)]))
            .await;
        c.recv().await.expect("SUBACK");
        c.send(&raw::unsubscribe(level, 5, &["u/a", "nope", "u/b"]))
            .await;
        let ack = c.recv().await.expect("UNSUBACK");
        match level {
            4 => assert_eq!(ack, [0xB0, 2, 0, 5]),
            _ => assert_eq!(ack, [0xB0, 6, 0, 5, 0, 0, 0x11, 0]),
        }
        assert!(c.until_pong().await.is_empty(), "no second UNSUBACK");
        // Unsubscribed for real.
        c.send(&raw::publish(level, "u/a", 0, 0, &[], b"x")).await;
        assert!(c.until_pong().await.is_empty(), "nothing delivered");
    }
    sidecar.stop().await;
}

/// A CONNECT whose session outlives the connection: 3.1.1 clean session
/// 0; MQTT 5 clean start 0 with a Session Expiry Interval (without one,
/// an MQTT 5 session ends with its connection).
fn kept_session(level: u8, id: &str) -> Vec<u8> {
    let mut body = raw::string(b"MQTT");
    body.extend([level, 0, 0, 60]);
    if level == 5 {
        body.extend([5, 0x11, 0, 0, 0x0E, 0x10]); // 3600 s
    }
    body.extend(raw::string(id.as_bytes()));
    raw::packet(0x10, &body)
}

#[tokio::test]
async fn a_resumed_session_can_unsubscribe_what_it_subscribed_before() {
    let sidecar = TestSidecar::start().await;
    for level in [4u8, 5] {
        let id = format!("resume-{level}");
        let mut c = Client::open(sidecar.mqtt).await;
        c.send(&kept_session(level, &id)).await;
        c.recv().await.expect("CONNACK");
        c.send(&raw::subscribe(level, 1, &[("r/t", 0)])).await;
        c.recv().await.expect("SUBACK");
        c.send(&[0xE0, 0]).await;
        assert!(c.until_closed().await.is_empty());

        let mut c = Client::open(sidecar.mqtt5).await;
        c.send(&kept_session(level, &id)).await;
        let ack = c.recv().await.expect("CONNACK");
        assert_eq!((ack[0], ack[2], ack[3]), (0x20, 1, 0), "session present");
        c.send(&raw::publish(level, "r/t", 0, 0, &[], b"before"))
            .await;
        let got = c.recv().await.expect("the kept subscription delivers");
        assert_eq!(raw::published(level, &got).1, b"before");
        c.send(&raw::unsubscribe(level, 2, &["r/t"])).await;
        let ack = c.recv().await.expect("UNSUBACK");
        assert_eq!(&ack[..4], &[0xB0, ack[1], 0, 2]);
        if level == 5 {
            assert_eq!(ack[5], 0, "it existed: {ack:?}");
        }
        c.send(&raw::publish(level, "r/t", 0, 0, &[], b"after"))
            .await;
        assert!(c.until_pong().await.is_empty(), "unsubscribed");
        // Clean the session up.
        drop(c);
        let mut c = Client::open(sidecar.mqtt).await;
        c.send(&raw::connect_with(level, &id, true, 60)).await;
        c.recv().await.expect("CONNACK");
    }
    sidecar.stop().await;
}

#[tokio::test]
async fn keep_alive_zero_is_accepted_on_both_ports_and_versions() {
    let sidecar = TestSidecar::start().await;
    for port in PORTS {
        for level in [4u8, 5] {
            let mut c = Client::open(port(&sidecar)).await;
            c.send(&raw::connect_with(level, "no-keepalive", true, 0))
                .await;
            let ack = c.recv().await.expect("CONNACK");
            assert_eq!((ack[0], ack[3]), (0x20, 0), "accepted: {ack:?}");
            c.send(&raw::subscribe(level, 1, &[("ka/0", 1)])).await;
            c.recv().await.expect("SUBACK");
            c.send(&raw::publish(level, "ka/0", 1, 2, &[], b"x")).await;
            let mut got = Vec::new();
            while got.len() < 2 {
                got.push(c.recv().await.expect("PUBACK and PUBLISH"));
            }
            assert!(got.iter().any(|p| p[0] >> 4 == 4), "PUBACK: {got:?}");
            assert!(got.iter().any(|p| p[0] >> 4 == 3), "PUBLISH: {got:?}");
        }
    }
    sidecar.stop().await;
}

#[tokio::test]
async fn a_message_claiming_another_thing_is_not_delivered() {
    let sidecar = TestSidecar::start().await;
    let topic = "lmos/urn:a/events/e";
    let mut watcher = Client::connect_clean(sidecar.mqtt, 5, "claims").await;
    watcher.send(&raw::subscribe(5, 1, &[(topic, 1)])).await;
    watcher.recv().await.expect("SUBACK");
    let forged =
        br#"{"thingID":"urn:b","messageID":"m","messageType":"event","event":"e","data":1}"#;
    let honest =
        br#"{"thingID":"urn:a","messageID":"m","messageType":"event","event":"e","data":1}"#;
    for level in [4u8, 5] {
        let mut c = Client::connect_clean(sidecar.mqtt, level, "forger").await;
        c.send(&raw::publish(level, topic, 1, 3, &[], forged)).await;
        let ack = c.recv().await.expect("PUBACK");
        match level {
            4 => assert_eq!(ack, [0x40, 2, 0, 3]),
            _ => assert_eq!(ack, [0x40, 3, 0, 3, 0x99], "payload format invalid"),
        }
        c.send(&raw::publish(level, topic, 1, 4, &[], honest)).await;
        c.recv().await.expect("PUBACK");
        let got = watcher.recv().await.expect("the honest one");
        assert_eq!(raw::published(5, &got).1, honest);
    }
    assert!(
        watcher.until_pong().await.is_empty(),
        "the forged ones never"
    );
    sidecar.stop().await;
}

/// A CONNECT with keep-alive `keep_alive` and a QoS 1 will `message` on
/// `topic`.
fn connect_with_will(
    level: u8,
    client_id: &str,
    keep_alive: u16,
    topic: &str,
    message: &[u8],
) -> Vec<u8> {
    let mut body = raw::string(b"MQTT");
    // Clean start, will, will QoS 1.
    body.extend([level, 0x02 | 0x04 | 0x08]);
    body.extend(keep_alive.to_be_bytes());
    if level == 5 {
        body.push(0);
    }
    body.extend(raw::string(client_id.as_bytes()));
    if level == 5 {
        body.push(0);
    }
    body.extend(raw::string(topic.as_bytes()));
    body.extend(raw::string(message));
    raw::packet(0x10, &body)
}

/// Paho's `test_keepalive`: a client that sends nothing for one and a half
/// times its keep-alive is cut off and its will published; one that pings
/// in time stays (counting from the CONNECT alone would cut it off).
#[tokio::test]
async fn a_client_silent_past_its_keep_alive_is_cut_off_and_its_will_fires() {
    let sidecar = TestSidecar::start().await;
    for level in [4u8, 5] {
        let topic = format!("keepalive/will/{level}");
        let mut watcher = Client::connect_clean(sidecar.mqtt, 5, &format!("w{level}")).await;
        watcher.send(&raw::subscribe(5, 1, &[(&topic, 1)])).await;
        watcher.recv().await.expect("SUBACK");

        // Pings every half second for two seconds: twice its keep-alive.
        let mut pinging = Client::open(sidecar.mqtt).await;
        pinging
            .send(&connect_with_will(
                level,
                &format!("p{level}"),
                1,
                &topic,
                b"pinger gone",
            ))
            .await;
        assert_eq!(pinging.recv().await.expect("CONNACK")[0], 0x20);
        for _ in 0..4 {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            pinging.send(&[0xC0, 0]).await;
            assert!(
                pinging.until_closed_or_pong().await,
                "v{level}: still connected"
            );
        }
        // Gone without its will.
        pinging.send(&[0xE0, 0]).await;
        assert!(pinging.until_closed().await.is_empty());

        let mut silent = Client::open(sidecar.mqtt).await;
        silent
            .send(&connect_with_will(
                level,
                &format!("s{level}"),
                1,
                &topic,
                b"keepalive expiry",
            ))
            .await;
        let connected = tokio::time::Instant::now();
        assert_eq!(silent.recv().await.expect("CONNACK")[0], 0x20);
        let last = silent.until_closed().await;
        assert!(
            last.iter().all(|p| p[0] == 0xE0),
            "v{level}: nothing but a DISCONNECT: {last:?}"
        );
        let after = connected.elapsed();
        assert!(
            after >= std::time::Duration::from_millis(1400),
            "v{level}: not cut off before 1.5 keep-alives: {after:?}"
        );
        let will = watcher.recv().await.expect("the will");
        assert_eq!(
            raw::published(5, &will),
            (topic.clone(), b"keepalive expiry".to_vec()),
            "v{level}"
        );
    }
    sidecar.stop().await;
}

/// An MQTT 5 CONNECT with Session Expiry `expiry` and a QoS 1 will on
/// `topic` with Will Delay `delay` (seconds).
fn connect_with_delayed_will(
    client_id: &str,
    clean: bool,
    expiry: u32,
    delay: u32,
    topic: &str,
) -> Vec<u8> {
    let mut body = raw::string(b"MQTT");
    body.extend([5, if clean { 0x02 } else { 0 } | 0x04 | 0x08, 0, 60]);
    body.push(5);
    body.push(0x11);
    body.extend(expiry.to_be_bytes());
    body.extend(raw::string(client_id.as_bytes()));
    body.push(5);
    body.push(0x18);
    body.extend(delay.to_be_bytes());
    body.extend(raw::string(topic.as_bytes()));
    body.extend(raw::string(b"delayed will"));
    raw::packet(0x10, &body)
}

/// The next packet within `within`, if any came.
async fn will_within(watcher: &mut Client, within: std::time::Duration) -> Option<Vec<u8>> {
    tokio::time::timeout(within, watcher.recv())
        .await
        .ok()
        .flatten()
}

/// Paho's `test_will_delay`: a client gone without DISCONNECT has its will
/// published after its Will Delay, or at once when its session ends first
/// (Session Expiry 0); a client back in time with its session kept
/// cancels it.
#[tokio::test]
async fn a_will_waits_out_its_delay_and_a_return_in_time_cancels_it() {
    use std::time::Duration;
    let sidecar = TestSidecar::start().await;
    let mut watcher = Client::connect_clean(sidecar.mqtt5, 5, "will-watcher").await;
    watcher
        .send(&raw::subscribe(5, 1, &[("willdelay/+", 1)]))
        .await;
    watcher.recv().await.expect("SUBACK");
    // Delay 2 s, session kept 10 s: the will comes after 2 s.
    let mut gone = Client::open(sidecar.mqtt5).await;
    gone.send(&connect_with_delayed_will(
        "delayed",
        true,
        10,
        2,
        "willdelay/a",
    ))
    .await;
    assert_eq!(gone.recv().await.expect("CONNACK")[0], 0x20);
    let left = tokio::time::Instant::now();
    drop(gone);
    let will = will_within(&mut watcher, Duration::from_secs(5))
        .await
        .expect("the will");
    let after = left.elapsed();
    assert_eq!(raw::published(5, &will).0, "willdelay/a");
    assert!(
        after >= Duration::from_millis(1500) && after < Duration::from_millis(3500),
        "after its 2 s delay: {after:?}"
    );

    // Delay 5 s but no session to outlive the connection: at once.
    let mut gone = Client::open(sidecar.mqtt5).await;
    gone.send(&connect_with_delayed_will(
        "sessionless",
        true,
        0,
        5,
        "willdelay/b",
    ))
    .await;
    assert_eq!(gone.recv().await.expect("CONNACK")[0], 0x20);
    drop(gone);
    let will = will_within(&mut watcher, Duration::from_secs(1))
        .await
        .expect("the will at once");
    assert_eq!(raw::published(5, &will).0, "willdelay/b");

    // Back within the delay, session resumed: no will.
    let mut gone = Client::open(sidecar.mqtt5).await;
    gone.send(&connect_with_delayed_will(
        "returning",
        true,
        10,
        2,
        "willdelay/c",
    ))
    .await;
    assert_eq!(gone.recv().await.expect("CONNACK")[0], 0x20);
    drop(gone);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut back = Client::open(sidecar.mqtt5).await;
    back.send(&connect_with_delayed_will(
        "returning",
        false,
        10,
        2,
        "willdelay/c",
    ))
    .await;
    assert_eq!(back.recv().await.expect("CONNACK")[0], 0x20);
    assert!(
        will_within(&mut watcher, Duration::from_secs(3))
            .await
            .is_none(),
        "a returning client's will is cancelled"
    );
    back.send(&[0xE0, 0]).await;
    sidecar.stop().await;
}
