//! The MQTT guard in front of the embedded broker: authentication at
//! CONNECT, authorization of subscriptions and publications, limits, TLS.
//! Real sockets, a real rumqttd, real rumqttc clients (raw bytes where a
//! client library would not send what the test needs).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lmos_sidecar::broker::embedded::{EmbeddedBroker, Hooks, SideLinks};
use lmos_sidecar::broker::guard::{GuardEvent, GuardLimit, Policy, Refusal, Session, Verdict};
use lmos_sidecar::config::MqttConfig;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::{CancellationToken, DropGuard};

const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------- policy

/// alice/pw may publish and subscribe under `a/` only; root/pw anything;
/// mallory/pw authenticates but may not connect; anything else is refused.
#[derive(Default)]
struct Rules {
    events: Mutex<Vec<GuardEvent>>,
}

struct Grant {
    name: &'static str,
    prefix: Option<&'static str>,
}

impl Session for Grant {
    fn name(&self) -> &str {
        self.name
    }

    fn may_subscribe(&self, filter: &str) -> bool {
        self.prefix.is_none_or(|p| filter.starts_with(p))
    }

    fn may_publish(&self, topic: &str) -> bool {
        self.prefix.is_none_or(|p| topic.starts_with(p))
    }
}

impl Policy for Rules {
    fn connect<'a>(
        &'a self,
        _peer: SocketAddr,
        _certificate: Option<&'a str>,
        _client_id: &'a str,
        username: Option<&'a str>,
        password: Option<&'a [u8]>,
    ) -> Verdict<'a> {
        Box::pin(std::future::ready(self.decide(username, password)))
    }

    fn observe(&self, event: GuardEvent) {
        self.events.lock().unwrap().push(event);
    }
}

impl Rules {
    fn decide(
        &self,
        username: Option<&str>,
        password: Option<&[u8]>,
    ) -> Result<Box<dyn Session>, Refusal> {
        if password != Some(b"pw".as_slice()) {
            return Err(Refusal::BadCredentials);
        }
        match username {
            Some("alice") => Ok(Box::new(Grant {
                name: "alice",
                prefix: Some("a/"),
            })),
            Some("root") => Ok(Box::new(Grant {
                name: "root",
                prefix: None,
            })),
            Some("mallory") => Err(Refusal::NotAuthorized),
            _ => Err(Refusal::BadCredentials),
        }
    }
}

impl Rules {
    fn saw(&self, event: GuardEvent) -> bool {
        self.events.lock().unwrap().contains(&event)
    }
}

// ------------------------------------------------------------------- rig

struct Rig {
    mqtt: SocketAddr,
    mqtt5: SocketAddr,
    rules: Arc<Rules>,
    _broker: EmbeddedBroker,
    stop: Option<DropGuard>,
}

fn config() -> MqttConfig {
    MqttConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        listen_v5: "127.0.0.1:0".parse().unwrap(),
        ..MqttConfig::default()
    }
}

impl Rig {
    async fn start() -> Rig {
        Rig::with(config(), None).await
    }

    async fn with(config: MqttConfig, tls: Option<TlsAcceptor>) -> Rig {
        let rules = Arc::new(Rules::default());
        let stop = CancellationToken::new();
        let broker = EmbeddedBroker::start(
            &config,
            Vec::new(),
            SideLinks::default(),
            rules.clone(),
            Hooks {
                prerequisite: None,
                store: lmos_sidecar::store::Store::memory(),
                topics: lmos_sidecar::topics::Topics::new("lmos").unwrap(),
                quotas: lmos_sidecar::quotas::Quotas::none(),
                metrics: lmos_sidecar::telemetry::metrics::Metrics::default(),
            },
            tls,
            stop.clone(),
        )
        .await
        .expect("broker starts");
        Rig {
            mqtt: broker.mqtt_addr,
            mqtt5: broker.mqtt5_addr,
            rules,
            _broker: broker,
            stop: Some(stop.drop_guard()),
        }
    }
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ------------------------------------------------- MQTT 3.1.1 and 5 clients

/// The kit's packet clients, with the password every principal of
/// [`Rules`] has.
mod v4 {
    use std::net::SocketAddr;

    pub use lmos_testkit::packets::v4::*;

    pub fn options(addr: SocketAddr, id: &str, user: &str) -> MqttOptions {
        lmos_testkit::packets::v4::options(addr, id, user, "pw")
    }

