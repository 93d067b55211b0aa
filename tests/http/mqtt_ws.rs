//! MQTT over WebSocket (`/mqtt` on the HTTP port), written byte by byte:
//! both protocol versions reach and are reached by TCP clients of the same
//! broker; packets may span frames and frames carry several packets; what
//! is not MQTT over WebSocket (a text frame, no `mqtt` subprotocol, no
//! WebSocket at all, a page on another origin) is refused; and the guard's
//! rules hold as on the MQTT port: credentials, per-Thing rights, the
//! packet size limit, the CONNECT deadline.

use lmos_sidecar::auth::credentials::sha256_hex;
use lmos_sidecar::config::PrincipalConfig;
use lmos_testkit::mqtt_ws::WsMqtt;
use lmos_testkit::raw_mqtt::{self, connect_login, connect_with, publish, published, subscribe};
use lmos_testkit::{test_config, TestSidecar};

const THING: &str = "urn:test:lamp";

fn events() -> String {
    format!("lmos/{THING}/events/switched")
}

/// Connects over `/mqtt` at `level` without credentials; the CONNACK's
/// return code (3.1.1) or reason code (5).
async fn connect(ws: &mut WsMqtt, level: u8, id: &str) -> u8 {
    ws.send(&connect_with(level, id, true, 60)).await;
    let ack = ws.recv().await.expect("CONNACK");
    assert_eq!(ack[0], 0x20, "{ack:?}");
    ack[3]
}

#[tokio::test]
async fn both_versions_publish_and_subscribe_with_tcp_clients_of_the_same_broker() {
    let sidecar = TestSidecar::start().await;
    for level in [4u8, 5] {
        let mut ws = WsMqtt::open(sidecar.http).await;
        assert_eq!(connect(&mut ws, level, &format!("ws-{level}")).await, 0);
        ws.send(&subscribe(level, 1, &[(&events(), 1)])).await;
        let suback = ws.recv().await.expect("SUBACK");
        assert_eq!(
            (suback[0], *suback.last().unwrap()),
            (0x90, 1),
            "{suback:?}"
        );

        // A TCP client's publication reaches the WebSocket subscriber.
        let mut tcp =
            raw_mqtt::Client::connect_clean(sidecar.mqtt, level, &format!("tcp-{level}")).await;
        tcp.send(&publish(level, &events(), 1, 7, &[], b"{\"on\":true}"))
            .await;
        assert_eq!(tcp.recv().await.expect("PUBACK")[0], 0x40);
        let got = ws.recv().await.expect("PUBLISH");
        assert_eq!(got[0] & 0xF0, 0x30, "{got:?}");
        assert_eq!(
            published(level, &got),
            (events(), b"{\"on\":true}".to_vec())
        );

        // And the WebSocket client's reaches a TCP subscriber, acknowledged.
        tcp.send(&subscribe(level, 2, &[(&events(), 0)])).await;
        assert_eq!(tcp.recv().await.expect("SUBACK")[0], 0x90);
        ws.send(&publish(level, &events(), 1, 9, &[], b"from the page"))
            .await;
        let mut acked = false;
        while !acked {
            let p = ws.recv().await.expect("PUBACK");
            acked = p[0] == 0x40 && p[2..4] == [0, 9];
        }
        let got = tcp.recv().await.expect("PUBLISH to the TCP subscriber");
        assert_eq!(published(level, &got).1, b"from the page");
    }
    sidecar.stop().await;
}

#[tokio::test]
async fn packets_may_span_frames_and_frames_may_carry_several() {
    let sidecar = TestSidecar::start().await;
    let mut ws = WsMqtt::open(sidecar.http).await;
    let connect = connect_with(5, "cut", true, 60);
    ws.send_cut(&connect, &[1, 2, 7]).await;
    assert_eq!(ws.recv().await.expect("CONNACK")[0], 0x20);
    let mut both = subscribe(5, 1, &[(&events(), 0)]);
    both.extend_from_slice(&[0xC0, 0]);
    ws.send(&both).await;
    assert_eq!(ws.recv().await.expect("SUBACK")[0], 0x90);
    assert_eq!(ws.recv().await.expect("PINGRESP"), [0xD0, 0]);
    sidecar.stop().await;
}

#[tokio::test]
async fn a_text_frame_ends_the_connection_and_others_go_on() {
    let sidecar = TestSidecar::start().await;
    let mut other = WsMqtt::open(sidecar.http).await;
    assert_eq!(connect(&mut other, 4, "other").await, 0);
    let mut ws = WsMqtt::open(sidecar.http).await;
    assert_eq!(connect(&mut ws, 4, "texting").await, 0);
    ws.send_text("{\"not\":\"mqtt\"}").await;
    assert_eq!(ws.recv().await, None, "the connection closes");
    other.send(&[0xC0, 0]).await;
    assert_eq!(other.recv().await.expect("PINGRESP"), [0xD0, 0]);
    sidecar.stop().await;
}

