//! Streams across sidecars (issue 48 item 4): the WeatherAgent's Thing on
//! sidecar A, a consumer on sidecar B, linked in NATS's own protocol over a
//! real 3-node cluster. A streamed answer crosses in order with nothing
//! lost, to the WebSocket consumer and to an MQTT follower of the status
//! topic, and stream credit holds across: B's consumer gets what it grants,
//! and its grants reach the agent behind A. Binary chunks cross too, as
//! binary frames to B's consumer and raw on B's stream topic.

use lmos_testkit as common;
use lmos_testkit::cluster_scenarios::{
    bridged, one_at_a_time, register_weather, request_for_agent, Mode, WEATHER,
};
use lmos_testkit::nats::NatsCluster;

use common::*;
use lmos_sidecar::lmos::stream::{Chunk, Ending, Reassembler};
use serde_json::{json, Value};

fn status(request: &Value, status: &str, chunk: Option<Chunk>) -> Value {
    let mut m = lmos(
        WEATHER,
        "actionStatus",
        json!({"action": "getWeather", "status": status}),
    );
    m["correlationID"] = request["correlationID"].clone();
    if let Some(c) = chunk {
        m["stream"] = c.to_value();
    }
    m
}

fn token(i: u64) -> String {
    format!("tok{i} ")
}

/// Sidecar A with the agent, sidecar B with a WebSocket consumer and an
/// MQTT follower of the invocation's status topic, and the invocation as
/// the agent got it.
struct Across {
    a: TestSidecar,
    b: TestSidecar,
    agent: WsClient,
    follower: MqttClient,
    consumer: WsClient,
    request: Value,
}

