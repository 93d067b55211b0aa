//! What survives a restart of a real sidecar process on the same data
//! directory (issue 31): retained messages from MQTT 3.1.1 and 5 clients
//! and from a WebSocket agent, after SIGTERM and after SIGKILL; and the
//! start refused, with the path and the reason, on a directory that cannot
//! be used.

use std::process::Stdio;
use std::time::Duration;

use lmos_testkit as common;

use common::process::{ephemeral_flags, on_directory, DataDir, Started};
use common::{reading, MqttClient, WAIT};
use lmos_testkit::sidecar_command as sidecar;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
use rumqttc::v5::mqttbytes::QoS;
use serde_json::json;

fn start(dir: &DataDir) -> Started {
    Started::start(on_directory(&mut sidecar!(), &dir.0))
}

/// Every retained message a new subscriber to `#` gets, by topic, until
/// none comes for a while.
async fn retained(mqtt: std::net::SocketAddr, id: &str) -> Vec<(String, String)> {
    let mut client = MqttClient::connect(mqtt, id).await;
    client.subscribe("#").await;
    let mut got = Vec::new();
    while let Ok(Some(p)) =
        tokio::time::timeout(Duration::from_millis(700), client.publishes.recv()).await
    {
        assert!(p.retain, "only retained messages here: {p:?}");
        got.push((p.topic, String::from_utf8_lossy(&p.payload).into_owned()));
    }
    got.sort();
    got
}

/// An MQTT 5 client publishing one retained message at QoS 1 with
/// properties; returns once the PUBACK came.
async fn publish_v5(mqtt: std::net::SocketAddr, topic: &str, payload: &str, expiry: Option<u32>) {
    let options = rumqttc::v5::MqttOptions::new("v5-publisher", mqtt.ip().to_string(), mqtt.port());
    let (client, mut events) = rumqttc::v5::AsyncClient::new(options, 10);
    let properties = PublishProperties {
        message_expiry_interval: expiry,
        user_properties: vec![("unit".into(), "celsius".into())],
        content_type: Some("application/json".into()),
        ..Default::default()
    };
    client
        .publish_with_properties(
            topic,
            QoS::AtLeastOnce,
            true,
            payload.to_owned(),
            properties,
        )
        .await
        .unwrap();
    tokio::time::timeout(WAIT, async {
        loop {
            if let rumqttc::v5::Event::Incoming(Packet::PubAck(_)) = events.poll().await.unwrap() {
                return;
            }
        }
    })
    .await
    .expect("PUBACK in time");
    client.disconnect().await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(1), events.poll()).await;
}

