//! Sidecars linked through a real 3-node NATS cluster, in either cluster
//! mode: a Thing behind sidecar A is usable by consumers of sidecar B. The
//! scenarios of `tests/interop/cluster.rs` (MQTT bridge) and `tests/interop/nats_native.rs`
//! (NATS's own protocol).

use std::time::Duration;

use crate as common;
use crate::nats::NatsCluster;
use crate::*;
use serde_json::{json, Value};

/// How the sidecars reach each other: bridged to NATS's MQTT listener, or
/// in NATS's own protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Mqtt,
    Nats,
}

pub fn bridged_config(
    cluster: &NatsCluster,
    nodes: &[usize],
    name: &str,
    mode: Mode,
) -> lmos_sidecar::Config {
    let mut c = test_config();
    c.sidecar.thing_id = format!("urn:lmos:sidecar-{name}");
    c.cluster.url = nodes
        .iter()
        .map(|&n| match mode {
            Mode::Mqtt => format!("mqtt://{}", cluster.mqtt_addr(n)),
            Mode::Nats => format!("nats://{}", cluster.client_addr(n)),
        })
        .collect::<Vec<_>>()
        .join(",");
    if mode == Mode::Nats {
        c.cluster.mode = lmos_sidecar::config::ClusterMode::Nats;
    }
    c.cluster.keep_alive_s = 60;
    c
}

/// The tests of this file, one at a time: each runs three NATS nodes and two
/// sidecars, and five of them at once on a 2-core machine (while other test
/// binaries run too) once starved a cross-sidecar request past its wait.
pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

pub async fn bridged(cluster: &NatsCluster, node: usize, name: &str, mode: Mode) -> TestSidecar {
    linked(TestSidecar::start_with(bridged_config(cluster, &[node], name, mode)).await).await
}

/// Once the sidecar's bridge has subscribed in the cluster.
pub async fn linked(sidecar: TestSidecar) -> TestSidecar {
    // Subscribing in NATS takes a JetStream consumer per filter: seconds.
    let linked = async {
        loop {
            let body = http(sidecar.http, "GET", "/readyz", None, b"").await.body;
            if body == "ready\n" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), linked)
        .await
        .expect("the bridge subscribes in the cluster");
    sidecar
}

/// Until the consumer gets an event of `thing` (publishing one every half
/// second): the links' subscriptions are live in the cluster.
pub async fn until_events_cross(agent: &mut MqttClient, consumer: &mut WsClient, thing: &str) {
    until_marker_crosses(agent, consumer, thing, -1).await
}

/// As [`until_events_cross`] with `marker` as the data; earlier markers
/// still under way are skipped.
pub async fn until_marker_crosses(
    agent: &mut MqttClient,
    consumer: &mut WsClient,
    thing: &str,
    marker: i64,
) {
    loop {
        agent.publish_event(thing, "tick", json!(marker)).await;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
        while let Ok(e) = tokio::time::timeout_at(deadline, consumer.recv()).await {
            if e["data"] == marker {
                return;
            }
            assert!(e["data"].as_i64() < Some(marker), "{e}");
        }
    }
}

/// An MQTT agent of `thing` on `a` (as `agent_id`) and a WebSocket
/// consumer of its `tick` events on `b`, once its events reach the consumer.
pub async fn crossing(
    a: &TestSidecar,
    b: &TestSidecar,
    thing: &str,
    agent_id: &str,
) -> (MqttClient, WsClient) {
    let mut agent = mqtt_agent(a.mqtt, agent_id, thing, None).await;
    wait_for_stats(b, |s| s.hosted_things == 1).await;
    let mut consumer = b.ws().await;
    consumer.subscribe_event(thing, "tick").await;
    until_events_cross(&mut agent, &mut consumer, thing).await;
    (agent, consumer)
}

/// The WeatherAgent (with [`weather_td`]) connected to `sidecar`, once its
/// TD is registered there.
pub async fn register_weather(sidecar: &TestSidecar) -> WsClient {
    let mut weather = sidecar.ws_agent(WEATHER).await;
    weather.send(weather_td()).await;
    wait_for_td(sidecar, WEATHER).await;
    weather
}

