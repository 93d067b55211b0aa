//! Streamed output (Response-Stream) and input (Request-Stream) with real
//! clients: see docs/requests.md, "Streams".

use lmos_testkit as common;

use common::{lmos, wait_for_stats, MqttClient, Parties, TestSidecar, WsClient};
use lmos_sidecar::lmos::stream::{Chunk, Ending, Reassembler};
use serde_json::{json, Value};

const THING: &str = "urn:uuid:5e1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";
const CHUNKS: u64 = 200;

fn token(i: u64) -> String {
    format!("tok{i} ")
}

fn status(request: &Value, status: &str, chunk: Option<Chunk>) -> Value {
    let mut m = lmos(
        THING,
        "actionStatus",
        json!({"action": request["action"], "status": status}),
    );
    m["correlationID"] = request["correlationID"].clone();
    if let Some(c) = chunk {
        m["stream"] = c.to_value();
    }
    m
}

/// Reads the messages of one invocation until it ends.
async fn read_ws(consumer: &mut WsClient, correlation: &str) -> Reassembler {
    let mut r = Reassembler::default();
    while !r.ended() {
        let m = consumer.recv().await;
        assert_eq!(m["correlationID"], correlation, "{m}");
        r.feed(&m).unwrap();
    }
    r
}

async fn read_mqtt(follower: &mut MqttClient, topic: &str) -> Reassembler {
    let mut r = Reassembler::default();
    while !r.ended() {
        let (t, m, _) = follower.recv_json().await;
        assert_eq!(t, topic);
        r.feed(&m).unwrap();
    }
    r
}

fn expected_text(n: u64) -> Vec<u8> {
    (0..n).map(token).collect::<String>().into_bytes()
}

#[tokio::test]
async fn a_streamed_answer_arrives_in_order_over_websocket_and_mqtt() {
    let sidecar = TestSidecar::start().await;
    let topic = format!("lmos/{THING}/actions/speak/status/s-1");
    let Parties {
        mut agent,
        mut consumer,
        mut follower,
    } = sidecar.invocation_parties(THING, &topic).await;

    consumer
        .send(lmos(
            THING,
            "invokeAction",
            json!({"action": "speak", "input": "hi", "stream": true, "correlationID": "s-1"}),
        ))
        .await;
    let request = agent.recv().await;
    assert_eq!(request["stream"], true, "the wish reaches the agent");
    agent.send(status(&request, "pending", None)).await;
    for i in 0..CHUNKS {
        agent
            .send(status(&request, "running", Some(Chunk::text(i, token(i)))))
            .await;
    }
    agent
        .send(status(&request, "completed", Some(Chunk::end(CHUNKS))))
        .await;

    for r in [
        read_ws(&mut consumer, "s-1").await,
        read_mqtt(&mut follower, &topic).await,
    ] {
        assert_eq!(r.chunks, CHUNKS);
        assert!(r.gaps.is_empty(), "{:?}", r.gaps);
        assert_eq!(r.payload, expected_text(CHUNKS));
        assert_eq!(r.ending, Some(Ending::Complete));
    }
    wait_for_stats(&sidecar, |s| s.pending_requests == 0).await;
    sidecar.stop().await;
}