#[tokio::test]
async fn retained_messages_survive_sigterm_and_sigkill() {
    let dir = DataDir::new("retained");
    let first = start(&dir);
    let mut publisher = MqttClient::connect(first.mqtt, "publisher").await;
    // An LMOS reading and a topic the sidecar knows nothing of, both at
    // QoS 1: the PUBACK says they are kept.
    publisher
        .publish("lmos/urn:t/properties/temp", &json!(21.5), true)
        .await;
    publisher.publish("sensors/a", &json!("on"), true).await;
    publish_v5(first.mqtt, "sensors/v5", "\"five\"", Some(3_600)).await;
    // A crash right after the acknowledgements: nothing is flushed.
    first.kill();

    let second = start(&dir);
    assert_eq!(
        retained(second.mqtt, "after-kill").await,
        vec![
            ("lmos/urn:t/properties/temp".into(), "21.5".into()),
            ("sensors/a".into(), "\"on\"".into()),
            ("sensors/v5".into(), "\"five\"".into()),
        ]
    );
    // The metrics say what start-up found.
    let metrics = common::http(second.http, "GET", "/metrics", None, b"").await;
    assert!(
        metrics
            .body
            .contains("lmos_sidecar_store{what=\"recovered_retained\"} 3"),
        "{}",
        metrics.body
    );
    assert!(metrics
        .body
        .contains("lmos_sidecar_store{what=\"file_bytes\"}"));
    // Its MQTT 5 properties came back with it, the expiry counted down.
    let (_client, mut rx) = common::mqtt5_client(second.mqtt, "v5-reader", "sensors/v5").await;
    let p = common::mqtt5_next_publish(&mut rx).await;
    let properties = p.properties.expect("the properties are kept");
    assert_eq!(
        properties.user_properties,
        vec![("unit".to_owned(), "celsius".to_owned())]
    );
    assert_eq!(properties.content_type.as_deref(), Some("application/json"));
    let left = properties
        .message_expiry_interval
        .expect("the expiry is kept");
    assert!((3_500..=3_600).contains(&left), "{left}");

    // Removing one (an empty retained payload) is kept too; a short-lived
    // one expires while the sidecar is stopped.
    let publisher = MqttClient::connect(second.mqtt, "publisher").await;
    publisher
        .client
        .publish("sensors/a", rumqttc::QoS::AtLeastOnce, true, Vec::new())
        .await
        .unwrap();
    publish_v5(second.mqtt, "sensors/short", "1", Some(1)).await;
    // The WebSocket path: an agent's reading, retained by the sidecar.
    let mut agent = common::WsClient::connect(&format!(
        "ws://{}/lmos?host={}",
        second.http,
        common::urlencode("urn:w")
    ))
    .await;
    agent.send(reading("urn:w", "level", json!(3))).await;
    let mut watcher = MqttClient::connect(second.mqtt, "watcher").await;
    watcher.subscribe("lmos/urn:w/properties/level").await;
    assert_eq!(watcher.recv_json().await.1["value"], 3);
    drop(publisher);
    second.terminate();
    tokio::time::sleep(Duration::from_millis(1_200)).await;

    let third = start(&dir);
    let after = retained(third.mqtt, "after-term").await;
    let topics: Vec<&str> = after.iter().map(|(topic, _)| topic.as_str()).collect();
    assert_eq!(
        topics,
        vec![
            "lmos/urn:t/properties/temp",
            // The agent's presence, as it was when it left: offline.
            "lmos/urn:w/agent/status",
            "lmos/urn:w/properties/level",
            "lmos/urn:w/values/properties/level",
            "sensors/v5",
        ]
    );
    assert!(after[1].1.contains("offline"), "{:?}", after[1]);
    third.terminate();
}

#[tokio::test]
async fn memory_only_keeps_nothing() {
    let dir = DataDir::new("memory-only");
    let mut cmd = sidecar!();
    on_directory(&mut cmd, &dir.0).env("LMOS_SIDECAR_STORE__MEMORY_ONLY", "true");
    let first = Started::start(&mut cmd);
    let mut publisher = MqttClient::connect(first.mqtt, "publisher").await;
    publisher.publish("sensors/a", &json!(1), true).await;
    first.terminate();
    let mut cmd = sidecar!();
    on_directory(&mut cmd, &dir.0).env("LMOS_SIDECAR_STORE__MEMORY_ONLY", "true");
    let second = Started::start(&mut cmd);
    assert!(retained(second.mqtt, "reader").await.is_empty());
    assert!(std::fs::read_dir(&dir.0).unwrap().next().is_none());
    second.terminate();
}