/// What a new MQTT client of `sidecar` gets first on `topic`: topic, JSON,
/// retained.
pub async fn retained_on(sidecar: &TestSidecar, topic: &str) -> (String, Value, bool) {
    let mut observer = sidecar
        .mqtt(&format!("observer-{}", uuid::Uuid::new_v4()))
        .await;
    observer.subscribe(topic).await;
    observer.recv_json().await
}

pub async fn events_from_an_agent_on_one_sidecar_reach_consumers_of_another_once(mode: Mode) {
    let _alone = one_at_a_time().await;
    let cluster = NatsCluster::start(3).await;
    let a = bridged(&cluster, 0, "a", mode).await;
    let b = bridged(&cluster, 1, "b", mode).await;
    let thing = "urn:cluster:weather";

    let mut ws = b.ws().await;
    ws.send(json!({"thingID": thing, "messageID": "s", "messageType": "subscribeEvent", "event": "tick"}))
        .await;
    ws.barrier().await;
    let mut mqtt = b.mqtt("b-subscriber").await;
    mqtt.subscribe(&format!("lmos/{thing}/events/tick")).await;
    let mut agent = a.mqtt("a-agent").await;

    // Until both bridges' subscriptions are live in the cluster, events
    // may not cross; the first that does marks the start.
    let first = loop {
        agent.publish_event(thing, "tick", json!(-1)).await;
        if let Ok(e) = tokio::time::timeout(Duration::from_millis(500), ws.recv()).await {
            break e;
        }
    };
    assert_eq!(first["correlationID"], "s");
    for n in 0..50 {
        agent.publish_event(thing, "tick", json!(n)).await;
    }
    let mut seen = Vec::new();
    while seen.len() < 50 {
        let e = ws.recv().await;
        if e["data"] != json!(-1) {
            seen.push(e["data"].as_i64().unwrap());
        }
    }
    assert_eq!(
        seen,
        (0..50).collect::<Vec<_>>(),
        "each event once, in order"
    );
    let mut over_mqtt = Vec::new();
    while over_mqtt.len() < 50 {
        let (_, e, _) = mqtt.recv_json().await;
        if e["data"] != json!(-1) {
            over_mqtt.push(e["data"].as_i64().unwrap());
        }
    }
    assert_eq!(over_mqtt, (0..50).collect::<Vec<_>>());
    // Nothing came twice or looped back.
    ws.assert_nothing_pending().await;
    let metrics = http(b.http, "GET", "/metrics", None, b"").await.body;
    assert!(
        metrics.contains("lmos_sidecar_cluster_connected 1"),
        "{metrics}"
    );
    a.stop().await;
    b.stop().await;
}

pub async fn a_consumer_on_one_sidecar_reads_from_an_mqtt_agent_on_another(mode: Mode) {
    let _alone = one_at_a_time().await;
    let cluster = NatsCluster::start(3).await;
    let a = bridged(&cluster, 0, "a", mode).await;
    let b = bridged(&cluster, 1, "b", mode).await;
    let thing = "urn:cluster:lamp";

    let mut agent = mqtt_agent(a.mqtt, "lamp-agent", thing, None).await;
    // B learns of the agent through the bridged, retained presence.
    wait_for_stats(&b, |s| s.hosted_things == 1).await;

    let mut consumer = b.ws().await;
    consumer
        .send(json!({"thingID": thing, "messageID": "r1", "messageType": "readProperty", "name": "on"}))
        .await;
    let (_, request, _) = agent.recv_json().await;
    assert_eq!(request["messageType"], "readProperty", "{request}");
    let reply = json!({"thingID": thing, "messageID": "a1", "messageType": "propertyReading", "name": "on", "value": true, "timestamp": "2025-01-01T00:00:00Z", "correlationID": request["correlationID"]});
    agent
        .publish(&format!("lmos/{thing}/agent/replies"), &reply, false)
        .await;
    let answer = consumer.recv().await;
    assert_eq!(
        (answer["value"].as_bool(), answer["correlationID"].as_str()),
        (Some(true), Some("r1")),
        "{answer}"
    );
    a.stop().await;
    b.stop().await;
}

pub const WEATHER: &str = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";

