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
