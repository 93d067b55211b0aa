//! Client certificates as identities on the MQTT listeners (issue 46):
//! with `mqtt.tls_client_ca`, a CONNECT without a password is its
//! certificate's principal (SPIFFE ID, else CN) and subscribes per that
//! entry's grants; a CONNECT with a user name and password is checked as
//! ever and wins; a certificate naming no entry gets CONNACK not
//! authorized (3.1.1: 5, MQTT 5: 0x87); no certificate where one is
//! required, or one from another CA, fails the TLS handshake.

use lmos_sidecar::auth::credentials::sha256_hex;
use lmos_sidecar::config::{ClientAuth, Grants, PrincipalConfig};
use lmos_testkit::mtls::{ClientCert, Pki};
use lmos_testkit::raw_mqtt::{connect_with, whole_packet};
use lmos_testkit::{self as common, MqttClient, TestSidecar, WAIT};
use rumqttc::{AsyncClient, ConnectReturnCode, Event, Packet, QoS, SubscribeReasonCode};
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WEATHER: &str = "spiffe://example.org/ns/agents/sa/weather";
const STRANGER: &str = "spiffe://example.org/ns/agents/sa/stranger";
const BILLING: &str = "billing";
const THING: &str = "urn:weather";

fn principal(name: &str, consume: &[&str]) -> PrincipalConfig {
    PrincipalConfig {
        name: name.into(),
        consume: consume.iter().map(|s| s.to_string()).collect(),
        ..PrincipalConfig::default()
    }
}

/// Client certificates from `pki`'s mesh CA (`auth`), `mqtt.authentication`
/// off: entries without secrets for the certificates' names, `alice` with
/// a token (her MQTT password); anonymous consumes `urn:public:*`.
fn config(pki: &Pki, auth: ClientAuth) -> lmos_sidecar::Config {
    let mut c = common::test_config();
    pki.configure(&mut c, auth);
    c.auth.anonymous = Grants {
        consume: vec!["urn:public:*".into()],
        ..Grants::default()
    };
    c.auth.principals = vec![
        principal(WEATHER, &[THING]),
        principal(BILLING, &["urn:billing:*"]),
        PrincipalConfig {
            token_sha256: sha256_hex(b"alice-token"),
            ..principal("alice", &["urn:alice:*"])
        },
    ];
    c
}

fn events(thing: &str) -> String {
    format!("lmos/{thing}/events/+")
}