    pub async fn connect(addr: SocketAddr, id: &str, user: &str) -> Client {
        try_connect(options(addr, id, user))
            .await
            .expect("connects")
    }
}

mod v5 {
    use std::net::SocketAddr;

    pub use lmos_testkit::packets::v5::*;

    pub fn options(addr: SocketAddr, id: &str, user: &str) -> MqttOptions {
        lmos_testkit::packets::v5::options(addr, id, user, "pw")
    }

    pub async fn connect(addr: SocketAddr, id: &str, user: &str) -> Client {
        try_connect(options(addr, id, user))
            .await
            .expect("connects")
    }
}

// ------------------------------------------------------------ raw bytes

use common::raw_mqtt as raw;
use lmos_testkit as common;

// ----------------------------------------------------------------- tests

#[tokio::test]
async fn credentials_are_checked_at_connect_in_both_versions() {
    let rig = Rig::start().await;

    v4::connect(rig.mqtt, "alice-4", "alice").await;
    let mut bad = v4::options(rig.mqtt, "bad-4", "alice");
    bad.set_credentials("alice", "wrong");
    assert!(matches!(
        v4::try_connect(bad).await.err(),
        Some(v4::ConnectionError::ConnectionRefused(
            v4::ConnectReturnCode::BadUserNamePassword
        ))
    ));
    assert!(matches!(
        v4::try_connect(v4::options(rig.mqtt, "m-4", "mallory"))
            .await
            .err(),
        Some(v4::ConnectionError::ConnectionRefused(
            v4::ConnectReturnCode::NotAuthorized
        ))
    ));

    v5::connect(rig.mqtt5, "alice-5", "alice").await;
    let mut bad = v5::options(rig.mqtt5, "bad-5", "alice");
    bad.set_credentials("alice", "wrong");
    assert!(matches!(
        v5::try_connect(bad).await.err(),
        Some(v5::ConnectionError::ConnectionRefused(
            v5::ConnectReturnCode::BadUserNamePassword
        ))
    ));
    assert!(matches!(
        v5::try_connect(v5::options(rig.mqtt5, "m-5", "mallory"))
            .await
            .err(),
        Some(v5::ConnectionError::ConnectionRefused(
            v5::ConnectReturnCode::NotAuthorized
        ))
    ));

    assert!(rig.rules.saw(GuardEvent::Refused(Refusal::BadCredentials)));
    assert!(rig.rules.saw(GuardEvent::Refused(Refusal::NotAuthorized)));
}

#[tokio::test]
async fn an_allowed_subscription_delivers_messages() {
    let rig = Rig::start().await;
    let mut sub = v4::connect(rig.mqtt, "sub", "alice").await;
    assert_eq!(
        sub.subscribe(&["a/#"]).await,
        vec![v4::SubscribeReasonCode::Success(v4::QoS::AtLeastOnce)]
    );
    let mut publisher = v4::connect(rig.mqtt, "pub", "alice").await;
    publisher.publish("a/x", "hello").await;
    assert_eq!(sub.received().await, ("a/x".into(), "hello".into()));
}

#[tokio::test]
async fn a_mixed_subscribe_gets_each_filter_its_own_code_in_v4() {
    use v4::SubscribeReasonCode::{Failure, Success};
    let rig = Rig::start().await;
    let mut sub = v4::connect(rig.mqtt, "mixed", "alice").await;
    let ok = Success(v4::QoS::AtLeastOnce);
    assert_eq!(
        sub.subscribe(&["b/x", "a/1", "c/#", "a/2"]).await,
        vec![Failure, ok, Failure, ok]
    );
    // Nothing allowed: the guard answers alone.
    assert_eq!(sub.subscribe(&["b/#", "c"]).await, vec![Failure, Failure]);

    let mut root = v4::connect(rig.mqtt, "root", "root").await;
    root.publish("b/x", "not for alice").await;
    root.publish("a/2", "for alice").await;
    assert_eq!(sub.received().await, ("a/2".into(), "for alice".into()));
    assert!(rig.rules.saw(GuardEvent::SubscribeDenied));
}

#[tokio::test]
async fn a_mixed_subscribe_gets_each_filter_its_own_code_in_v5() {
    use v5::SubscribeReasonCode::{NotAuthorized, Success};
    let rig = Rig::start().await;
    let mut sub = v5::connect(rig.mqtt5, "mixed5", "alice").await;
    let ok = Success(v5::QoS::AtLeastOnce);
    assert_eq!(
        sub.subscribe(&["b/x", "a/1", "c/#", "a/2"]).await,
        vec![NotAuthorized, ok, NotAuthorized, ok]
    );
    assert_eq!(
        sub.subscribe(&["#"]).await,
        vec![NotAuthorized],
        "a wildcard over everything is not under a/"
    );
    let mut root = v5::connect(rig.mqtt5, "root5", "root").await;
    root.publish("a/1", "one").await;
    assert_eq!(sub.received().await, ("a/1".into(), "one".into()));
}

#[tokio::test]
async fn a_denied_publication_is_acked_and_delivered_to_no_one() {
    let rig = Rig::start().await;
    let mut everything = v4::connect(rig.mqtt, "everything", "root").await;
    everything.subscribe(&["#"]).await;

    // 3.1.1: a plain PUBACK (QoS 1), nothing at QoS 0.
    let mut alice = v4::connect(rig.mqtt, "alice-4", "alice").await;
    alice.publish("b/secret", "v4").await;
    alice
        .client
        .publish("b/secret", v4::QoS::AtMostOnce, false, "v4 qos0")
        .await
        .unwrap();
    // 5: PUBACK with Not authorized.
    let mut alice5 = v5::connect(rig.mqtt5, "alice-5", "alice").await;
    assert_eq!(
        alice5.publish("b/secret", "v5").await,
        v5::PubAckReason::NotAuthorized
    );
    assert_eq!(
        alice5.publish("a/ok", "fine").await,
        v5::PubAckReason::Success
    );
    alice.publish("a/ok", "fine too").await;

    assert_eq!(everything.received().await, ("a/ok".into(), "fine".into()));
    assert_eq!(
        everything.received().await,
        ("a/ok".into(), "fine too".into())
    );
    assert!(rig.rules.saw(GuardEvent::PublishDenied));
}

#[tokio::test]
async fn a_denied_qos2_publication_is_refused_in_v5_and_closes_in_v4() {
    let rig = Rig::start().await;
    let mut c = raw::Client::connect(rig.mqtt5, 5, "alice").await;
    c.send(&raw::publish5("b/x", 2, 5, None, b"x")).await;
    assert_eq!(c.recv().await.unwrap(), vec![0x50, 3, 0, 5, 0x87]);
    c.send(&[0x62, 2, 0, 5]).await;
    assert_eq!(c.recv().await.unwrap(), vec![0x70, 2, 0, 5]);
    c.send(&[0xC0, 0]).await;
    assert_eq!(c.recv().await.unwrap(), vec![0xD0, 0], "still connected");

    let mut c = raw::Client::connect(rig.mqtt, 4, "alice").await;
    let mut body = raw::string(b"b/x");
    body.extend([0, 6, b'x']);
    c.send(&raw::packet(0x34, &body)).await;
    assert_eq!(c.recv().await, None);
}

#[tokio::test]
async fn a_topic_alias_cannot_bypass_the_publish_check() {
    let rig = Rig::start().await;
    let mut everything = v5::connect(rig.mqtt5, "everything", "root").await;
    everything.subscribe(&["#"]).await;

    let mut c = raw::Client::connect(rig.mqtt5, 5, "alice").await;
    // Alias 1 names an allowed topic and works.
    c.send(&raw::publish5("a/x", 1, 1, Some(1), b"named")).await;
    assert_eq!(c.recv().await.unwrap(), vec![0x40, 2, 0, 1]);
    c.send(&raw::publish5("", 1, 2, Some(1), b"aliased")).await;
    assert_eq!(c.recv().await.unwrap(), vec![0x40, 2, 0, 2]);
    // Alias 1 renamed to a forbidden topic: refused, and so is its use.
    c.send(&raw::publish5("b/x", 1, 3, Some(1), b"renamed"))
        .await;
    assert_eq!(c.recv().await.unwrap(), vec![0x40, 3, 0, 3, 0x87]);
    c.send(&raw::publish5("", 1, 4, Some(1), b"sneaky")).await;
    assert_eq!(c.recv().await.unwrap(), vec![0x40, 3, 0, 4, 0x87]);
    c.send(&raw::publish5("a/end", 1, 5, None, b"end")).await;
    assert_eq!(c.recv().await.unwrap(), vec![0x40, 2, 0, 5]);

    assert_eq!(everything.received().await, ("a/x".into(), "named".into()));
    assert_eq!(
        everything.received().await,
        ("a/x".into(), "aliased".into())
    );
    assert_eq!(everything.received().await, ("a/end".into(), "end".into()));

    // An alias never set is a protocol error.
    c.send(&raw::publish5("", 0, 0, Some(9), b"?")).await;
    assert_eq!(c.recv().await.unwrap(), vec![0xE0, 1, 0x82]);
    assert_eq!(c.recv().await, None);
}

#[tokio::test]
async fn a_shared_subscription_is_checked_by_its_filter() {
    let rig = Rig::start().await;
    let mut sub = v5::connect(rig.mqtt5, "shared", "alice").await;
    assert_eq!(
        sub.subscribe(&["$share/g/b/#", "$share/g/a/#"]).await,
        vec![
            v5::SubscribeReasonCode::NotAuthorized,
            v5::SubscribeReasonCode::Success(v5::QoS::AtLeastOnce)
        ]
    );
    let mut root = v5::connect(rig.mqtt5, "root", "root").await;
    root.publish("b/1", "no").await;
    root.publish("a/1", "yes").await;
    assert_eq!(sub.received().await, ("a/1".into(), "yes".into()));
}

#[tokio::test]
async fn subscriptions_are_capped_per_connection() {
    let mut config = config();
    config.max_subscriptions = 2;
    let rig = Rig::with(config, None).await;

    let ok = v5::SubscribeReasonCode::Success(v5::QoS::AtLeastOnce);
    let mut c = v5::connect(rig.mqtt5, "capped", "alice").await;
    assert_eq!(c.subscribe(&["a/1", "a/2"]).await, vec![ok, ok]);
    // Subscribing again to a held filter takes no new room.
    assert_eq!(
        c.subscribe(&["a/1", "a/3"]).await,
        vec![ok, v5::SubscribeReasonCode::QuotaExceeded]
    );
    c.client.unsubscribe("a/1").await.unwrap();
    c.next(|p| matches!(p, v5::Packet::UnsubAck(_)).then_some(()))
        .await;
    assert_eq!(c.subscribe(&["a/3"]).await, vec![ok]);

    let mut c = v4::connect(rig.mqtt, "capped4", "alice").await;
    assert_eq!(
        c.subscribe(&["a/1", "a/2", "a/3"]).await,
        vec![
            v4::SubscribeReasonCode::Success(v4::QoS::AtLeastOnce),
            v4::SubscribeReasonCode::Success(v4::QoS::AtLeastOnce),
            v4::SubscribeReasonCode::Failure
        ]
    );
    assert!(rig.rules.saw(GuardEvent::Limit(GuardLimit::Subscriptions)));
}

/// rumqttd frees a connection's ID on its DISCONNECT and gives it to the
/// next connection at once; its link reports the disconnection again, by
/// ID, when the socket closes before the router's goodbye reaches it. The
/// guard (and its watchdog) wait for rumqttd to close after a DISCONNECT,
/// or that second report would end whoever connected next.
#[tokio::test]
async fn a_clean_disconnect_never_ends_the_connection_that_follows() {
    let rig = Rig::start().await;
    for i in 0..500 {
        let mut leaving = raw::Client::open(rig.mqtt5).await;
        leaving
            .send(&raw::connect(5, &format!("leaving-{i}"), "alice"))
            .await;
        assert_eq!(leaving.recv().await.expect("CONNACK")[0], 0x20);
        leaving.send(&[0xE0, 0]).await;
        drop(leaving);
        let mut next = raw::Client::open(rig.mqtt5).await;
        next.send(&raw::connect(5, &format!("next-{i}"), "alice"))
            .await;
        assert_eq!(next.recv().await.expect("CONNACK")[0], 0x20);
        next.send(&[0xC0, 0]).await;
        assert!(
            next.until_closed_or_pong().await,
            "round {i}: the connection after a clean disconnect was ended"
        );
    }
}

#[tokio::test]
async fn connections_are_capped() {
    let mut config = config();
    config.max_connections = 2;
    let rig = Rig::with(config, None).await;

    let first = v4::connect(rig.mqtt, "one", "alice").await;
    let _second = v5::connect(rig.mqtt5, "two", "alice").await;
    assert!(matches!(
        v4::try_connect(v4::options(rig.mqtt, "three", "alice"))
            .await
            .err(),
        Some(v4::ConnectionError::ConnectionRefused(
            v4::ConnectReturnCode::ServiceUnavailable
        ))
    ));
    assert!(matches!(
        v5::try_connect(v5::options(rig.mqtt5, "three5", "alice"))
            .await
            .err(),
        Some(v5::ConnectionError::ConnectionRefused(
            v5::ConnectReturnCode::QuotaExceeded
        ))
    ));
    assert!(rig.rules.saw(GuardEvent::Limit(GuardLimit::Connections)));

    drop(first);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if v4::try_connect(v4::options(rig.mqtt, "three", "alice"))
            .await
            .is_ok()
        {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "a place frees up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_handshake_timeout() {
    let mut config = config();
    config.connection_timeout_ms = 300;
    let rig = Rig::with(config, None).await;

    let started = tokio::time::Instant::now();
    let mut silent = raw::Client::open(rig.mqtt).await;
    assert_eq!(silent.recv().await, None);
    assert!(started.elapsed() >= Duration::from_millis(250));
    eventually("the timeout is observed", || {
        rig.rules
            .saw(GuardEvent::Limit(GuardLimit::HandshakeTimeout))
    })
    .await;
    // A first packet other than CONNECT closes at once.
    let mut rude = raw::Client::open(rig.mqtt).await;
    rude.send(&[0xC0, 0]).await;
    assert_eq!(rude.recv().await, None);
    // Others are unaffected.
    v4::connect(rig.mqtt, "after", "alice").await;
}

#[tokio::test]
async fn an_oversized_packet_closes_the_connection() {
    let mut config = config();
    config.max_payload_size = 1024;
    let rig = Rig::with(config, None).await;

    // The guard closes as soon as the header announces too many bytes.
    let too_large = raw::packet(0x30, &vec![0u8; 1024 + 70_000])[..64].to_vec();
    let mut c = raw::Client::connect(rig.mqtt5, 5, "alice").await;
    c.send(&too_large).await;
    assert_eq!(c.recv().await.unwrap(), vec![0xE0, 1, 0x95]);
    assert_eq!(c.recv().await, None);

    let mut c = raw::Client::connect(rig.mqtt, 4, "alice").await;
    c.send(&too_large).await;
    assert_eq!(c.recv().await, None);
    assert!(rig.rules.saw(GuardEvent::Limit(GuardLimit::PacketSize)));

    // Within the limit, all is well.
    let mut sub = v4::connect(rig.mqtt, "sub", "alice").await;
    sub.subscribe(&["a/big"]).await;
    let mut publisher = v4::connect(rig.mqtt, "pub", "alice").await;
    let payload = "x".repeat(1000);
    publisher.publish("a/big", &payload).await;
    assert_eq!(sub.received().await.1, payload);
}

#[tokio::test]
async fn the_last_will_fires_when_a_client_vanishes_behind_the_guard() {
    let rig = Rig::start().await;
    let mut watcher = v5::connect(rig.mqtt5, "watcher", "root").await;
    watcher.subscribe(&["a/will"]).await;

    let mut options = v4::options(rig.mqtt, "mortal", "alice");
    options.set_last_will(rumqttc::LastWill::new(
        "a/will",
        "gone",
        v4::QoS::AtLeastOnce,
        false,
    ));
    let mortal = v4::try_connect(options).await.expect("connects");
    drop(mortal);
    assert_eq!(watcher.received().await, ("a/will".into(), "gone".into()));

    // A will on a topic the client may not publish is refused at CONNECT.
    let mut options = v4::options(rig.mqtt, "forger", "alice");
    options.set_last_will(rumqttc::LastWill::new(
        "b/will",
        "forged",
        v4::QoS::AtLeastOnce,
        false,
    ));
    assert!(matches!(
        v4::try_connect(options).await.err(),
        Some(v4::ConnectionError::ConnectionRefused(
            v4::ConnectReturnCode::NotAuthorized
        ))
    ));
}

#[tokio::test]
async fn either_public_port_takes_both_protocol_versions() {
    let rig = Rig::start().await;
    let mut v4_on_v5_port = v4::connect(rig.mqtt5, "four", "alice").await;
    let mut v5_on_v4_port = v5::connect(rig.mqtt, "five", "alice").await;
    v4_on_v5_port.subscribe(&["a/to4"]).await;
    v5_on_v4_port.subscribe(&["a/to5"]).await;
    v4_on_v5_port.publish("a/to4", "from 4").await;
    assert_eq!(
        v4_on_v5_port.received().await,
        ("a/to4".into(), "from 4".into())
    );
    assert_eq!(
        v5_on_v4_port.publish("a/to5", "from 5").await,
        v5::PubAckReason::Success
    );
    assert_eq!(
        v5_on_v4_port.received().await,
        ("a/to5".into(), "from 5".into())
    );
    v4_on_v5_port.publish("a/to5", "from 4").await;
    assert_eq!(
        v5_on_v4_port.received().await,
        ("a/to5".into(), "from 4".into())
    );
    v5_on_v4_port.publish("a/to4", "from 5").await;
    assert_eq!(
        v4_on_v5_port.received().await,
        ("a/to4".into(), "from 5".into())
    );
}

/// A certificate for `localhost`, the guard's acceptor for it, and a client
/// configuration that trusts it.
fn tls_pair() -> (TlsAcceptor, Arc<rustls::ClientConfig>) {
    let dir = std::env::temp_dir().join(format!("lmos-guard-tls-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, generated.cert.pem()).unwrap();
    std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
    let acceptor = lmos_sidecar::tls::acceptor(&lmos_sidecar::tls::Settings {
        cert: cert.to_str().unwrap(),
        key: key.to_str().unwrap(),
        client_ca: "",
        client_auth: lmos_sidecar::config::ClientAuth::Required,
        section: "mqtt",
    })
    .unwrap()
    .expect("TLS configured");
    std::fs::remove_dir_all(dir).unwrap();

    let mut roots = rustls::RootCertStore::empty();
    roots.add(generated.cert.der().clone()).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    (acceptor, Arc::new(client))
}

#[tokio::test]
async fn tls_clients_pubsub_and_a_plain_client_fails_alone() {
    let (acceptor, client_tls) = tls_pair();
    let rig = Rig::with(config(), Some(acceptor)).await;
    let tls = |addr: SocketAddr, id: &str| {
        let mut o = v4::MqttOptions::new(id, "localhost", addr.port());
        o.set_keep_alive(Duration::from_secs(30));
        o.set_credentials("alice", "pw");
        o.set_transport(rumqttc::Transport::tls_with_config(
            rumqttc::TlsConfiguration::Rustls(client_tls.clone()),
        ));
        o
    };
    let mut sub = v4::try_connect(tls(rig.mqtt, "tls-sub"))
        .await
        .expect("TLS client connects");
    sub.subscribe(&["a/tls"]).await;

    // Plain MQTT on the TLS port gets nowhere, and hurts no one.
    assert!(v4::try_connect(v4::options(rig.mqtt, "plain", "alice"))
        .await
        .is_err());

    let mut publisher = v4::try_connect(tls(rig.mqtt5, "tls-pub"))
        .await
        .expect("TLS client connects on the other port");
    publisher.publish("a/tls", "secret").await;
    assert_eq!(sub.received().await, ("a/tls".into(), "secret".into()));
}

#[tokio::test]
async fn shutdown_closes_the_listeners_and_the_connections() {
    let mut rig = Rig::start().await;
    let mut c = raw::Client::connect(rig.mqtt, 4, "alice").await;
    // A client with an empty client ID has no session to resume, and is
    // closed all the same (each connection hears of shutdown through its
    // session's handover).
    let mut anonymous = raw::Client::open(rig.mqtt5).await;
    anonymous.send(&raw::connect(5, "", "alice")).await;
    let ack = anonymous.recv().await.expect("CONNACK");
    assert_eq!((ack[0], ack[3]), (0x20, 0), "accepted: {ack:?}");
    rig.stop.take();
    assert_eq!(c.recv().await, None, "closed once the broker is quiet");
    let anonymous_end = tokio::time::timeout(WAIT, async {
        // MQTT 5: a DISCONNECT (Server shutting down) may come first.
        while let Some(packet) = anonymous.recv().await {
            assert_eq!(packet[0], 0xe0, "only a DISCONNECT: {packet:?}");
        }
    });
    anonymous_end
        .await
        .expect("the anonymous client closed too");
    let deadline = tokio::time::Instant::now() + WAIT;
    while TcpStream::connect(rig.mqtt5).await.is_ok() {
        assert!(tokio::time::Instant::now() < deadline, "listener closed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