#[tokio::test]
async fn an_error_mid_stream_ends_it_for_every_follower() {
    let sidecar = TestSidecar::start().await;
    let topic = format!("lmos/{THING}/actions/speak/status/s-2");
    let Parties {
        mut agent,
        mut consumer,
        mut follower,
    } = sidecar.invocation_parties(THING, &topic).await;
    consumer
        .send(lmos(
            THING,
            "invokeAction",
            json!({"action": "speak", "stream": true, "correlationID": "s-2"}),
        ))
        .await;
    let request = agent.recv().await;
    for i in 0..20 {
        agent
            .send(status(&request, "running", Some(Chunk::text(i, token(i)))))
            .await;
    }
    let mut failed = status(&request, "failed", None);
    failed["output"] = json!({"error": "the model crashed"});
    agent.send(failed).await;

    for r in [
        read_ws(&mut consumer, "s-2").await,
        read_mqtt(&mut follower, &topic).await,
    ] {
        assert_eq!(r.payload, expected_text(20));
        match &r.ending {
            Some(Ending::Broken(m)) => assert_eq!(m["output"]["error"], "the model crashed"),
            other => panic!("{other:?}"),
        }
    }
    // The invocation is over: a late chunk reaches nobody.
    agent
        .send(status(&request, "running", Some(Chunk::text(20, "late"))))
        .await;
    consumer.assert_nothing_pending().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn an_mqtt_agent_streams_binary_audio_frames_to_a_websocket_consumer() {
    let sidecar = TestSidecar::start().await;
    let mut agent = common::mqtt_agent(sidecar.mqtt, "mqtt-agent", THING, None).await;
    wait_for_stats(&sidecar, |s| s.hosted_things == 1).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(
            THING,
            "invokeAction",
            json!({"action": "say", "stream": true, "correlationID": "s-3"}),
        ))
        .await;
    let (_, request, _) = agent.recv_json().await;
    let frame = |i: u64| -> Vec<u8> { (0..160).map(|b| (b as u64 * 7 + i) as u8).collect() };
    let replies = format!("lmos/{THING}/agent/replies");
    for i in 0..50 {
        let chunk = Chunk::binary(i, "audio/L16;rate=8000", &frame(i));
        agent
            .publish(&replies, &status(&request, "running", Some(chunk)), false)
            .await;
    }
    agent
        .publish(
            &replies,
            &status(&request, "completed", Some(Chunk::end(50))),
            false,
        )
        .await;
    let r = read_ws(&mut consumer, "s-3").await;
    assert_eq!(r.chunks, 50);
    assert!(r.gaps.is_empty());
    assert_eq!(r.payload, (0..50).flat_map(frame).collect::<Vec<u8>>());
    assert_eq!(r.ending, Some(Ending::Complete));
    sidecar.stop().await;
}

#[tokio::test]
async fn an_input_stream_reaches_the_agent_in_order_and_its_answer_streams_back() {
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.ws_agent(THING).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(
            THING,
            "invokeAction",
            json!({"action": "listen", "stream": true, "correlationID": "v-1"}),
        ))
        .await;
    let request = agent.recv().await;
    let frame = |i: u64| -> Vec<u8> { (0..320).map(|b| (b as u64 + i) as u8).collect() };
    let input = |chunk: Chunk| {
        lmos(
            THING,
            "actionInput",
            json!({"action": "listen", "correlationID": "v-1", "stream": chunk.to_value()}),
        )
    };
    for i in 0..100 {
        consumer
            .send(input(Chunk::binary(i, "audio/L16;rate=16000", &frame(i))))
            .await;
    }
    // Out of order: refused, correlated, not forwarded.
    consumer
        .send(input(Chunk::binary(150, "audio/L16;rate=16000", &frame(0))))
        .await;
    consumer.send(input(Chunk::end(100))).await;

    let mut heard = Reassembler::default();
    while !heard.ended() {
        let m = agent.recv().await;
        assert_eq!(m["messageType"], "actionInput", "{m}");
        assert_eq!(m["correlationID"], request["correlationID"], "the route");
        heard.feed(&m).unwrap();
    }
    assert_eq!(heard.chunks, 100);
    assert!(heard.gaps.is_empty());
    assert_eq!(heard.payload, (0..100).flat_map(frame).collect::<Vec<u8>>());

    let refused = consumer.recv().await;
    assert_eq!(
        (
            refused["messageType"].as_str(),
            refused["status"].as_str(),
            refused["correlationID"].as_str()
        ),
        (Some("error"), Some("400"), Some("v-1")),
        "{refused}"
    );
    assert!(refused["detail"]
        .as_str()
        .unwrap()
        .contains("next one is 100"));

    // The agent answers in a stream of its own, then the invocation is over.
    agent
        .send(status(
            &request,
            "running",
            Some(Chunk::text(0, "heard you")),
        ))
        .await;
    agent
        .send(status(&request, "completed", Some(Chunk::end(1))))
        .await;
    let answer = read_ws(&mut consumer, "v-1").await;
    assert_eq!(answer.payload, b"heard you");
    consumer.send(input(Chunk::end(101))).await;
    let late = consumer.recv().await;
    assert_eq!(
        (late["status"].as_str(), late["correlationID"].as_str()),
        (Some("404"), Some("v-1"))
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn an_mqtt_agent_gets_input_on_its_request_topic() {
    let sidecar = TestSidecar::start().await;
    let mut agent = common::mqtt_agent(sidecar.mqtt, "mqtt-agent", THING, None).await;
    wait_for_stats(&sidecar, |s| s.hosted_things == 1).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(
            THING,
            "invokeAction",
            json!({"action": "listen", "correlationID": "v-2"}),
        ))
        .await;
    let (_, request, _) = agent.recv_json().await;
    for i in 0..20 {
        consumer
            .send(lmos(
                THING,
                "actionInput",
                json!({"action": "listen", "correlationID": "v-2", "stream": Chunk::text(i, token(i)).to_value()}),
            ))
            .await;
    }
    let mut heard = Reassembler::default();
    for _ in 0..20 {
        let (topic, m, _) = agent.recv_json().await;
        assert_eq!(topic, format!("lmos/{THING}/agent/requests/actionInput"));
        assert_eq!(m["correlationID"], request["correlationID"]);
        heard.feed(&m).unwrap();
    }
    assert_eq!(heard.payload, expected_text(20));
    assert!(heard.gaps.is_empty());
    sidecar.stop().await;
}