/// Starts the binary expecting it to refuse: its exit status and stderr.
fn refused(cmd: &mut std::process::Command) -> (std::process::ExitStatus, String) {
    let child = ephemeral_flags(cmd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_directory_in_use_or_unusable_refuses_the_start_with_path_and_reason() {
    let dir = DataDir::new("in-use");
    let running = start(&dir);
    let (status, stderr) = refused(on_directory(&mut sidecar!(), &dir.0));
    assert!(!status.success());
    assert!(stderr.contains("in use by another process"), "{stderr}");
    assert!(stderr.contains(&dir.0.display().to_string()), "{stderr}");
    // The one running is unaffected.
    MqttClient::connect(running.mqtt, "still-served").await;
    running.terminate();

    let file = dir.0.join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let (status, stderr) = refused(on_directory(&mut sidecar!(), &file.join("data")));
    assert!(!status.success());
    assert!(stderr.contains("cannot create it"), "{stderr}");
    assert!(stderr.contains("a-file"), "{stderr}");

    let damaged = DataDir::new("damaged");
    std::fs::write(damaged.0.join("store.redb"), vec![0x5a; 64 * 1024]).unwrap();
    let (status, stderr) = refused(on_directory(&mut sidecar!(), &damaged.0));
    assert!(!status.success());
    assert!(stderr.contains("store.redb"), "{stderr}");
}

/// What a kept session gets when its client comes back: payloads in order,
/// until none comes for a while.
async fn drain(client: &mut MqttClient) -> Vec<String> {
    let mut got = Vec::new();
    while let Ok(Some(p)) =
        tokio::time::timeout(Duration::from_millis(700), client.publishes.recv()).await
    {
        got.push(String::from_utf8_lossy(&p.payload).into_owned());
    }
    got
}

async fn publish_numbers(mqtt: std::net::SocketAddr, range: std::ops::Range<u32>) {
    let mut publisher = MqttClient::connect(mqtt, "numbers").await;
    for i in range {
        // QoS 1, PUBACK awaited: acknowledged.
        publisher.publish("sensors/count", &json!(i), false).await;
    }
}

fn numbers(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|i| i.to_string()).collect()
}

#[tokio::test]
async fn a_kept_session_and_its_queued_messages_survive_sigkill_and_sigterm() {
    let dir = DataDir::new("sessions");
    let first = start(&dir);
    for id in ["kept", "kept-too"] {
        let mut subscriber = MqttClient::connect_kept(first.mqtt, id).await;
        subscriber.subscribe("sensors/#").await;
        subscriber.client.disconnect().await.unwrap();
    }
    publish_numbers(first.mqtt, 0..5).await;
    first.kill();

    // After a crash: the session is there, with what was queued, in order.
    let second = start(&dir);
    let mut subscriber = MqttClient::connect_kept(second.mqtt, "kept").await;
    assert!(subscriber.session_present, "the session survived");
    assert_eq!(drain(&mut subscriber).await, numbers(0..5));
    // Queued for two sessions, kept once, delivered to both.
    let mut other = MqttClient::connect_kept(second.mqtt, "kept-too").await;
    assert_eq!(drain(&mut other).await, numbers(0..5));
    other.client.disconnect().await.unwrap();
    // Still subscribed: what comes next arrives too.
    publish_numbers(second.mqtt, 5..6).await;
    assert_eq!(drain(&mut subscriber).await, numbers(5..6));
    subscriber.client.disconnect().await.unwrap();
    drop(subscriber);
    publish_numbers(second.mqtt, 6..9).await;
    second.terminate();

    // After a graceful stop: only what it had not acknowledged.
    let third = start(&dir);
    let mut subscriber = MqttClient::connect_kept(third.mqtt, "kept").await;
    assert!(subscriber.session_present);
    assert_eq!(drain(&mut subscriber).await, numbers(6..9));
    subscriber.client.disconnect().await.unwrap();
    drop(subscriber);
    third.kill();

    // Nothing left to deliver, and a clean start ends the session for good.
    let fourth = start(&dir);
    let mut subscriber = MqttClient::connect_kept(fourth.mqtt, "kept").await;
    assert!(subscriber.session_present);
    assert!(drain(&mut subscriber).await.is_empty());
    subscriber.client.disconnect().await.unwrap();
    drop(subscriber);
    let clean = MqttClient::connect(fourth.mqtt, "kept").await;
    drop(clean);
    tokio::time::sleep(Duration::from_millis(300)).await;
    fourth.terminate();
    let fifth = start(&dir);
    let subscriber = MqttClient::connect_kept(fifth.mqtt, "kept").await;
    assert!(!subscriber.session_present, "ended by the clean start");
    fifth.terminate();
}

#[tokio::test]
async fn an_mqtt5_session_expiry_counts_across_the_restart() {
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};
    let dir = DataDir::new("expiry");
    let first = start(&dir);
    let connect = |mqtt: std::net::SocketAddr, id: &str, expiry: u32| {
        let mut options = MqttOptions::new(id, mqtt.ip().to_string(), mqtt.port());
        options.set_clean_start(false);
        options.set_session_expiry_interval(Some(expiry));
        AsyncClient::new(options, 10)
    };
    async fn connack(events: &mut rumqttc::v5::EventLoop) -> bool {
        loop {
            if let Event::Incoming(Packet::ConnAck(a)) = events.poll().await.unwrap() {
                return a.session_present;
            }
        }
    }
    for (id, expiry) in [("short", 2), ("long", 3_600)] {
        let (client, mut events) = connect(first.mqtt, id, expiry);
        connack(&mut events).await;
        client
            .subscribe("sensors/#", QoS::AtLeastOnce)
            .await
            .unwrap();
        loop {
            if let Event::Incoming(Packet::SubAck(_)) = events.poll().await.unwrap() {
                break;
            }
        }
        client.disconnect().await.unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(1), events.poll()).await;
    }
    publish_numbers(first.mqtt, 0..2).await;
    first.terminate();
    // The short one expires while the sidecar is stopped.
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    let second = start(&dir);
    for (id, expiry, present) in [("short", 2, false), ("long", 3_600, true)] {
        let (_client, mut events) = connect(second.mqtt, id, expiry);
        let session_present = tokio::time::timeout(WAIT, connack(&mut events))
            .await
            .unwrap();
        assert_eq!(session_present, present, "{id}");
        let mut got = Vec::new();
        while let Ok(Ok(event)) =
            tokio::time::timeout(Duration::from_millis(700), events.poll()).await
        {
            if let Event::Incoming(Packet::Publish(p)) = event {
                got.push(String::from_utf8_lossy(&p.payload).into_owned());
            }
        }
        let expected = if present { numbers(0..2) } else { Vec::new() };
        assert_eq!(got, expected, "{id}");
    }
    second.terminate();
}