/// The WeatherAgent's TD with a writable property `units` added.
pub fn weather_td() -> Value {
    let mut td: Value =
        serde_json::from_str(include_str!("../../tests/fixtures/weather-agent-td.json")).unwrap();
    td["properties"]["units"] =
        json!({"type": "string", "forms": [{"href": "https://weatherai.example.com/units"}]});
    td
}

/// The next message of the consumer that is not an event or reading of
/// the warm-up.
pub async fn next_for(ws: &mut WsClient, correlation: &str) -> Value {
    loop {
        let m = ws.recv().await;
        if m["correlationID"] == correlation {
            return m;
        }
        assert!(
            m["correlationID"] == "warm" || m["correlationID"] == "obs",
            "unexpected while waiting for {correlation}: {m}"
        );
    }
}

/// A request as the agent receives it: from the consumer's sidecar, under
/// a route of that sidecar's making.
pub async fn request_for_agent(agent: &mut WsClient, message_type: &str) -> Value {
    let request = agent.recv().await;
    assert_eq!(request["messageType"], message_type, "{request}");
    assert!(request["correlationID"].is_string(), "{request}");
    request
}

pub async fn answer(agent: &mut WsClient, request: &Value, message_type: &str, extra: Value) {
    let mut reply = lmos(WEATHER, message_type, extra);
    reply["correlationID"] = request["correlationID"].clone();
    agent.send(reply).await;
}

pub async fn a_websocket_agent_on_one_sidecar_serves_consumers_of_another_in_every_pattern(
    mode: Mode,
) {
    every_pattern_on(mode, crate::nats::nats_server_binary()).await
}