/// Stream credit (`"stream": {"credit": N}`): the consumer gets N chunks,
/// then nothing until it grants more (`actionInput` with `credit`), while
/// the MQTT follower of the status topic gets the whole stream at once;
/// granted again, it reads the rest in order, the end included.
#[tokio::test]
async fn a_consumer_granting_ten_chunks_gets_ten_until_it_grants_more() {
    let sidecar = TestSidecar::start().await;
    let topic = format!("lmos/{THING}/actions/speak/status/s-credit");
    let Parties {
        mut agent,
        mut consumer,
        mut follower,
    } = sidecar.invocation_parties(THING, &topic).await;
    consumer
        .send(lmos(
            THING,
            "invokeAction",
            json!({"action": "speak", "stream": {"credit": 10}, "correlationID": "s-credit"}),
        ))
        .await;
    let request = agent.recv().await;
    assert_eq!(
        request["stream"]["credit"], 10,
        "the agent learns the credit"
    );
    agent.send(status(&request, "pending", None)).await;
    for i in 0..25 {
        agent
            .send(status(&request, "running", Some(Chunk::text(i, token(i)))))
            .await;
    }
    agent
        .send(status(&request, "completed", Some(Chunk::end(25))))
        .await;
    // Everything has passed the sidecar once the follower has it all.
    let followed = read_mqtt(&mut follower, &topic).await;
    assert_eq!(followed.payload, expected_text(25));

    let mut read = Reassembler::default();
    let mut chunks = 0;
    while chunks < 10 {
        let m = consumer.recv().await;
        assert_eq!(m["correlationID"], "s-credit", "{m}");
        read.feed(&m).unwrap();
        chunks += u64::from(m.get("stream").is_some());
    }
    consumer.assert_nothing_pending().await;

    let grant = |n: u64| {
        lmos(
            THING,
            "actionInput",
            json!({"action": "speak", "correlationID": "s-credit", "credit": n}),
        )
    };
    consumer.send(grant(10)).await;
    for _ in 0..10 {
        read.feed(&consumer.recv().await).unwrap();
    }
    assert_eq!(read.chunks, 20);
    consumer.assert_nothing_pending().await;
    consumer.send(grant(100)).await;
    while !read.ended() {
        read.feed(&consumer.recv().await).unwrap();
    }
    assert_eq!(read.payload, expected_text(25));
    assert!(read.gaps.is_empty(), "{:?}", read.gaps);
    assert_eq!(read.ending, Some(Ending::Complete));
    sidecar.stop().await;
}