/// Polls `events` to the CONNACK: whether the session was present.
async fn session_present(events: &mut rumqttc::v5::EventLoop) -> bool {
    use rumqttc::v5::Event;
    tokio::time::timeout(WAIT, async {
        loop {
            if let Event::Incoming(Packet::ConnAck(a)) = events.poll().await.unwrap() {
                return a.session_present;
            }
        }
    })
    .await
    .expect("CONNACK in time")
}

/// An MQTT 5 client on a kept session (expiry one hour): not clean.
async fn connect_v5_kept(
    mqtt: std::net::SocketAddr,
    id: &str,
) -> (rumqttc::v5::AsyncClient, rumqttc::v5::EventLoop, bool) {
    use rumqttc::v5::{AsyncClient, MqttOptions};
    let mut options = MqttOptions::new(id, mqtt.ip().to_string(), mqtt.port());
    options.set_clean_start(false);
    options.set_session_expiry_interval(Some(3_600));
    let (client, mut events) = AsyncClient::new(options, 10);
    let present = session_present(&mut events).await;
    (client, events, present)
}

/// The next PUBLISH `events` gets within 700 ms, if any.
async fn next_v5(
    events: &mut rumqttc::v5::EventLoop,
) -> Option<rumqttc::v5::mqttbytes::v5::Publish> {
    use rumqttc::v5::Event;
    tokio::time::timeout(Duration::from_millis(700), async {
        loop {
            if let Event::Incoming(Packet::Publish(p)) = events.poll().await.unwrap() {
                return p;
            }
        }
    })
    .await
    .ok()
}

#[tokio::test]
async fn a_restored_subscription_keeps_its_identifier_and_no_local() {
    use rumqttc::v5::mqttbytes::v5::{Filter, SubscribeProperties};
    use rumqttc::v5::Event;
    let dir = DataDir::new("options");
    let first = start(&dir);
    let (client, mut events, _) = connect_v5_kept(first.mqtt, "opts").await;
    let mut filter = Filter::new("sensors/#", QoS::AtLeastOnce);
    filter.nolocal = true;
    let properties = SubscribeProperties {
        id: Some(7),
        user_properties: Vec::new(),
    };
    client
        .subscribe_many_with_properties(vec![filter], properties)
        .await
        .unwrap();
    loop {
        if let Event::Incoming(Packet::SubAck(_)) = events.poll().await.unwrap() {
            break;
        }
    }
    client.disconnect().await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(1), events.poll()).await;
    first.terminate();

    let second = start(&dir);
    let (client, mut events, present) = connect_v5_kept(second.mqtt, "opts").await;
    assert!(present, "the session survived");
    // No Local: what it publishes itself does not come back.
    client
        .publish("sensors/own", QoS::AtLeastOnce, false, "own")
        .await
        .unwrap();
    assert!(next_v5(&mut events).await.is_none(), "No Local was kept");
    // Another client's publication carries the subscription identifier.
    publish_numbers(second.mqtt, 1..2).await;
    let p = next_v5(&mut events)
        .await
        .expect("the subscription was kept");
    assert_eq!(&p.payload[..], b"1");
    let ids = p.properties.map(|p| p.subscription_identifiers);
    assert_eq!(ids, Some(vec![7]), "the identifier was kept");
    second.terminate();
}

