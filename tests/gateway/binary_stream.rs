//! Binary stream chunks (issue 48 item 3) with real clients: the
//! WeatherAgent speaks its forecast (`interactionMode: "voice"`) as WAV
//! audio in binary frames; a WebSocket consumer that asked gets binary
//! frames, one that did not the JSON form, MQTT followers the raw bytes
//! (with MQTT 5 properties) or the JSON status messages. See
//! docs/requests.md, "Binary chunks".

use lmos_testkit as common;

use common::weather_agent::{self, THING_ID};
use common::{lmos, mqtt5_client, mqtt5_next_publish, TestSidecar, WsClient};
use lmos_sidecar::demo_agent::voice;
use lmos_sidecar::lmos::binary;
use lmos_sidecar::lmos::stream::{Chunk, Ending, Reassembler};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message as WsMessage;

const FORECAST: &str = "The weather in Oslo is sunny with a temperature of 25°C.";
const WORDS: u64 = 11;

fn ask_voice(correlation: &str, stream: Value) -> Value {
    lmos(
        THING_ID,
        "invokeAction",
        json!({"action": "getWeather", "input": {"question": "What is the weather in Oslo?", "interactionMode": "voice"},
               "stream": stream, "correlationID": correlation}),
    )
}

/// Reads one spoken invocation from a consumer that asked for binary
/// frames: its statuses as text, its audio as binary frames.
async fn read_binary(consumer: &mut WsClient, correlation: &str) -> (Vec<u8>, Value) {
    let mut audio = Vec::new();
    let mut seq = 0;
    loop {
        match consumer.recv_frame().await {
            WsMessage::Binary(frame) => {
                let (header, payload) = binary::split(&frame).expect("the documented framing");
                assert_eq!(header["correlationID"], correlation, "{header}");
                assert_eq!(header["messageType"], "actionStatus");
                assert_eq!(header["status"], "running");
                assert_eq!(
                    header["stream"],
                    json!({"seq": seq, "contentType": "audio/wav"}),
                    "its place in the stream, no data in the header"
                );
                audio.extend_from_slice(payload);
                seq += 1;
            }
            WsMessage::Text(text) => {
                let m: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(m["correlationID"], correlation, "{m}");
                assert!(
                    m["stream"].is_null() || m["stream"]["end"] == true,
                    "no chunk as text: {m}"
                );
                if m["status"] == "completed" {
                    assert_eq!(seq, WORDS, "every word before the end");
                    return (audio, m);
                }
            }
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_spoken_forecast_streams_as_binary_frames_over_websocket_and_raw_over_mqtt() {
    let sidecar = weather_agent::start_sidecar().await;
    let raw_topic = format!("lmos/{THING_ID}/actions/getWeather/stream/v");
    let (_raw5, mut raw5) = mqtt5_client(sidecar.mqtt5, "raw5", &raw_topic).await;
    let mut raw4 = sidecar.mqtt("raw4").await;
    raw4.subscribe(&raw_topic).await;
    let mut statuses = sidecar.mqtt("statuses").await;
    let status_topic = format!("lmos/{THING_ID}/actions/getWeather/status/v");
    statuses.subscribe(&status_topic).await;

    let mut consumer = sidecar.ws().await;
    consumer.send(ask_voice("v", json!({"binary": true}))).await;
    let (audio, done) = read_binary(&mut consumer, "v").await;
    assert_eq!(
        done["output"], FORECAST,
        "the transcript for who reads no audio"
    );
    assert_eq!(done["stream"], json!({"seq": WORDS, "end": true}));
    let samples = voice::samples_of(&audio).expect("the chunks make one WAV file");
    assert!(samples > 0);

    // MQTT 5: the raw bytes, Content Type and `seq` as properties, then the
    // end marker with no bytes.
    let mut heard = Vec::new();
    for seq in 0..=WORDS {
        let p = mqtt5_next_publish(&mut raw5).await;
        let props = p.properties.expect("MQTT 5 properties");
        let user: Vec<(String, String)> = props.user_properties.clone();
        assert!(user.contains(&("seq".into(), seq.to_string())), "{user:?}");
        if seq < WORDS {
            assert_eq!(props.content_type.as_deref(), Some("audio/wav"));
            heard.extend_from_slice(&p.payload);
        } else {
            assert!(p.payload.is_empty());
            assert!(user.contains(&("end".into(), "true".into())), "{user:?}");
        }
    }
    assert_eq!(heard, audio, "the same bytes as the WebSocket consumer's");

    // MQTT 3.1.1: the same bytes, without properties.
    let mut heard = Vec::new();
    for _ in 0..=WORDS {
        heard.extend_from_slice(&raw4.recv().await.payload);
    }
    assert_eq!(heard, audio);

    // The status topic keeps the JSON form, in order with the statuses.
    let mut r = Reassembler::default();
    while !r.ended() {
        let (_, m, _) = statuses.recv_json().await;
        r.feed(&m).unwrap();
    }
    assert_eq!((r.chunks, &r.payload, r.gaps.len()), (WORDS, &audio, 0));
    assert_eq!(r.ending, Some(Ending::Complete));
    sidecar.stop().await;
}

#[tokio::test]
async fn a_consumer_that_did_not_ask_for_binary_frames_gets_the_json_form() {
    let sidecar = weather_agent::start_sidecar().await;
    let mut consumer = sidecar.ws().await;
    consumer.send(ask_voice("j", json!(true))).await;
    let mut r = Reassembler::default();
    while !r.ended() {
        let m = consumer.recv().await;
        assert_eq!(m["correlationID"], "j");
        if m["stream"]["data"].is_string() {
            assert_eq!(m["stream"]["contentEncoding"], "base64");
            assert_eq!(m["stream"]["contentType"], "audio/wav");
        }
        r.feed(&m).unwrap();
    }
    assert_eq!(r.chunks, WORDS);
    assert!(voice::samples_of(&r.payload).is_some());
    sidecar.stop().await;
}

#[tokio::test]
async fn input_chunks_arrive_as_binary_frames_and_a_bad_frame_gets_an_error() {
    const THING: &str = "urn:binary:listener";
    let sidecar = TestSidecar::start().await;
    let mut agent = sidecar.ws_agent(THING).await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(
            THING,
            "invokeAction",
            json!({"action": "listen", "stream": true, "correlationID": "in"}),
        ))
        .await;
    let request = agent.recv().await;
    let bytes = |i: u64| -> Vec<u8> { (0..320u64).map(|b| (b * 3 + i) as u8).collect() };
    for i in 0..20 {
        let header = lmos(
            THING,
            "actionInput",
            json!({"action": "listen", "correlationID": "in", "stream": {"seq": i, "contentType": "audio/L16;rate=16000"}}),
        );
        let frame = binary::frame(&header, &bytes(i));
        consumer.send_raw(WsMessage::Binary(frame.into())).await;
    }
    consumer
        .send(lmos(
            THING,
            "actionInput",
            json!({"action": "listen", "correlationID": "in", "stream": Chunk::end(20).to_value()}),
        ))
        .await;
    let mut heard = Reassembler::default();
    while !heard.ended() {
        let m = agent.recv().await;
        assert_eq!(m["messageType"], "actionInput", "{m}");
        assert_eq!(m["correlationID"], request["correlationID"], "the route");
        heard.feed(&m).unwrap();
    }
    assert_eq!(heard.payload, (0..20).flat_map(bytes).collect::<Vec<u8>>());

    // A frame without the framing: a clear error, and the connection goes on.
    for bad in [
        vec![1u8, 2],
        binary::frame(&json!({"messageType": "actionInput"}), b"x"),
    ] {
        consumer.send_raw(WsMessage::Binary(bad.into())).await;
        let e = consumer.recv().await;
        assert_eq!(
            (e["messageType"].as_str(), e["status"].as_str()),
            (Some("error"), Some("400")),
            "{e}"
        );
        assert!(e["type"].as_str().unwrap().ends_with("binary-frame"), "{e}");
        assert!(
            e["detail"]
                .as_str()
                .unwrap()
                .contains("4-byte big-endian header length"),
            "{e}"
        );
    }
    consumer
        .send(lmos(
            THING,
            "queryAction",
            json!({"action": "listen", "correlationID": "in"}),
        ))
        .await;
    let answer = consumer.recv().await;
    assert_eq!(answer["correlationID"], "in", "{answer}");
    sidecar.stop().await;
}