/// As [`a_websocket_agent_on_one_sidecar_serves_consumers_of_another_in_every_pattern`],
/// on a cluster of the `nats-server` at `server`.
pub async fn every_pattern_on(mode: Mode, server: std::path::PathBuf) {
    let _alone = one_at_a_time().await;
    let cluster = NatsCluster::start_on(3, server).await;
    let a = bridged(&cluster, 0, "a", mode).await;
    let b = bridged(&cluster, 1, "b", mode).await;

    // The agent connects to A and registers its TD there.
    let mut agent = a.ws_agent(WEATHER).await;
    agent.send(weather_td()).await;

    // Discovery: B's directory has it, with B's own forms.
    wait_for_td(&b, WEATHER).await;
    let td = http(b.http, "GET", &format!("/things/{WEATHER}"), None, b"")
        .await
        .json();
    let forms = td["actions"]["getWeather"]["forms"].to_string();
    let b_ws = format!("ws://{}/lmos", b.http);
    assert!(forms.contains(&b_ws), "B's forms: {forms}");
    assert!(!forms.contains(&a.http.to_string()), "A's forms: {forms}");
    wait_for_stats(&b, |s| s.hosted_things == 1).await;

    let mut consumer = b.ws().await;
    for m in [
        json!({"thingID": WEATHER, "messageID": "warm", "messageType": "subscribeEvent", "event": "userFeedbackReceived"}),
        json!({"thingID": WEATHER, "messageID": "obs", "messageType": "observeProperty", "name": "units"}),
    ] {
        consumer.send(m).await;
    }
    consumer.barrier().await;
    let mut mqtt = b.mqtt("b-mqtt-consumer").await;
    mqtt.subscribe(&format!("lmos/{WEATHER}/events/+")).await;
    mqtt.subscribe(&format!("lmos/{WEATHER}/actions/getWeather/status/+"))
        .await;
    mqtt.subscribe(&format!("lmos/{WEATHER}/replies/+")).await;

    // Events, once the bridges' subscriptions are live in the cluster.
    let feedback = |n: i64| {
        lmos(
            WEATHER,
            "event",
            json!({"event": "userFeedbackReceived", "data": n, "timestamp": "2025-01-20T19:00:00Z"}),
        )
    };
    loop {
        agent.send(feedback(-1)).await;
        if let Ok(e) = tokio::time::timeout(Duration::from_millis(500), consumer.recv()).await {
            assert_eq!(e["data"], -1);
            break;
        }
    }
    for n in 0..20 {
        agent.send(feedback(n)).await;
    }
    let mut seen = Vec::new();
    while seen.len() < 20 {
        let e = consumer.recv().await;
        assert_eq!(e["correlationID"], "warm", "{e}");
        if e["data"] != -1 {
            seen.push(e["data"].as_i64().unwrap());
        }
    }
    assert_eq!(seen, (0..20).collect::<Vec<_>>(), "once each, in order");
    let mut over_mqtt = Vec::new();
    while over_mqtt.len() < 20 {
        let (_, e, _) = mqtt.recv_json().await;
        if e["data"] != -1 {
            over_mqtt.push(e["data"].as_i64().unwrap());
        }
    }
    assert_eq!(over_mqtt, (0..20).collect::<Vec<_>>());

    // Observation: the agent's reading reaches B's observer.
    agent.send(reading(WEATHER, "units", json!("metric"))).await;
    let observed = next_for(&mut consumer, "obs").await;
    assert_eq!(observed["value"], "metric", "{observed}");

    // readProperty from B's WebSocket consumer.
    consumer
        .send(json!({"thingID": WEATHER, "messageID": "r1", "messageType": "readProperty", "name": "units"}))
        .await;
    let request = request_for_agent(&mut agent, "readProperty").await;
    assert_ne!(request["correlationID"], "r1", "routed under B's route");
    answer(
        &mut agent,
        &request,
        "propertyReading",
        json!({"name": "units", "value": "metric", "timestamp": "2025-01-20T19:00:01Z"}),
    )
    .await;
    let read = next_for(&mut consumer, "r1").await;
    assert_eq!(
        (read["messageType"].as_str(), read["value"].as_str()),
        (Some("propertyReading"), Some("metric")),
        "{read}"
    );

    // writeProperty from B's MQTT consumer; B checks it against the TD it learnt.
    mqtt.publish(
        &format!("lmos/{WEATHER}/requests/writeProperty"),
        &json!({"thingID": WEATHER, "messageID": "w1", "messageType": "writeProperty", "name": "modelConfiguration", "data": {}}),
        false,
    )
    .await;
    let (topic, refused, _) = mqtt.recv_json().await;
    assert_eq!(topic, format!("lmos/{WEATHER}/replies/w1"));
    assert_eq!(
        refused["detail"], "The property `modelConfiguration` is read-only.",
        "{refused}"
    );
    mqtt.publish(
        &format!("lmos/{WEATHER}/requests/writeProperty"),
        &json!({"thingID": WEATHER, "messageID": "w2", "messageType": "writeProperty", "name": "units", "data": "imperial"}),
        false,
    )
    .await;
    let request = request_for_agent(&mut agent, "writeProperty").await;
    assert_eq!(request["data"], "imperial");
    answer(
        &mut agent,
        &request,
        "propertyReading",
        json!({"name": "units", "value": "imperial", "timestamp": "2025-01-20T19:00:02Z"}),
    )
    .await;
    let (topic, written, _) = mqtt.recv_json().await;
    assert_eq!(topic, format!("lmos/{WEATHER}/replies/w2"));
    assert_eq!(
        (written["correlationID"].as_str(), written["value"].as_str()),
        (Some("w2"), Some("imperial")),
        "{written}"
    );
    let observed = next_for(&mut consumer, "obs").await;
    assert_eq!(
        observed["value"], "imperial",
        "observers see what was written"
    );

    // invokeAction with its actionStatus stream, then queryAction.
    let question = json!({"question": "What is the weather in Oslo?", "interactionMode": "text"});
    consumer
        .send(json!({"thingID": WEATHER, "messageID": "i1", "messageType": "invokeAction", "action": "getWeather", "input": question}))
        .await;
    let request = request_for_agent(&mut agent, "invokeAction").await;
    for status in ["running", "completed"] {
        answer(
            &mut agent,
            &request,
            "actionStatus",
            json!({"action": "getWeather", "status": status, "output": status}),
        )
        .await;
    }
    for status in ["running", "completed"] {
        let s = next_for(&mut consumer, "i1").await;
        assert_eq!(
            (s["messageType"].as_str(), s["status"].as_str()),
            (Some("actionStatus"), Some(status)),
            "{s}"
        );
        let (topic, over_mqtt, _) = mqtt.recv_json().await;
        assert_eq!(
            topic,
            format!("lmos/{WEATHER}/actions/getWeather/status/i1")
        );
        assert_eq!(over_mqtt["status"], status);
    }
    consumer
        .send(json!({"thingID": WEATHER, "messageID": "q1", "messageType": "queryAction", "action": "getWeather", "correlationID": "i1"}))
        .await;
    assert_eq!(next_for(&mut consumer, "i1").await["status"], "completed");

    // cancelAction reaches the agent under the invocation's route.
    consumer
        .send(json!({"thingID": WEATHER, "messageID": "i2", "messageType": "invokeAction", "action": "getWeather", "input": question}))
        .await;
    let invocation = request_for_agent(&mut agent, "invokeAction").await;
    consumer
        .send(json!({"thingID": WEATHER, "messageID": "c2", "messageType": "cancelAction", "action": "getWeather", "correlationID": "i2"}))
        .await;
    let cancel = request_for_agent(&mut agent, "cancelAction").await;
    assert_eq!(cancel["correlationID"], invocation["correlationID"]);
    answer(
        &mut agent,
        &invocation,
        "actionStatus",
        json!({"action": "getWeather", "status": "cancelled"}),
    )
    .await;
    assert_eq!(next_for(&mut consumer, "i2").await["status"], "cancelled");
    let (_, cancelled, _) = mqtt.recv_json().await;
    assert_eq!(cancelled["status"], "cancelled");

    // A's gateway forgot every route it answered for B.
    wait_for_stats(&a, |s| s.remote_requests == 0).await;

    // The agent vanishes mid-invocation: B's consumer hears it failed.
    consumer
        .send(json!({"thingID": WEATHER, "messageID": "i3", "messageType": "invokeAction", "action": "getWeather", "input": question}))
        .await;
    request_for_agent(&mut agent, "invokeAction").await;
    wait_for_stats(&a, |s| s.remote_requests == 1).await;
    drop(agent);
    let failed = next_for(&mut consumer, "i3").await;
    assert_eq!(failed["status"], "failed", "{failed}");
    wait_for_stats(&b, |s| s.hosted_things == 0).await;
    wait_for_stats(&a, |s| s.remote_requests == 0).await;

    // Nothing came twice or looped back.
    consumer.assert_nothing_pending().await;
    a.stop().await;
    b.stop().await;
}