#[tokio::test]
async fn what_the_broker_drops_from_a_full_filter_buffer_the_disk_drops_too() {
    // Each filter buffers two segments of 1 KiB: a session away for 200
    // publications keeps only the last few in memory, and must find no
    // more than those after a restart (the disk does not keep what memory
    // let go, so it cannot grow without bound either).
    let dir = DataDir::new("dropped");
    let small = |cmd: &mut std::process::Command| {
        cmd.env("LMOS_SIDECAR_MQTT__MAX_PAYLOAD_SIZE", "1024")
            .env("LMOS_SIDECAR_MQTT__SEGMENT_SIZE", "1024")
            .env("LMOS_SIDECAR_MQTT__SEGMENT_COUNT", "2");
    };
    let mut cmd = sidecar!();
    small(on_directory(&mut cmd, &dir.0));
    let first = Started::start(&mut cmd);
    let mut subscriber = MqttClient::connect_kept(first.mqtt, "away").await;
    subscriber.subscribe("sensors/#").await;
    subscriber.client.disconnect().await.unwrap();
    drop(subscriber);
    publish_numbers(first.mqtt, 0..200).await;
    first.terminate();

    let mut cmd = sidecar!();
    small(on_directory(&mut cmd, &dir.0));
    let second = Started::start(&mut cmd);
    let metrics = common::http(second.http, "GET", "/metrics", None, b"").await;
    let recovered: usize = metrics
        .body
        .lines()
        .find_map(|l| l.strip_prefix("lmos_sidecar_store{what=\"recovered_queued\"} "))
        .and_then(|n| n.trim().parse().ok())
        .expect("the recovered_queued metric");
    assert!(
        (1..100).contains(&recovered),
        "only what the buffers held is kept: {recovered}"
    );
    let mut subscriber = MqttClient::connect_kept(second.mqtt, "away").await;
    assert!(subscriber.session_present);
    let got = drain(&mut subscriber).await;
    // The newest ones, in order, ending with the last.
    assert_eq!(got.len(), recovered);
    let first_kept: u32 = got[0].parse().unwrap();
    assert_eq!(got, numbers(first_kept..200));
    second.terminate();
}

/// An MQTT 5 client with a retained will on `wills/{id}` after `delay` s,
/// on a session kept a minute (not started clean), kept connected by a
/// task; its event loop ends when the returned sender is dropped.
async fn v5_with_will(
    mqtt: std::net::SocketAddr,
    id: &str,
    delay: u32,
    clean_start: bool,
) -> (
    rumqttc::v5::AsyncClient,
    tokio::sync::oneshot::Sender<()>,
    bool,
) {
    use rumqttc::v5::mqttbytes::v5::{LastWill, LastWillProperties};
    use rumqttc::v5::{AsyncClient, MqttOptions};
    let mut options = MqttOptions::new(id, mqtt.ip().to_string(), mqtt.port());
    options.set_clean_start(clean_start);
    options.set_session_expiry_interval(Some(60));
    let properties = LastWillProperties {
        delay_interval: Some(delay),
        payload_format_indicator: None,
        message_expiry_interval: None,
        content_type: None,
        response_topic: None,
        correlation_data: None,
        user_properties: Vec::new(),
    };
    let will = LastWill::new(
        format!("wills/{id}"),
        "gone",
        QoS::AtLeastOnce,
        true,
        Some(properties),
    );
    options.set_last_will(will);
    let (client, mut events) = AsyncClient::new(options, 10);
    let present = session_present(&mut events).await;
    let (stop, stopped) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        tokio::select! {
            _ = stopped => {}
            _ = async { while events.poll().await.is_ok() {} } => {}
        }
    });
    (client, stop, present)
}