/// B's consumer invokes `getWeather` as `correlation` with `stream`.
async fn invoked_across(cluster: &NatsCluster, correlation: &str, stream: Value) -> Across {
    let a = bridged(cluster, 0, "a", Mode::Nats).await;
    let b = bridged(cluster, 1, "b", Mode::Nats).await;
    let mut agent = register_weather(&a).await;
    wait_for_td(&b, WEATHER).await;
    wait_for_stats(&b, |s| s.hosted_things == 1).await;
    let topic = format!("lmos/{WEATHER}/actions/getWeather/status/{correlation}");
    let mut follower = b.mqtt(&format!("b-follower-{correlation}")).await;
    follower.subscribe(&topic).await;
    let mut consumer = b.ws().await;
    consumer
        .send(lmos(
            WEATHER,
            "invokeAction",
            json!({"action": "getWeather", "input": {"question": "What is the weather in Oslo?", "interactionMode": "text"}, "stream": stream, "correlationID": correlation}),
        ))
        .await;
    let request = request_for_agent(&mut agent, "invokeAction").await;
    Across {
        a,
        b,
        agent,
        follower,
        consumer,
        request,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_crosses_sidecars_in_order_with_its_credit() {
    let _alone = one_at_a_time().await;
    let cluster = NatsCluster::start(3).await;
    let Across {
        a,
        b,
        mut agent,
        mut follower,
        mut consumer,
        request,
    } = invoked_across(&cluster, "st", json!({"credit": 10})).await;
    let topic = format!("lmos/{WEATHER}/actions/getWeather/status/st");
    assert_eq!(request["stream"]["credit"], 10, "the credit crosses");

    agent.send(status(&request, "pending", None)).await;
    for i in 0..30 {
        agent
            .send(status(&request, "running", Some(Chunk::text(i, token(i)))))
            .await;
    }
    let mut read = Reassembler::default();
    while read.chunks < 10 {
        let m = consumer.recv().await;
        assert_eq!(m["correlationID"], "st", "{m}");
        read.feed(&m).unwrap();
    }
    // The follower of B's status topic is not paced: it has all 30 once
    // they crossed, and B's consumer still no more than its 10.
    let mut followed = Reassembler::default();
    while followed.chunks < 30 {
        let (t, m, _) = follower.recv_json().await;
        assert_eq!(t, topic);
        followed.feed(&m).unwrap();
    }
    consumer.assert_nothing_pending().await;

    consumer
        .send(lmos(
            WEATHER,
            "actionInput",
            json!({"action": "getWeather", "correlationID": "st", "credit": 25}),
        ))
        .await;
    let grant = request_for_agent(&mut agent, "actionInput").await;
    assert_eq!(grant["credit"], 25, "the grant reaches the agent behind A");
    assert_eq!(grant["correlationID"], request["correlationID"]);
    for i in 30..35 {
        agent
            .send(status(&request, "running", Some(Chunk::text(i, token(i)))))
            .await;
    }
    agent
        .send(status(&request, "completed", Some(Chunk::end(35))))
        .await;
    while !read.ended() {
        let m = consumer.recv().await;
        assert_eq!(m["correlationID"], "st", "{m}");
        read.feed(&m).unwrap();
    }
    let expected: String = (0..35).map(token).collect();
    assert_eq!(read.payload, expected.as_bytes());
    assert!(read.gaps.is_empty(), "{:?}", read.gaps);
    assert_eq!(read.ending, Some(Ending::Complete));
    while !followed.ended() {
        let (_, m, _) = follower.recv_json().await;
        followed.feed(&m).unwrap();
    }
    assert_eq!(followed.payload, expected.as_bytes());
    assert!(followed.gaps.is_empty());
    b.stop().await;
    a.stop().await;
}

/// A flood of chunks across, without credit: every chunk reaches B's
/// consumer and follower, in order, the end last. Each answer crosses as a
/// NATS request of its own, repeated until acknowledged, so under a flood
/// a repeated chunk arrives after later ones; B hands them on in their
/// numbers' order (before, the streaming bench lost 3 to 5 % of 20 000
/// chunks this way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_chunks_crosses_in_order_with_nothing_lost() {
    const N: u64 = 5_000;
    let _alone = one_at_a_time().await;
    let cluster = NatsCluster::start(3).await;
    let Across {
        a,
        b,
        mut agent,
        mut follower,
        mut consumer,
        request,
    } = invoked_across(&cluster, "flood", json!(true)).await;
    for i in 0..N {
        agent
            .send(status(&request, "running", Some(Chunk::text(i, token(i)))))
            .await;
    }
    agent
        .send(status(&request, "completed", Some(Chunk::end(N))))
        .await;
    let expected: String = (0..N).map(token).collect();
    let mut read = Reassembler::default();
    while !read.ended() {
        read.feed(&consumer.recv().await).unwrap();
    }
    let mut followed = Reassembler::default();
    while !followed.ended() {
        let (_, m, _) = follower.recv_json().await;
        followed.feed(&m).unwrap();
    }
    for r in [read, followed] {
        assert!(r.gaps.is_empty(), "{:?}", r.gaps);
        assert_eq!(r.chunks, N);
        assert_eq!(r.payload, expected.as_bytes());
        assert_eq!(r.ending, Some(Ending::Complete));
    }
    b.stop().await;
    a.stop().await;
}

/// Audio across: the agent behind A sends binary frames, B's consumer
/// asked for binary frames and gets them, in order, with the bytes as
/// sent; an MQTT follower on B of the raw stream topic gets the same bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_chunks_cross_as_binary_frames_and_raw_mqtt() {
    use lmos_sidecar::lmos::binary;
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    const N: u64 = 200;
    let _alone = one_at_a_time().await;
    let cluster = NatsCluster::start(3).await;
    let Across {
        a,
        b,
        mut agent,
        follower: _,
        mut consumer,
        request,
    } = invoked_across(&cluster, "audio", json!({"binary": true})).await;
    let mut raw = b.mqtt("b-raw").await;
    raw.subscribe(&format!("lmos/{WEATHER}/actions/getWeather/stream/audio"))
        .await;
    let bytes = |i: u64| -> Vec<u8> { (0..480u64).map(|b| (b * 5 + i) as u8).collect() };
    for i in 0..N {
        let mut header = status(&request, "running", None);
        header["stream"] = json!({"seq": i, "contentType": "audio/L16;rate=8000"});
        let frame = binary::frame(&header, &bytes(i));
        agent.send_raw(WsMessage::Binary(frame.into())).await;
    }
    agent
        .send(status(&request, "completed", Some(Chunk::end(N))))
        .await;
    let expected: Vec<u8> = (0..N).flat_map(bytes).collect();
    let mut heard = Vec::new();
    let mut seq = 0;
    loop {
        match consumer.recv_frame().await {
            WsMessage::Binary(frame) => {
                let (header, payload) = binary::split(&frame).unwrap();
                assert_eq!(header["stream"]["seq"], seq, "{header}");
                assert_eq!(header["correlationID"], "audio");
                heard.extend_from_slice(payload);
                seq += 1;
            }
            WsMessage::Text(t) if t.contains("\"completed\"") => break,
            WsMessage::Text(_) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seq, N);
    assert_eq!(heard, expected);
    let mut followed = Vec::new();
    loop {
        let p = raw.recv().await;
        if p.payload.is_empty() {
            break;
        }
        followed.extend_from_slice(&p.payload);
    }
    assert_eq!(followed, expected);
    b.stop().await;
    a.stop().await;
}