pub async fn a_request_from_a_consumer_of_one_sidecar_to_an_agent_behind_another_is_one_trace(
    mode: Mode,
) {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PARENT: &str = "00f067aa0ba902b7";
    let _alone = one_at_a_time().await;
    let cluster = NatsCluster::start(3).await;
    let (collector, mut exports) = common::otlp::grpc_collector().await;
    let traced = |name: &str, node: usize| {
        let mut c = bridged_config(&cluster, &[node], name, mode);
        c.tracing.endpoint = format!("http://{collector}");
        c.tracing.service_name = format!("sidecar-{name}");
        c
    };
    let a = linked(TestSidecar::start_with(traced("a", 0)).await).await;
    let b = linked(TestSidecar::start_with(traced("b", 1)).await).await;
    let mut agent = a.ws_agent(WEATHER).await;
    wait_for_stats(&b, |s| s.hosted_things == 1).await;

    let mut consumer = b.ws().await;
    consumer
        .send(
            json!({"thingID": WEATHER, "messageID": "t1", "messageType": "invokeAction",
            "action": "getWeather", "traceparent": format!("00-{TRACE}-{PARENT}-01")}),
        )
        .await;
    let request = request_for_agent(&mut agent, "invokeAction").await;
    let agent_parent = request["traceparent"].as_str().expect("traced").to_owned();
    // The agent continues the trace it was handed, as the draft asks.
    let mut done = lmos(
        WEATHER,
        "actionStatus",
        json!({"action": "getWeather", "status": "completed"}),
    );
    done["correlationID"] = request["correlationID"].clone();
    done["traceparent"] = agent_parent.clone().into();
    agent.send(done).await;
    let completed = consumer.recv().await;
    assert_eq!(completed["correlationID"], "t1", "{completed}");
    let consumer_sees = completed["traceparent"].as_str().unwrap_or_default();
    assert!(consumer_sees.contains(TRACE), "{completed}");

    drop(agent);
    drop(consumer);
    a.stop().await;
    b.stop().await;
    let spans = common::otlp::received(&mut exports).await;
    let hex = common::otlp::hex;
    let find = |service: &str, name: String| {
        spans
            .iter()
            .find(|e| e.service == service && e.span.name == name)
            .map(|e| &e.span)
            .unwrap_or_else(|| {
                let got: Vec<_> = spans.iter().map(|e| (&e.service, &e.span.name)).collect();
                panic!("no span `{name}` from {service} among {got:?}")
            })
    };
    let sent = find(
        "sidecar-b",
        format!("publish lmos/{WEATHER}/agent/requests/invokeAction"),
    );
    let taken = find(
        "sidecar-a",
        format!("process lmos/{WEATHER}/agent/requests/invokeAction"),
    );
    let answered = find("sidecar-a", format!("publish lmos/{WEATHER}/agent/replies"));
    let returned = find("sidecar-b", format!("process lmos/{WEATHER}/agent/replies"));
    for span in [sent, taken, answered, returned] {
        assert_eq!(hex(&span.trace_id), TRACE, "one trace: {}", span.name);
    }
    assert_eq!(
        hex(&sent.parent_span_id),
        PARENT,
        "B continues the consumer's trace"
    );
    assert_eq!(
        taken.parent_span_id, sent.span_id,
        "A continues B's request span"
    );
    assert!(
        agent_parent.contains(&hex(&taken.span_id)),
        "the agent is handed A's span"
    );
    assert_eq!(
        answered.parent_span_id, taken.span_id,
        "the agent's answer, under its request"
    );
    assert_eq!(
        returned.parent_span_id, answered.span_id,
        "B continues A's reply span"
    );
    assert!(
        consumer_sees.contains(&hex(&returned.span_id)),
        "{consumer_sees}"
    );
}