#[tokio::test]
async fn the_wills_of_clients_connected_at_a_crash_go_out_after_the_restart() {
    let dir = DataDir::new("wills");
    let first = start(&dir);
    // 3.1.1, no delay: due at once after the restart.
    let v4 = MqttClient::connect_with(first.mqtt, "now", |o| {
        o.set_last_will(rumqttc::LastWill::new(
            "wills/now",
            "gone",
            rumqttc::QoS::AtLeastOnce,
            true,
        ));
    })
    .await;
    // MQTT 5 with a delay of 2 s: due 2 s after the restart, unless the
    // client comes back first; one that comes back starting clean ends its
    // session, and its will goes out at once.
    let later = v5_with_will(first.mqtt, "later", 2, true).await;
    let back = v5_with_will(first.mqtt, "back", 2, true).await;
    let clean = v5_with_will(first.mqtt, "clean", 30, true).await;
    // One that said goodbye has no will to send.
    let bye = v5_with_will(first.mqtt, "bye", 0, true).await;
    bye.0.disconnect().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.kill();
    drop((v4, later, back, bye));

    let second = start(&dir);
    let (_back, _back_stop, present) = v5_with_will(second.mqtt, "back", 2, false).await;
    assert!(present, "its session was kept");
    let _clean = v5_with_will(second.mqtt, "clean", 30, true).await;
    drop(clean);
    let wills = |got: Vec<(String, String)>| got.into_iter().map(|(t, _)| t).collect::<Vec<_>>();
    assert_eq!(
        wills(retained(second.mqtt, "early").await),
        vec!["wills/clean".to_owned(), "wills/now".to_owned()],
        "at once: the one without delay and the one whose session ended"
    );
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert_eq!(
        wills(retained(second.mqtt, "late").await),
        vec![
            "wills/clean".to_owned(),
            "wills/later".to_owned(),
            "wills/now".to_owned()
        ],
        "after its delay; never for the one that came back or said goodbye"
    );
    second.terminate();
}

#[tokio::test]
async fn a_qos2_publication_acknowledged_with_pubrec_survives_until_its_pubrel() {
    use common::mqtt5::{self, Props, PUBCOMP, PUBREC, PUBREL, SESSION_EXPIRY};
    let dir = DataDir::new("qos2");
    let first = start(&dir);
    let mut subscriber = MqttClient::connect_kept(first.mqtt, "qos2-sub").await;
    subscriber.subscribe("sensors/#").await;
    subscriber.client.disconnect().await.unwrap();
    drop(subscriber);
    // A packet-level client, to stop between PUBREC and PUBREL.
    let kept = Props::new().int(SESSION_EXPIRY, 60);
    let (mut publisher, _) = mqtt5::connect5(first.mqtt, "qos2-pub", false, &kept).await;
    let publish = mqtt5::publish("sensors/once", 2, false, 9, &Props::new(), b"exactly once");
    publisher.send(&publish).await;
    let pubrec = publisher.recv().await.expect("a PUBREC");
    assert_eq!((pubrec[0], mqtt5::ack_of(&pubrec)), (PUBREC, (9, 0)));
    // The broker owns it now (PUBREC); the crash comes before the PUBREL.
    first.kill();

    let second = start(&dir);
    let (mut publisher, ack) = mqtt5::connect5(second.mqtt, "qos2-pub", false, &kept).await;
    assert!(ack.session_present);
    publisher.send(&mqtt5::ack(PUBREL, 9)).await;
    let pubcomp = publisher.recv().await.expect("a PUBCOMP");
    assert_eq!(
        (pubcomp[0], mqtt5::ack_of(&pubcomp)),
        (PUBCOMP, (9, 0)),
        "known after the restart"
    );
    // A PUBREL nobody knows is answered (0x92), and the connection stays.
    publisher.send(&mqtt5::ack(PUBREL, 10)).await;
    let pubcomp = publisher.recv().await.expect("a PUBCOMP");
    assert_eq!((pubcomp[0], mqtt5::ack_of(&pubcomp)), (PUBCOMP, (10, 0x92)));
    let mut subscriber = MqttClient::connect_kept(second.mqtt, "qos2-sub").await;
    assert_eq!(
        drain(&mut subscriber).await,
        vec!["exactly once".to_owned()]
    );
    second.terminate();
}

