//! Sidecars linked through a real 3-node NATS cluster in NATS's own
//! protocol (`cluster.mode = "nats"`): the scenarios of `tests/interop/cluster.rs`
//! (events, observation, every request type, discovery, presence, one trace
//! across), then what only this mode does: a sidecar that starts later
//! learns the others' state, a request no sidecar takes is answered 503,
//! odd thingIDs cross, nothing loops, and a sidecar whose node dies moves
//! to another.

use lmos_testkit as common;
use lmos_testkit::cluster_scenarios;
use lmos_testkit::nats;

use std::time::Duration;

use cluster_scenarios::{
    bridged, bridged_config, crossing, linked, one_at_a_time, register_weather, retained_on,
    until_events_cross, until_marker_crosses, Mode,
};
use common::*;
use nats::NatsCluster;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_from_an_agent_on_one_sidecar_reach_consumers_of_another_once() {
    cluster_scenarios::events_from_an_agent_on_one_sidecar_reach_consumers_of_another_once(
        Mode::Nats,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_on_one_sidecar_reads_from_an_mqtt_agent_on_another() {
    cluster_scenarios::a_consumer_on_one_sidecar_reads_from_an_mqtt_agent_on_another(Mode::Nats)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_agent_on_one_sidecar_serves_consumers_of_another_in_every_pattern() {
    cluster_scenarios::a_websocket_agent_on_one_sidecar_serves_consumers_of_another_in_every_pattern(Mode::Nats).await
}

/// The same on Debian's NATS 2.9 (the rest of this file runs on the newest
/// server installed): the native mode needs nothing of the later releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pattern_crosses_on_nats_2_9_too() {
    cluster_scenarios::every_pattern_on(Mode::Nats, nats::nats_server_of("v2.9.")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_from_a_consumer_of_one_sidecar_to_an_agent_behind_another_is_one_trace() {
    cluster_scenarios::a_request_from_a_consumer_of_one_sidecar_to_an_agent_behind_another_is_one_trace(Mode::Nats).await
}

/// The link's metrics once it counts a reconnection and is up again.
async fn reconnected(sidecar: &TestSidecar) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = http(sidecar.http, "GET", "/metrics", None, b"").await.body;
        let reconnects = metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix("lmos_sidecar_cluster_reconnects_total ")
                    .or_else(|| l.strip_prefix("lmos_sidecar_cluster_reconnects "))
            })
            .and_then(|v| v.trim().parse::<f64>().ok());
        let up = metrics.contains("lmos_sidecar_cluster_connected 1");
        if reconnects.is_some_and(|r| r >= 1.0) && up {
            return metrics;
        }
        assert!(tokio::time::Instant::now() < deadline, "{metrics}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_that_starts_later_learns_the_clusters_things_and_nothing_loops() {
    let _alone = one_at_a_time().await;
    let cluster = NatsCluster::start(3).await;
    let a = bridged(&cluster, 0, "a", Mode::Nats).await;
    // A thingID with what NATS cannot carry in a token as it is.
    let odd = "https://example.com/things/lamp 1.x";
    let topics = lmos_sidecar::topics::Topics::new("lmos").unwrap();
    // An MQTT agent of it, on its escaped topics.
    let presence = topics.agent_status(odd);
    let offline = json!({"thingID": odd, "status": "offline"});
    let mut lamp = MqttClient::connect_with_will(a.mqtt, "lamp-agent", &presence, offline).await;
    lamp.subscribe(&topics.agent_requests_filter(odd)).await;
    lamp.publish(
        &presence,
        &json!({"thingID": odd, "status": "online"}),
        true,
    )
    .await;
    lamp.publish(
        &topics.property(odd, "on"),
        &reading(odd, "on", json!(true)),
        true,
    )
    .await;
    let weather = register_weather(&a).await;

    // B comes after all that was said, and asks A for it.
    let b = bridged(&cluster, 1, "b", Mode::Nats).await;
    wait_for_td(&b, cluster_scenarios::WEATHER).await;
    wait_for_stats(&b, |s| s.hosted_things == 2).await;
    let (topic, value, retained) = retained_on(&b, &topics.property(odd, "on")).await;
    assert_eq!(
        (topic.as_str(), value["value"].as_bool(), retained),
        (topics.property(odd, "on").as_str(), Some(true), true)
    );

    // Events of the odd Thing cross once, and do not come back to A.
    let mut on_b = b.ws().await;
    let mut on_a = a.ws().await;
    for ws in [&mut on_b, &mut on_a] {
        ws.subscribe_event(odd, "tick").await;
    }
    until_events_cross(&mut lamp, &mut on_b, odd).await;
    for n in 0..20 {
        lamp.publish_event(odd, "tick", json!(n)).await;
    }
    for ws in [&mut on_b, &mut on_a] {
        let mut seen = Vec::new();
        while seen.len() < 20 {
            let e = ws.recv().await;
            if e["data"] != -1 {
                seen.push(e["data"].as_i64().unwrap());
            }
        }
        assert_eq!(seen, (0..20).collect::<Vec<_>>(), "once each, in order");
    }
    on_b.assert_nothing_pending().await;
    on_a.assert_nothing_pending().await;

    // A request from B reaches the MQTT agent on A by request/reply.
    on_b.send(
        json!({"thingID": odd, "messageID": "r1", "messageType": "readProperty", "name": "on"}),
    )
    .await;
    let (topic, request, _) = lamp.recv_json().await;
    assert_eq!(topic, topics.agent_request(odd, "readProperty"));
    let mut answer = reading(odd, "on", json!(false));
    answer["correlationID"] = request["correlationID"].clone();
    lamp.publish(&topics.agent_replies(odd), &answer, false)
        .await;
    let read = on_b.recv().await;
    assert_eq!(
        (read["correlationID"].as_str(), read["value"].as_bool()),
        (Some("r1"), Some(false)),
        "{read}"
    );
    drop(weather);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_no_sidecar_takes_is_answered_503() {
    let _alone = one_at_a_time().await;
    let cluster = NatsCluster::start(3).await;
    let b = bridged(&cluster, 1, "b", Mode::Nats).await;
    let thing = "urn:cluster:ghost";
    // Presence with no sidecar behind it, as a sidecar that died leaves it.
    let nats = async_nats::connect(format!("nats://{}", cluster.client_addr(0)))
        .await
        .expect("connect to NATS");
    nats.publish(
        format!("lmos.{thing}.agent.status"),
        json!({"thingID": thing, "status": "online"})
            .to_string()
            .into(),
    )
    .await
    .unwrap();
    nats.flush().await.unwrap();
    wait_for_stats(&b, |s| s.hosted_things == 1).await;

    let mut consumer = b.ws().await;
    consumer
        .send(json!({"thingID": thing, "messageID": "r1", "messageType": "readProperty", "name": "p"}))
        .await;
    let answer = consumer.recv().await;
    assert_eq!(
        (
            answer["messageType"].as_str(),
            answer["status"].as_str(),
            answer["correlationID"].as_str()
        ),
        (Some("error"), Some("503"), Some("r1")),
        "{answer}"
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_whose_node_dies_moves_to_another_and_serves_again() {
    let _alone = one_at_a_time().await;
    let mut cluster = NatsCluster::start(3).await;
    let a = bridged(&cluster, 0, "a", Mode::Nats).await;
    let b =
        linked(TestSidecar::start_with(bridged_config(&cluster, &[1, 2], "b", Mode::Nats)).await)
            .await;
    let thing = "urn:cluster:ticker";
    let (mut agent, mut consumer) = crossing(&a, &b, thing, "ticker-agent").await;

    cluster.kill(1);
    // Core NATS keeps nothing for a subscriber away: what was in flight
    // when the node died is lost (see docs/clustering-jetstream.md); what follows crosses.
    until_marker_crosses(&mut agent, &mut consumer, thing, 0).await;
    reconnected(&b).await;
    assert_eq!(
        http(b.http, "GET", "/readyz", None, b"").await.body,
        "ready\n"
    );

    // Requests find their way again: B's inbox moved with it.
    consumer
        .send(json!({"thingID": thing, "messageID": "r1", "messageType": "readProperty", "name": "n"}))
        .await;
    let (_, request, _) = agent.recv_json().await;
    let mut answer = reading(thing, "n", json!(7));
    answer["correlationID"] = request["correlationID"].clone();
    agent
        .publish(&format!("lmos/{thing}/agent/replies"), &answer, false)
        .await;
    loop {
        let m = consumer.recv().await;
        if m["correlationID"] == "r1" {
            assert_eq!(m["value"], 7, "{m}");
            break;
        }
    }
    a.stop().await;
    b.stop().await;
}

/// The key of a retained topic in its JetStream bucket, and the bucket.
async fn bucket_of(
    cluster: &NatsCluster,
    topic: &str,
) -> (async_nats::jetstream::kv::Store, String) {
    use lmos_sidecar::cluster::nats::kv;
    let topics = lmos_sidecar::topics::Topics::new("lmos").unwrap();
    let (bucket, key) = kv::entry(&topics, topic).expect("a retained topic");
    let client = async_nats::connect(format!("nats://{}", cluster.client_addr(2)))
        .await
        .expect("connect to NATS");
    let store = async_nats::jetstream::new(client)
        .get_key_value(bucket.name(&topics))
        .await
        .expect("the sidecars made the bucket");
    (store, key)
}

/// Until the bucket has (or has not) an entry for the key.
async fn until_entry(store: &async_nats::jetstream::kv::Store, key: &str, present: bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let got = store.get(key).await.expect("read the bucket");
        if got.is_some() == present {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "entry {key} present: {}",
            got.is_some()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_buckets_hold_the_clusters_state_for_a_sidecar_that_starts_after_its_publisher_stopped()
{
    let _alone = one_at_a_time().await;
    let cluster = NatsCluster::start(3).await;
    let topics = lmos_sidecar::topics::Topics::new("lmos").unwrap();
    // Presence entries live 3 s unless renewed (the bucket's first maker
    // sets it).
    let mut config = bridged_config(&cluster, &[0], "a", Mode::Nats);
    config.cluster.presence_ttl_s = 3;
    let a = linked(TestSidecar::start_with(config).await).await;
    let lamp = "urn:cluster:lamp";
    let mut agent = mqtt_agent(a.mqtt, "lamp-agent", lamp, None).await;
    agent
        .publish(
            &topics.property(lamp, "on"),
            &reading(lamp, "on", json!(true)),
            true,
        )
        .await;
    let weather = register_weather(&a).await;

    // Each kind of state has its entry, presence while the agent is online.
    let (readings, on) = bucket_of(&cluster, &topics.property(lamp, "on")).await;
    until_entry(&readings, &on, true).await;
    let (tds, td) = bucket_of(&cluster, &topics.td(cluster_scenarios::WEATHER)).await;
    until_entry(&tds, &td, true).await;
    let (presence, weather_key) =
        bucket_of(&cluster, &topics.agent_status(cluster_scenarios::WEATHER)).await;
    until_entry(&presence, &weather_key, true).await;
    let (_, lamp_key) = bucket_of(&cluster, &topics.agent_status(lamp)).await;
    // Renewed while its sidecar lives.
    tokio::time::sleep(Duration::from_secs(4)).await;
    until_entry(&presence, &lamp_key, true).await;
    // An agent that leaves takes its presence entry with it.
    drop(weather);
    until_entry(&presence, &weather_key, false).await;
    // A sidecar that stops leaves its agents' presence for 3 s at most.
    a.stop().await;
    until_entry(&presence, &lamp_key, false).await;
    until_entry(&tds, &td, true).await;
    until_entry(&readings, &on, true).await;

    // B comes when A is gone: only the buckets can tell it.
    let b = bridged(&cluster, 1, "b", Mode::Nats).await;
    let (topic, value, retained) = retained_on(&b, &topics.property(lamp, "on")).await;
    assert_eq!(
        (topic.as_str(), value["value"].as_bool(), retained),
        (topics.property(lamp, "on").as_str(), Some(true), true)
    );
    let (topic, _, retained) = retained_on(&b, &topics.td(cluster_scenarios::WEATHER)).await;
    assert_eq!(
        (topic.as_str(), retained),
        (topics.td(cluster_scenarios::WEATHER).as_str(), true)
    );
    wait_for_td(&b, cluster_scenarios::WEATHER).await;
    let stats = b.gateway.stats().await;
    assert_eq!(
        stats.hosted_things, 0,
        "no presence outlived its agent or sidecar"
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_presence_no_sidecar_renews_goes_offline() {
    let _alone = one_at_a_time().await;
    let cluster = NatsCluster::start(3).await;
    let mut config = bridged_config(&cluster, &[1], "b", Mode::Nats);
    config.cluster.presence_ttl_s = 3;
    let b = linked(TestSidecar::start_with(config).await).await;
    let thing = "urn:cluster:ghost";
    let topics = lmos_sidecar::topics::Topics::new("lmos").unwrap();
    // Presence as a sidecar that then dies leaves it: said live, written
    // once in the bucket, never renewed.
    let online = json!({"thingID": thing, "status": "online"}).to_string();
    let (presence, key) = bucket_of(&cluster, &topics.agent_status(thing)).await;
    presence.put(&key, online.clone().into()).await.unwrap();
    let nats = async_nats::connect(format!("nats://{}", cluster.client_addr(0)))
        .await
        .expect("connect to NATS");
    nats.publish(format!("lmos.{thing}.agent.status"), online.into())
        .await
        .unwrap();
    nats.flush().await.unwrap();
    wait_for_stats(&b, |s| s.hosted_things == 1).await;
    let mut watcher = b.mqtt("b-watcher").await;
    watcher.subscribe(&topics.agent_status(thing)).await;
    let (_, status, _) = watcher.recv_json().await;
    assert_eq!(status["status"], "online");
    // The entry expires after 3 s; two listings (a second apart) later B
    // takes the agent for gone.
    let started = std::time::Instant::now();
    let (_, status, _) = watcher.recv_json().await;
    assert_eq!(status["status"], "offline", "{status}");
    assert!(started.elapsed() < Duration::from_secs(9));
    wait_for_stats(&b, |s| s.hosted_things == 0).await;
    b.stop().await;
}

/// Counts of each event's `data` (0..n) until all arrived, from `next`.
async fn tally(n: i64, mut next: impl AsyncFnMut() -> serde_json::Value) -> Vec<u32> {
    let mut counts = vec![0u32; n as usize];
    let mut missing = n;
    while missing > 0 {
        let e = next().await;
        let Some(d) = e["data"].as_i64().filter(|d| *d >= 0) else {
            continue; // the markers sent until events crossed
        };
        counts[d as usize] += 1;
        if counts[d as usize] == 1 {
            missing -= 1;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_under_load_loses_no_event_and_duplicates_none() {
    const N: i64 = 2000;
    let _alone = one_at_a_time().await;
    let mut cluster = NatsCluster::start(3).await;
    let topics = lmos_sidecar::topics::Topics::new("lmos").unwrap();
    let a = bridged(&cluster, 0, "a", Mode::Nats).await;
    let b =
        linked(TestSidecar::start_with(bridged_config(&cluster, &[1, 2], "b", Mode::Nats)).await)
            .await;
    let thing = "urn:cluster:ticker";
    let mut agent = mqtt_agent(a.mqtt, "ticker-agent", thing, None).await;
    wait_for_stats(&b, |s| s.hosted_things == 1).await;
    let mut ws = b.ws().await;
    ws.subscribe_event(thing, "tick").await;
    let mut mqtt = b.mqtt("b-consumer").await;
    mqtt.subscribe(&topics.event(thing, "tick")).await;
    until_events_cross(&mut agent, &mut ws, thing).await;

    // QoS 1 into A's broker, each acknowledged; B's node dies on the way.
    for n in 0..N {
        agent.publish_event(thing, "tick", json!(n)).await;
        if n == N / 4 {
            cluster.kill(1);
        }
    }
    // What the dead node had handed out but B never got comes again after
    // the consumer's ack_wait (10 s), once B's link is back on another node
    // and the consumer's leader is elected again: here the longest wait for
    // one event was 5.4 s, on CI once past the kit's 10 s WAIT.
    let redelivered = Duration::from_secs(30);
    let on_ws = tally(N, async || ws.recv_within(redelivered).await).await;
    let on_mqtt = tally(N, async || {
        let p = mqtt.recv().await;
        serde_json::from_slice(&p.payload).unwrap()
    })
    .await;
    for (who, counts) in [("WebSocket", on_ws), ("MQTT", on_mqtt)] {
        let twice: Vec<usize> = (0..N as usize).filter(|&i| counts[i] != 1).collect();
        assert!(
            twice.is_empty(),
            "{who}: events not exactly once: {twice:?}"
        );
    }
    ws.assert_nothing_pending().await;
    let late = tokio::time::timeout(Duration::from_secs(1), mqtt.publishes.recv()).await;
    assert!(
        late.map_or(true, |p| p
            .is_none_or(
                |p| String::from_utf8_lossy(&p.payload).contains("\"data\":-1")
            )),
        "no event twice on MQTT"
    );
    // What crossed, counted: every event, live as NATS delivered it or
    // from the stream through B's consumer; those before the kill live.
    let metrics = reconnected(&b).await;
    let count = |what: &str| {
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "lmos_sidecar_cluster_jetstream{{what=\"{what}\"}} "
                ))
            })
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let (live, received) = (count("live"), count("received"));
    assert!(live + received >= N as f64, "{metrics}");
    assert!(live >= (N / 4) as f64, "{metrics}");
    eprintln!("{live} events came live, {received} from the stream");
    a.stop().await;
    b.stop().await;
}

/// An MQTT agent of `thing` on `a` and a WebSocket consumer of its events
/// on `b`; returns once its events reach the consumer.
async fn events_cross(a: &TestSidecar, b: &TestSidecar, thing: &str, agent_id: &str) {
    crossing(a, b, thing, agent_id).await;
}

/// Every stream's details (buckets' included) as node 0 reports them.
fn stream_details(cluster: &NatsCluster) -> Vec<serde_json::Value> {
    cluster
        .monitor(0, "/jsz?accounts=true&streams=true&config=true")
        .iter()
        .flat_map(|v| v["account_details"].as_array().into_iter().flatten())
        .flat_map(|a| a["stream_detail"].as_array().into_iter().flatten())
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_dev_node_takes_the_stream_and_buckets_with_one_replica() {
    let _alone = one_at_a_time().await;
    let cluster = NatsCluster::start(1).await;
    // R3 asked for (the default), refused by a NATS that is not clustered.
    let a = bridged(&cluster, 0, "a", Mode::Nats).await;
    let b = bridged(&cluster, 0, "b", Mode::Nats).await;
    events_cross(&a, &b, "urn:cluster:dev", "dev-agent").await;
    let replicas: Vec<u64> = stream_details(&cluster)
        .iter()
        .filter_map(|s| s["config"]["num_replicas"].as_u64())
        .collect();
    assert!(
        replicas.len() >= 4 && replicas.iter().all(|&r| r == 1),
        "the stream and three buckets, R1: {replicas:?}"
    );
    a.stop().await;
    b.stop().await;
}

/// The asking sidecar's node dies with every answer still to come: each
/// invocation's result still arrives, once (answers are acknowledged by the
/// asker's link and repeated until they are, see `cluster::nats::answers`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_while_results_cross_loses_no_invocation_result() {
    const N: usize = 100;
    let _alone = one_at_a_time().await;
    let mut cluster = NatsCluster::start(3).await;
    let a = bridged(&cluster, 0, "a", Mode::Nats).await;
    let mut config = bridged_config(&cluster, &[1, 2], "b", Mode::Nats);
    // Long enough for B's link to move to node 2: this is about loss.
    config.requests.timeout_ms = 30_000;
    let b = linked(TestSidecar::start_with(config).await).await;
    let thing = "urn:cluster:invoked";
    let mut agent = mqtt_agent(a.mqtt, "invoked-agent", thing, None).await;
    wait_for_stats(&b, |s| s.hosted_things == 1).await;
    let mut ws = b.ws().await;
    for n in 0..N {
        ws.send(json!({"thingID": thing, "messageID": format!("i{n}"), "messageType": "invokeAction", "action": "tick", "input": n}))
            .await;
    }
    // Every request reached the agent before anything is answered.
    let mut requests = Vec::new();
    while requests.len() < N {
        let (_, request, _) = agent.recv_json().await;
        requests.push(request);
    }
    cluster.kill(1);
    for request in &requests {
        let status = lmos(
            thing,
            "actionStatus",
            json!({"action": "tick", "status": "completed", "output": request["input"], "correlationID": request["correlationID"]}),
        );
        agent
            .publish(&format!("lmos/{thing}/agent/replies"), &status, false)
            .await;
    }
    let mut results = vec![0u32; N];
    let mut others = Vec::new();
    while results.contains(&0) {
        let reply = tokio::time::timeout(Duration::from_secs(40), ws.recv())
            .await
            .unwrap_or_else(|_| {
                panic!("results still missing: {results:?}, other replies: {others:?}")
            });
        let n = reply["correlationID"]
            .as_str()
            .and_then(|c| c.strip_prefix('i'))
            .and_then(|n| n.parse::<usize>().ok());
        match (n, reply["status"].as_str()) {
            (Some(n), Some("completed")) if n < N => results[n] += 1,
            _ => others.push(reply),
        }
    }
    ws.assert_nothing_pending().await;
    assert!(
        results.iter().all(|&c| c == 1) && others.is_empty(),
        "each result once: {results:?}, other replies: {others:?}"
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_can_live_in_memory_and_events_still_cross() {
    let _alone = one_at_a_time().await;
    let cluster = NatsCluster::start(1).await;
    let mut config = bridged_config(&cluster, &[0], "a", Mode::Nats);
    config.cluster.jetstream_storage = lmos_sidecar::config::StreamStorage::Memory;
    let a = linked(TestSidecar::start_with(config).await).await;
    let b = bridged(&cluster, 0, "b", Mode::Nats).await;
    events_cross(&a, &b, "urn:cluster:memory", "memory-agent").await;
    let storage: Vec<(String, String)> = stream_details(&cluster)
        .iter()
        .map(|s| {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            (text(&s["name"]), text(&s["config"]["storage"]))
        })
        .collect();
    let events: Vec<&str> = storage
        .iter()
        .filter(|(name, _)| name.ends_with("-events"))
        .map(|(_, storage)| storage.as_str())
        .collect();
    assert_eq!(events, ["memory"], "{storage:?}");
    // The buckets stay on disk.
    assert!(
        storage
            .iter()
            .filter(|(name, _)| name.starts_with("KV_"))
            .all(|(_, storage)| storage == "file"),
        "{storage:?}"
    );
    a.stop().await;
    b.stop().await;
}

/// A NATS server started without JetStream, killed when dropped.
struct PlainNats(std::process::Child);

impl Drop for PlainNats {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_without_jetstream_gets_core_nats_and_says_so() {
    let _alone = one_at_a_time().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let _server = PlainNats(
        std::process::Command::new(nats::nats_server_binary())
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start nats-server"),
    );
    let config = |name: &str| {
        let mut c = test_config();
        c.sidecar.thing_id = format!("urn:lmos:sidecar-{name}");
        c.cluster.url = format!("nats://127.0.0.1:{port}");
        c.cluster.mode = lmos_sidecar::config::ClusterMode::Nats;
        c.cluster.keep_alive_s = 60;
        c
    };
    // `cluster.jetstream` is left at its default (true).
    let a = TestSidecar::start_with(config("a")).await;
    let b = TestSidecar::start_with(config("b")).await;
    for sidecar in [&a, &b] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let body = http(sidecar.http, "GET", "/readyz", None, b"").await.body;
            if body.contains("without JetStream") {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let metrics = http(sidecar.http, "GET", "/metrics", None, b"").await.body;
        assert!(
            metrics.contains("lmos_sidecar_cluster_jetstream{what=\"core_fallback\"} 1")
                && metrics.contains("lmos_sidecar_cluster_connected 1"),
            "{metrics}"
        );
    }
    // Presence and events cross by core NATS.
    let thing = "urn:cluster:plain";
    crossing(&a, &b, thing, "plain-agent").await;
    a.stop().await;
    b.stop().await;
}