/// How often each number came, per consumer.
pub struct Ticks {
    pub ws: Vec<u32>,
    pub mqtt: Vec<u32>,
}

/// Counts what a WebSocket consumer and an MQTT subscriber get until both
/// have every number below `until`, or `within` has passed.
pub async fn collect_ticks(
    ws: &mut WsClient,
    mqtt: &mut MqttClient,
    ticks: &mut Ticks,
    until: usize,
    within: Duration,
) {
    use futures_util::StreamExt;
    let n = ticks.ws.len() as i64;
    let complete = |v: &[u32]| v[..until].iter().all(|&c| c > 0);
    let deadline = tokio::time::Instant::now() + within;
    while !(complete(&ticks.ws) && complete(&ticks.mqtt)) {
        tokio::select! {
            frame = ws.stream.next() => {
                let Some(Ok(tokio_tungstenite::tungstenite::Message::Text(t))) = frame else {
                    continue;
                };
                let e: Value = serde_json::from_str(&t).unwrap();
                if let Some(i) = e["data"].as_i64().filter(|i| (0..n).contains(i)) {
                    ticks.ws[i as usize] += 1;
                }
            }
            p = mqtt.publishes.recv() => {
                let e: Value = serde_json::from_slice(&p.expect("client alive").payload).unwrap();
                if let Some(i) = e["data"].as_i64().filter(|i| (0..n).contains(i)) {
                    ticks.mqtt[i as usize] += 1;
                }
            }
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
}

pub fn missing(counts: &[u32]) -> Vec<usize> {
    counts
        .iter()
        .enumerate()
        .filter(|(_, &c)| c == 0)
        .map(|(i, _)| i)
        .collect()
}

pub async fn killing_the_node_a_sidecar_uses_loses_no_qos1_message(mode: Mode) {
    const N: i64 = 600;
    let _alone = one_at_a_time().await;
    let mut cluster = NatsCluster::start(3).await;
    let a = bridged(&cluster, 0, "a", mode).await;
    // The node to die leads none of the MQTT streams. When a stream leader
    // dies, NATS 2.9.10 times out storing what other nodes' clients publish
    // meanwhile, drops their connections, and was seen to acknowledge and
    // then lose QoS 1 messages from them: a loss in the cluster, which this
    // test of the sidecar's failover must not measure.
    let streams = ["$MQTT_msgs", "$MQTT_sess"];
    assert!(
        cluster.lead_elsewhere(0, 1, &streams).await,
        "the MQTT streams' leaders did not move off n1"
    );
    // B knows two nodes: when its own dies, it resumes its session on the other.
    let b =
        linked(TestSidecar::start_with(bridged_config(&cluster, &[1, 2], "b", mode)).await).await;
    let thing = "urn:cluster:ticker";

    let mut ws = b.ws().await;
    ws.send(json!({"thingID": thing, "messageID": "s", "messageType": "subscribeEvent", "event": "tick"}))
        .await;
    ws.barrier().await;
    let mut mqtt = b.mqtt("b-ticks").await;
    mqtt.subscribe(&format!("lmos/{thing}/events/tick")).await;
    let mut agent = a.mqtt("a-ticker").await;
    loop {
        agent.publish_event(thing, "tick", json!(-1)).await;
        if let Ok(e) = tokio::time::timeout(Duration::from_millis(500), ws.recv()).await {
            assert_eq!(e["data"], -1);
            break;
        }
    }

    // QoS 1 events at about 100/s; a third of the way through, B's node dies.
    let publisher = tokio::spawn(async move {
        for n in 0..N {
            agent.publish_event(thing, "tick", json!(n)).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        agent
    });
    let mut ticks = Ticks {
        ws: vec![0; N as usize],
        mqtt: vec![0; N as usize],
    };
    let third = N as usize / 3;
    collect_ticks(
        &mut ws,
        &mut mqtt,
        &mut ticks,
        third,
        Duration::from_secs(30),
    )
    .await;
    // Before the kill nothing fails over, yet NATS 2.9.10 was seen to skip
    // one QoS 1 message for one bridge's persistent session now and then
    // (in about one run in ten: the bridge's link received no PUBLISH of
    // it, then or after `ack_wait`, while the other sessions got it). That
    // is the cluster's loss, not the sidecar's: a few such, each lost on
    // both of B's transports alike (so none by B), are told and tolerated.
    // From the kill on, every event must arrive.
    let (ws_early, mqtt_early) = (missing(&ticks.ws[..third]), missing(&ticks.mqtt[..third]));
    assert!(
        ws_early == mqtt_early && ws_early.len() <= 3,
        "lost before the kill: {ws_early:?} {mqtt_early:?}"
    );
    if !ws_early.is_empty() {
        eprintln!("The cluster never delivered {ws_early:?} to sidecar B's session.");
    }
    cluster.kill(1);
    collect_ticks(
        &mut ws,
        &mut mqtt,
        &mut ticks,
        N as usize,
        Duration::from_secs(90),
    )
    .await;
    let _agent = publisher.await.unwrap();
    let duplicates = |v: &[u32]| v.iter().map(|&c| c.saturating_sub(1)).sum::<u32>();
    eprintln!(
        "After the kill: duplicates over WebSocket {}, over MQTT {}.",
        duplicates(&ticks.ws),
        duplicates(&ticks.mqtt)
    );
    let lost = |counts: &[u32]| -> Vec<usize> {
        missing(counts)
            .into_iter()
            .filter(|i| !ws_early.contains(i))
            .collect()
    };
    assert_eq!(lost(&ticks.ws), Vec::<usize>::new(), "lost over WebSocket");
    assert_eq!(lost(&ticks.mqtt), Vec::<usize>::new(), "lost over MQTT");

    // B saw the loss and came back, on the other node.
    let metrics = http(b.http, "GET", "/metrics", None, b"").await.body;
    assert!(
        metrics.contains("lmos_sidecar_cluster_connected 1"),
        "{metrics}"
    );
    let reconnects = metrics
        .lines()
        .find_map(|l| l.strip_prefix("lmos_sidecar_cluster_reconnects_total "))
        .or_else(|| {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix("lmos_sidecar_cluster_reconnects "))
        })
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(reconnects.is_some_and(|r| r >= 1.0), "{metrics}");
    // Ready with the cluster, once B's link has settled: seen once in a
    // full run, /metrics said connected and /readyz a moment later not (the
    // link was dropped once more while the cluster recovered, and came
    // back). What a user sees is that it comes back.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let ready = http(b.http, "GET", "/readyz", None, b"").await.body;
        if ready == "ready\n" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{ready}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.stop().await;
    b.stop().await;
}