#[tokio::test]
async fn a_pubrel_owed_to_a_qos2_subscriber_survives_the_restart() {
    use common::mqtt5::{self, Props, PUBCOMP, PUBREL, SESSION_EXPIRY};
    let dir = DataDir::new("qos2-out");
    let first = start(&dir);
    let kept = Props::new().int(SESSION_EXPIRY, 600);
    let (mut subscriber, _) = mqtt5::connect5(first.mqtt, "qos2-out-sub", false, &kept).await;
    assert_eq!(subscriber.subscribe_ok(1, &[("sensors/#", 2)]).await, [2]);
    let (mut publisher, _) = mqtt5::connect5(first.mqtt, "qos2-out-pub", true, &Props::new()).await;
    let once = mqtt5::publish("sensors/once", 2, false, 1, &Props::new(), b"exactly once");
    publisher.publish_acked(&once).await;
    let delivery = subscriber.next_publish(true).await;
    assert_eq!(
        (delivery.qos, &delivery.payload[..]),
        (2, &b"exactly once"[..])
    );
    let pkid = delivery.pkid.expect("a packet identifier");
    let pubrel = subscriber.recv().await.expect("a PUBREL");
    assert_eq!((pubrel[0], mqtt5::ack_of(&pubrel)), (PUBREL, (pkid, 0)));
    // The subscriber holds the message and owes nothing but its PUBCOMP,
    // which the crash cuts off. A later QoS 1 publication's PUBACK comes
    // once what went before it is on disk.
    let after = mqtt5::publish("sensors/after", 1, false, 2, &Props::new(), b"after");
    publisher.publish_acked(&after).await;
    first.kill();

    let second = start(&dir);
    let (mut subscriber, ack) = mqtt5::connect5(second.mqtt, "qos2-out-sub", false, &kept).await;
    assert!(ack.session_present);
    let again = subscriber.recv().await.expect("the PUBREL owed");
    assert_eq!(
        (again[0], mqtt5::ack_of(&again)),
        (PUBREL, (pkid, 0)),
        "the PUBREL comes again, not the message: {again:?}"
    );
    subscriber.send(&mqtt5::ack(PUBCOMP, pkid)).await;
    let next = subscriber.next_publish(true).await;
    assert_eq!(next.payload, b"after");
    assert!(
        subscriber
            .quiet(Duration::from_millis(500))
            .await
            .is_empty(),
        "exactly once: nothing else"
    );
    drop(subscriber);
    second.terminate();

    // Completed, so owed no more.
    let third = start(&dir);
    let (mut subscriber, ack) = mqtt5::connect5(third.mqtt, "qos2-out-sub", false, &kept).await;
    assert!(ack.session_present);
    subscriber.send(&[0xC0, 0]).await;
    let first_packet = subscriber.recv().await.expect("PINGRESP");
    assert_eq!(first_packet, [0xD0, 0], "no PUBREL, no PUBLISH");
    third.terminate();
}

#[tokio::test]
async fn a_kept_sessions_shared_subscription_survives_the_restart() {
    use common::mqtt5::{self, Props, SESSION_EXPIRY};
    let dir = DataDir::new("shared");
    let first = start(&dir);
    let kept = Props::new().int(SESSION_EXPIRY, 600);
    let (mut member, _) = mqtt5::connect5(first.mqtt, "shared-member", false, &kept).await;
    let granted = member
        .subscribe_ok(1, &[("$share/workers/jobs/#", 1)])
        .await;
    assert_eq!(
        granted,
        [1],
        "the SUBACK comes once the subscription is on disk"
    );
    first.kill();

    let second = start(&dir);
    let (mut member, ack) = mqtt5::connect5(second.mqtt, "shared-member", false, &kept).await;
    assert!(
        ack.session_present,
        "the session, with its shared subscription"
    );
    let (mut publisher, _) = mqtt5::connect5(second.mqtt, "shared-pub", true, &Props::new()).await;
    let job = mqtt5::publish("jobs/1", 1, false, 1, &Props::new(), b"job 1");
    publisher.publish_acked(&job).await;
    let got = member.next_publish(true).await;
    assert_eq!(
        (got.topic.as_str(), &got.payload[..]),
        ("jobs/1", &b"job 1"[..])
    );
    // Still a group: a second member shares the work with it.
    let (mut other, _) = mqtt5::connect5(second.mqtt, "shared-other", true, &Props::new()).await;
    assert_eq!(
        other.subscribe_ok(1, &[("$share/workers/jobs/#", 1)]).await,
        [1]
    );
    for n in 2..6u16 {
        let job = mqtt5::publish("jobs/n", 1, false, n, &Props::new(), b"job");
        publisher.publish_acked(&job).await;
    }
    let mine = member.quiet(Duration::from_millis(500)).await.len();
    let theirs = other.quiet(Duration::from_millis(10)).await.len();
    assert_eq!(
        (mine + theirs, mine > 0, theirs > 0),
        (4, true, true),
        "{mine} and {theirs}"
    );
    second.terminate();
}

