//! Kill the sidecar (SIGKILL) at random moments under QoS 1 load, 20 times
//! on one data directory, and count the messages whose PUBACK the publisher
//! got but that the kept session never receives: there must be none
//! (issue 31). Duplicates are allowed, as QoS 1 allows them.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lmos_testkit as common;

use common::process::{on_directory, DataDir, Started};
use common::MqttClient;
use lmos_testkit::sidecar_command as sidecar;
use rumqttc::{AsyncClient, Event, MqttOptions, Outgoing, Packet, QoS};

const ROUNDS: u64 = 20;

/// Publishes numbered QoS 1 messages as fast as the broker takes them
/// until the connection dies; the numbers whose PUBACK came.
async fn load(mqtt: std::net::SocketAddr, round: u64, acked: Arc<Mutex<BTreeSet<u64>>>) {
    let mut options = MqttOptions::new(format!("load-{round}"), mqtt.ip().to_string(), mqtt.port());
    options.set_keep_alive(Duration::from_secs(30));
    options.set_inflight(50);
    let (client, mut events) = AsyncClient::new(options, 10);
    let sent: Arc<Mutex<VecDeque<u64>>> = Arc::default();
    let publisher = {
        let sent = sent.clone();
        tokio::spawn(async move {
            for i in 0.. {
                let number = round * 1_000_000 + i;
                sent.lock().unwrap().push_back(number);
                let payload = number.to_string();
                if client
                    .publish("load/n", QoS::AtLeastOnce, false, payload)
                    .await
                    .is_err()
                {
                    return;
                }
            }
        })
    };
    // Outgoing PUBLISHes come in the order they were asked for: each
    // takes the next number, and its PUBACK says which.
    let mut by_pkid: HashMap<u16, u64> = HashMap::new();
    loop {
        match events.poll().await {
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => {
                if let Some(n) = sent.lock().unwrap().pop_front() {
                    by_pkid.insert(pkid, n);
                }
            }
            Ok(Event::Incoming(Packet::PubAck(ack))) => {
                if let Some(n) = by_pkid.remove(&ack.pkid) {
                    acked.lock().unwrap().insert(n);
                }
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    publisher.abort();
}

#[tokio::test]
async fn no_acknowledged_message_is_lost_however_the_sidecar_is_killed() {
    let dir = DataDir::new("torture");
    let start = || Started::start(on_directory(&mut sidecar!(), &dir.0));
    let first = start();
    let mut subscriber = MqttClient::connect_kept(first.mqtt, "torture-sub").await;
    subscriber.subscribe("load/#").await;
    subscriber.client.disconnect().await.unwrap();
    drop(subscriber);
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.terminate();

    let acked: Arc<Mutex<BTreeSet<u64>>> = Arc::default();
    // A fixed seed: the same moments on every run, spread over the load.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    for round in 0..ROUNDS {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let kill_after = Duration::from_millis(20 + seed % 250);
        let sidecar = start();
        let loader = tokio::spawn(load(sidecar.mqtt, round, acked.clone()));
        tokio::time::sleep(kill_after).await;
        sidecar.kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), loader).await;
    }

    let last = start();
    let mut subscriber = MqttClient::connect_kept(last.mqtt, "torture-sub").await;
    assert!(subscriber.session_present);
    let mut received = BTreeSet::new();
    while let Ok(Some(p)) =
        tokio::time::timeout(Duration::from_secs(2), subscriber.publishes.recv()).await
    {
        received.insert(String::from_utf8_lossy(&p.payload).parse::<u64>().unwrap());
    }
    let acked = acked.lock().unwrap().clone();
    eprintln!(
        "{ROUNDS} kills: {} acknowledged, {} received (duplicates allowed)",
        acked.len(),
        received.len()
    );
    assert!(
        acked.len() > 100,
        "the load ran: {} acknowledged",
        acked.len()
    );
    let lost: Vec<_> = acked.difference(&received).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged messages lost, first {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(10)]
    );
    last.terminate();
}