/// How a 3.1.1 CONNECT over TLS with `cert` (and `credentials`) ends:
/// `Ok(None)` accepted, `Ok(Some(code))` refused, `Err` the connection
/// failed (the TLS handshake).
async fn connack(
    pki: &Pki,
    addr: SocketAddr,
    cert: Option<&ClientCert>,
    credentials: Option<(&str, &str)>,
) -> Result<Option<ConnectReturnCode>, String> {
    let mut o = rumqttc::MqttOptions::new("probe", addr.ip().to_string(), addr.port());
    o.set_transport(pki.mqtt_transport(cert));
    if let Some((user, password)) = credentials {
        o.set_credentials(user, password);
    }
    let (_client, mut eventloop) = AsyncClient::new(o, 10);
    loop {
        let polled = tokio::time::timeout(WAIT, eventloop.poll()).await;
        match polled.expect("an answer in time") {
            Ok(Event::Incoming(Packet::ConnAck(_))) => return Ok(None),
            Ok(_) => continue,
            Err(rumqttc::ConnectionError::ConnectionRefused(code)) => return Ok(Some(code)),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// The SUBACK codes for the events of `things`, connected with `cert`
/// (and `credentials`).
async fn subscribe(
    pki: &Pki,
    sidecar: &TestSidecar,
    cert: Option<&ClientCert>,
    credentials: Option<(&str, &str)>,
    things: &[&str],
) -> Vec<bool> {
    let transport = pki.mqtt_transport(cert);
    let id = format!("sub-{}", uuid::Uuid::new_v4());
    let mut client = MqttClient::connect_with(sidecar.mqtt, &id, move |o| {
        o.set_transport(transport);
        if let Some((user, password)) = credentials {
            o.set_credentials(user, password);
        }
    })
    .await;
    let filters: Vec<String> = things.iter().map(|t| events(t)).collect();
    let filters: Vec<&str> = filters.iter().map(String::as_str).collect();
    let codes = client.subscribe_codes(&filters).await;
    codes
        .into_iter()
        .map(|c| c == SubscribeReasonCode::Success(QoS::AtLeastOnce))
        .collect()
}

/// An MQTT 5 CONNECT without credentials over TLS: the CONNACK's reason.
async fn connack5(pki: &Pki, addr: SocketAddr, cert: &ClientCert) -> u8 {
    let mut tls = pki.tls(addr, Some(cert)).await.expect("TLS");
    tls.write_all(&connect_with(5, "v5", true, 60))
        .await
        .unwrap();
    let mut buf = Vec::new();
    while whole_packet(&buf).is_none() {
        let mut chunk = [0u8; 64];
        let n = tokio::time::timeout(WAIT, tls.read(&mut chunk))
            .await
            .expect("CONNACK in time")
            .expect("CONNACK");
        assert!(n > 0, "closed without a CONNACK: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(buf[0], 0x20, "{buf:?}");
    buf[3]
}

/// `lmos_sidecar_auth_failures_total` of MQTT for `reason` (over HTTPS).
async fn failures(pki: &Pki, sidecar: &TestSidecar, reason: &str) -> u64 {
    let weather = pki.spiffe(WEATHER);
    let r = pki.https(sidecar.http, Some(&weather), ("GET", "/metrics"), &[], b"");
    let text = r.await.expect("metrics").body;
    let prefix =
        format!(r#"lmos_sidecar_auth_failures_total{{reason="{reason}",transport="mqtt"}} "#);
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.parse().unwrap())
}

#[tokio::test]
async fn a_spiffe_id_subscribes_per_its_grants_and_a_password_wins() {
    let pki = Pki::new();
    let sidecar = TestSidecar::start_with(config(&pki, ClientAuth::Required)).await;
    let (weather, billing) = (pki.spiffe(WEATHER), pki.cn(BILLING));
    let things = [THING, "urn:other", "urn:alice:x"];

    assert_eq!(
        subscribe(&pki, &sidecar, Some(&weather), None, &things).await,
        [true, false, false]
    );
    assert_eq!(
        subscribe(&pki, &sidecar, Some(&billing), None, &things).await,
        [false, false, false]
    );
    // A user name and password are checked as ever, and win.
    let alice = Some(("alice", "alice-token"));
    assert_eq!(
        subscribe(&pki, &sidecar, Some(&weather), alice, &things).await,
        [false, false, true]
    );
    let wrong = Some(("alice", "wrong"));
    assert_eq!(
        connack(&pki, sidecar.mqtt, Some(&weather), wrong).await,
        Ok(Some(ConnectReturnCode::BadUserNamePassword))
    );

    // A certificate naming no entry: not authorized, in both versions.
    let stranger = pki.spiffe(STRANGER);
    assert_eq!(
        connack(&pki, sidecar.mqtt, Some(&stranger), None).await,
        Ok(Some(ConnectReturnCode::NotAuthorized))
    );
    assert_eq!(connack5(&pki, sidecar.mqtt5, &stranger).await, 0x87);

    // No certificate, or another CA's: no handshake, on either listener.
    let foreign = pki.foreign(WEATHER);
    for addr in [sidecar.mqtt, sidecar.mqtt5] {
        for cert in [None, Some(&foreign)] {
            let outcome = connack(&pki, addr, cert, None).await;
            assert!(outcome.is_err(), "{outcome:?}");
        }
    }
    // Counted: two names refused, four handshakes.
    let deadline = tokio::time::Instant::now() + WAIT;
    while failures(&pki, &sidecar, "certificate").await < 6 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "refusals not counted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(failures(&pki, &sidecar, "certificate").await, 6);
    sidecar.stop().await;
}

#[tokio::test]
async fn optional_certificates_leave_anonymous_and_passwords_as_they_were() {
    let pki = Pki::new();
    let sidecar = TestSidecar::start_with(config(&pki, ClientAuth::Optional)).await;
    let things = [THING, "urn:public:x", "urn:alice:x"];
    assert_eq!(
        subscribe(&pki, &sidecar, None, None, &things).await,
        [false, true, false],
        "anonymous"
    );
    let alice = Some(("alice", "alice-token"));
    assert_eq!(
        subscribe(&pki, &sidecar, None, alice, &things).await,
        [false, false, true]
    );
    let weather = pki.spiffe(WEATHER);
    assert_eq!(
        subscribe(&pki, &sidecar, Some(&weather), None, &things).await,
        [true, false, false]
    );
    let foreign = pki.foreign(WEATHER);
    let outcome = connack(&pki, sidecar.mqtt, Some(&foreign), None).await;
    assert!(outcome.is_err(), "{outcome:?}");
    sidecar.stop().await;
}