#[tokio::test]
async fn handshakes_that_are_not_mqtt_over_websocket_are_refused() {
    let sidecar = TestSidecar::start().await;
    let no_subprotocol = WsMqtt::open_with(sidecar.http, None, None).await;
    assert_eq!(no_subprotocol.err(), Some(400));
    let other = WsMqtt::open_with(sidecar.http, Some("lmosprotocol"), None).await;
    assert_eq!(other.err(), Some(400));
    let plain = lmos_testkit::http(sidecar.http, "GET", "/mqtt", None, b"").await;
    assert_eq!(plain.status, 426, "{plain:?}");
    // A page on another origin: refused before any MQTT.
    let foreign = WsMqtt::open_with(sidecar.http, Some("mqtt"), Some("http://evil.example")).await;
    assert_eq!(foreign.err(), Some(403));
    // The sidecar's own origin (the console's page) is let in.
    let own = format!("http://{}", sidecar.http);
    assert!(WsMqtt::open_with(sidecar.http, Some("mqtt"), Some(&own))
        .await
        .is_ok());
    sidecar.stop().await;
}

#[tokio::test]
async fn it_is_off_when_configured_so() {
    let mut config = test_config();
    config.mqtt.websocket = false;
    let sidecar = TestSidecar::start_with(config).await;
    let refused = WsMqtt::open_with(sidecar.http, Some("mqtt"), None).await;
    assert_eq!(refused.err(), Some(404));
    sidecar.stop().await;
}

const BOB: &str = "bob-secret";

/// Authentication on; Bob consumes his own Things only.
fn with_bob() -> lmos_sidecar::Config {
    let mut config = test_config();
    config.mqtt.authentication = true;
    config.mqtt.connection_timeout_ms = 500;
    config.auth.principals = vec![PrincipalConfig {
        name: "bob".into(),
        token_sha256: sha256_hex(BOB.as_bytes()),
        consume: vec!["urn:bob:*".into()],
        ..PrincipalConfig::default()
    }];
    config
}

#[tokio::test]
async fn credentials_and_rights_hold_as_on_the_mqtt_port() {
    let sidecar = TestSidecar::start_with(with_bob()).await;
    // No credentials: not authorized (3.1.1 code 5, MQTT 5 0x87).
    let mut anonymous = WsMqtt::open(sidecar.http).await;
    assert_eq!(connect(&mut anonymous, 4, "anon").await, 5);
    let mut anonymous = WsMqtt::open(sidecar.http).await;
    assert_eq!(connect(&mut anonymous, 5, "anon5").await, 0x87);
    // A wrong token: bad user name or password.
    let mut wrong = WsMqtt::open(sidecar.http).await;
    wrong.send(&connect_login(5, "wrong", "bob", "nope")).await;
    assert_eq!(wrong.recv().await.expect("CONNACK")[3], 0x86);
    // Bob: his own Thing yes, another's no.
    let mut bob = WsMqtt::open(sidecar.http).await;
    bob.send(&connect_login(5, "bob", "bob", BOB)).await;
    assert_eq!(bob.recv().await.expect("CONNACK")[3], 0);
    let own = "lmos/urn:bob:lamp/events/switched";
    bob.send(&subscribe(5, 1, &[(own, 0), (&events(), 0)]))
        .await;
    let suback = bob.recv().await.expect("SUBACK");
    assert_eq!(suback[suback.len() - 2..], [0, 0x87], "{suback:?}");
    sidecar.stop().await;
}

#[tokio::test]
async fn a_socket_that_never_connects_is_closed_at_the_deadline() {
    let sidecar = TestSidecar::start_with(with_bob()).await;
    let mut silent = WsMqtt::open(sidecar.http).await;
    // mqtt.connection_timeout_ms = 500: closed without a CONNACK.
    assert_eq!(silent.recv().await, None);
    sidecar.stop().await;
}

#[tokio::test]
async fn a_packet_over_the_size_limit_ends_the_connection() {
    let mut config = test_config();
    config.mqtt.max_payload_size = 1024;
    let sidecar = TestSidecar::start_with(config).await;
    let mut ws = WsMqtt::open(sidecar.http).await;
    assert_eq!(connect(&mut ws, 5, "big").await, 0);
    ws.send(&publish(5, &events(), 0, 0, &[], &vec![b'x'; 200_000]))
        .await;
    // Closed (recv ends): MQTT 5 may say why first, DISCONNECT 0x95.
    while let Some(p) = ws.recv().await {
        assert_eq!(p[0], 0xE0, "nothing but a DISCONNECT before the end: {p:?}");
    }
    sidecar.stop().await;
}