#[tokio::test]
async fn a_kept_session_is_still_its_principals_after_the_restart() {
    use rumqttc::ConnectReturnCode;
    let dir = DataDir::new("owner");
    let principal = |name: &str| crate::principal_toml(name, "consume = [\"*\"]\n");
    let toml = format!(
        "[mqtt]\nauthentication = true\n\n{}{}",
        principal("reader"),
        principal("other")
    );
    let start = crate::configured(&dir, &toml);
    let as_ = |name: &'static str| {
        move |o: &mut rumqttc::MqttOptions| {
            o.set_client_id("reader-1".into());
            o.set_credentials(name, format!("{name}-pw"));
            o.set_clean_session(false);
        }
    };
    let first = start();
    let mut reader = MqttClient::connect_with(first.mqtt, "reader-1", as_("reader")).await;
    // The SUBACK comes once the subscription, and the session before it,
    // are on disk.
    reader.subscribe("lmos/+/events/#").await;
    first.kill();

    let second = start();
    assert_eq!(
        common::mqtt_refusal(second.mqtt, as_("other")).await,
        Some(ConnectReturnCode::BadClientId),
        "the owner came back from the disk"
    );
    let reader = MqttClient::connect_with(second.mqtt, "reader-1", as_("reader")).await;
    assert!(reader.session_present, "its owner resumes it");
    second.terminate();
}

#[tokio::test]
async fn a_qos2_delivery_in_flight_at_a_crash_comes_again_under_its_identifier() {
    use common::mqtt5::{self, Props, SESSION_EXPIRY};
    let dir = DataDir::new("qos2-sent");
    let first = start(&dir);
    let kept = Props::new().int(SESSION_EXPIRY, 600);
    let (mut subscriber, _) = mqtt5::connect5(first.mqtt, "qos2-sent-sub", false, &kept).await;
    assert_eq!(subscriber.subscribe_ok(1, &[("sensors/#", 2)]).await, [2]);
    let (mut publisher, _) =
        mqtt5::connect5(first.mqtt, "qos2-sent-pub", true, &Props::new()).await;
    // Two acknowledged first, so that the identifier in flight is not the
    // one a fresh connection would start with.
    for n in 1..3u16 {
        let warm = mqtt5::publish("sensors/warm", 2, false, n, &Props::new(), b"warm");
        publisher.publish_acked(&warm).await;
        assert_eq!(subscriber.next_publish(true).await.payload, b"warm");
    }
    let once = mqtt5::publish("sensors/once", 2, false, 3, &Props::new(), b"exactly once");
    publisher.publish_acked(&once).await;
    let delivery = subscriber.next_publish(false).await;
    assert_eq!(
        (delivery.qos, &delivery.payload[..]),
        (2, &b"exactly once"[..])
    );
    let pkid = delivery.pkid.expect("a packet identifier");
    // Received, never acknowledged: the crash comes first. A later
    // publication's PUBACK comes once what went before it is on disk.
    let after = mqtt5::publish("sensors/after", 1, false, 4, &Props::new(), b"after");
    publisher.publish_acked(&after).await;
    first.kill();

    let second = start(&dir);
    let (mut subscriber, ack) = mqtt5::connect5(second.mqtt, "qos2-sent-sub", false, &kept).await;
    assert!(ack.session_present);
    let again = subscriber.next_publish(true).await;
    assert_eq!(
        (again.pkid, &again.payload[..], again.dup),
        (Some(pkid), &b"exactly once"[..], true),
        "the same identifier, flagged DUP, so the subscriber knows it"
    );
    let next = subscriber.next_publish(true).await;
    assert_eq!(next.payload, b"after");
    assert_ne!(next.pkid, Some(pkid));
    assert!(subscriber
        .quiet(Duration::from_millis(500))
        .await
        .is_empty());
    second.terminate();
}
