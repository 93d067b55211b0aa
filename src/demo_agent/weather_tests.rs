use serde_json::{json, Value};

use super::*;

fn request(message_type: &str, members: Value) -> Value {
    let mut m = json!({"thingID": THING_ID, "messageID": "m1", "messageType": message_type, "correlationID": "c1"});
    for (k, v) in members.as_object().unwrap() {
        m[k] = v.clone();
    }
    m
}

fn reply(step: Option<Step>) -> Value {
    match step {
        Some(Step::Reply(m)) => m,
        other => panic!("not a reply: {other:?}"),
    }
}

fn script(step: Option<Step>) -> Script {
    match step {
        Some(Step::Invoke { script, .. }) => script,
        other => panic!("not an invocation: {other:?}"),
    }
}

/// What each message of a script is: its status, its chunk, or the event.
fn kinds(script: &Script) -> Vec<String> {
    script
        .iter()
        .map(|(_, m)| match m["messageType"].as_str().unwrap() {
            "event" => "event".to_owned(),
            _ if m.get("stream").is_some_and(|s| s["end"] != true) => "chunk".to_owned(),
            _ => m["status"].as_str().unwrap().to_owned(),
        })
        .collect()
}

#[test]
fn a_forecast_is_statuses_then_completed_then_the_event() {
    let mut agent = Weather::default();
    let input = json!({"action": "getWeather", "input": {"question": "What is the weather in Berlin?", "interactionMode": "text"}, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"});
    let script = script(agent.handle(&request("invokeAction", input)));
    assert_eq!(
        kinds(&script),
        [
            "pending",
            "running",
            "running",
            "running",
            "completed",
            "event"
        ]
    );
    let delays: Vec<Duration> = script.iter().map(|(d, _)| *d).collect();
    assert_eq!(
        delays,
        [
            Duration::ZERO,
            STEP,
            STEP,
            STEP,
            Duration::ZERO,
            // The feedback a moment after the answer, so that it arrives
            // after it although it travels through the broker.
            STEP
        ]
    );
    let (_, completed) = &script[4];
    assert_eq!(
        completed["output"],
        "The weather in Berlin is sunny with a temperature of 25°C."
    );
    assert_eq!(completed["correlationID"], "c1");
    // Replies continue the request's trace; the event is the agent's own.
    assert_eq!(
        completed["traceparent"],
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    );
    let (_, event) = &script[5];
    assert_eq!(
        event["data"]["comment"],
        "Thanks for the forecast for Berlin."
    );
    assert!(event.get("correlationID").is_none());
}

#[test]
fn a_streamed_forecast_has_a_chunk_a_word_and_the_end_on_completed() {
    let mut agent = Weather::default();
    let input = json!({"action": "getWeather", "stream": true, "input": {"question": "What is the weather in Oslo?"}});
    let script = script(agent.handle(&request("invokeAction", input)));
    let kinds = kinds(&script);
    assert_eq!(kinds.iter().filter(|k| *k == "chunk").count(), 11);
    assert_eq!(kinds[kinds.len() - 2..], ["completed", "event"]);
    let (_, done) = &script[script.len() - 2];
    assert_eq!(done["stream"], json!({"seq": 11, "end": true}));
}

#[test]
fn a_spoken_forecast_streams_a_wav_file_a_word_a_chunk_with_the_text_on_completed() {
    let mut agent = Weather::default();
    let input = json!({"action": "getWeather", "input": {"question": "What is the weather in Oslo?", "interactionMode": "voice"}});
    let script = script(agent.handle(&request("invokeAction", input)));
    let chunks: Vec<&Value> = script
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m.get("stream").is_some_and(|s| s["end"] != true))
        .collect();
    assert_eq!(chunks.len(), 11);
    let mut audio = Vec::new();
    for (seq, chunk) in chunks.iter().enumerate() {
        let stream = &chunk["stream"];
        assert_eq!(stream["seq"], seq);
        assert_eq!(stream["contentType"], "audio/wav");
        assert_eq!(stream["contentEncoding"], "base64");
        let data = stream["data"].as_str().unwrap();
        audio.extend(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data).unwrap(),
        );
    }
    assert!(super::voice::samples_of(&audio).is_some(), "one WAV file");
    let (_, done) = &script[script.len() - 2];
    assert_eq!(
        done["output"],
        "The weather in Oslo is sunny with a temperature of 25°C."
    );
    assert_eq!(done["stream"], json!({"seq": 11, "end": true}));
}

#[test]
fn without_a_city_the_forecast_is_for_yours() {
    assert_eq!(city("Oslo?"), "your city");
    assert_eq!(city("What is the weather in ?"), "your city");
    assert_eq!(city("Weather in Rome?"), "Rome");
}

#[test]
fn a_write_replaces_the_whole_value_and_is_confirmed_with_readings() {
    let mut agent = Weather::default();
    let write = request(
        "writeProperty",
        json!({"name": "modelConfiguration", "data": {"modelName": "o3"}}),
    );
    let confirmed = reply(agent.handle(&write));
    assert_eq!(confirmed["messageType"], "propertyReadings");
    assert_eq!(
        confirmed["data"]["modelConfiguration"],
        json!({"modelName": "o3"})
    );
    let read = reply(agent.handle(&request(
        "readProperty",
        json!({"name": "modelConfiguration"}),
    )));
    assert_eq!(read["value"], json!({"modelName": "o3"}));
    let unknown = request("writeMultipleProperties", json!({"data": {"colour": 1}}));
    assert_eq!(reply(agent.handle(&unknown))["status"], "404");
}

#[test]
fn bad_requests_get_errors_and_failures() {
    let mut agent = Weather::default();
    let other = request("invokeAction", json!({"action": "fly"}));
    assert_eq!(reply(agent.handle(&other))["status"], "404");
    let no_question = request("invokeAction", json!({"action": "getWeather", "input": {}}));
    assert_eq!(reply(agent.handle(&no_question))["status"], "failed");
    let cancel = request("cancelAction", json!({"action": "getWeather"}));
    match agent.handle(&cancel) {
        Some(Step::Cancel {
            key,
            cancelled,
            unknown,
        }) => {
            assert_eq!(key, "c1");
            assert_eq!(cancelled["status"], "cancelled");
            assert_eq!(unknown["status"], "404");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(agent.handle(&request("event", json!({}))), None);
}
