//! The example agent, run in-process against a real sidecar, driven the way
//! the README's quick start does.

use lmos_testkit as common;

use lmos_testkit::weather_agent;

use common::lmos;
use serde_json::json;
use weather_agent::THING_ID;

#[tokio::test]
async fn get_weather_streams_progress_then_the_forecast_and_feedback() {
    let sidecar = weather_agent::start_sidecar().await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(
            THING_ID,
            "subscribeEvent",
            json!({"event": "userFeedbackReceived", "correlationID": "fb"}),
        ))
        .await;
    consumer.barrier().await;
    consumer
        .send(lmos(THING_ID, "invokeAction", json!({"action": "getWeather", "input": {"question": "What is the weather in New York?", "interactionMode": "text"}, "correlationID": "w"})))
        .await;
    let mut seen = Vec::new();
    for _ in 0..5 {
        let s = consumer.recv().await;
        assert_eq!(s["correlationID"], "w", "{s}");
        seen.push(s["status"].as_str().unwrap().to_owned());
        if s["status"] == "completed" {
            assert_eq!(
                s["output"],
                "The weather in New York is sunny with a temperature of 25°C."
            );
        }
    }
    assert_eq!(
        seen,
        ["pending", "running", "running", "running", "completed"]
    );
    let feedback = consumer.recv().await;
    assert_eq!(
        (
            feedback["event"].as_str(),
            feedback["correlationID"].as_str()
        ),
        (Some("userFeedbackReceived"), Some("fb"))
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn model_configuration_is_observed_read_and_written() {
    let sidecar = weather_agent::start_sidecar().await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(
            THING_ID,
            "observeProperty",
            json!({"name": "modelConfiguration", "correlationID": "o"}),
        ))
        .await;
    assert_eq!(consumer.recv().await["value"]["modelName"], "gpt-4o");

    let mut mqtt = sidecar.mqtt("consumer").await;
    mqtt.subscribe(&format!("lmos/{THING_ID}/replies/+")).await;
    let write = lmos(
        THING_ID,
        "writeProperty",
        json!({"name": "modelConfiguration", "data": {"modelName": "o3", "temperature": 0.2}, "correlationID": "wr"}),
    );
    mqtt.publish(
        &format!("lmos/{THING_ID}/requests/writeProperty"),
        &write,
        false,
    )
    .await;
    let (_, confirmed, _) = mqtt.recv_json().await;
    assert_eq!(
        (
            confirmed["messageType"].as_str(),
            confirmed["correlationID"].as_str()
        ),
        (Some("propertyReadings"), Some("wr"))
    );
    let observed = consumer.recv().await;
    assert_eq!(
        (
            observed["value"]["modelName"].as_str(),
            observed["correlationID"].as_str()
        ),
        (Some("o3"), Some("o"))
    );

    consumer
        .send(lmos(
            THING_ID,
            "readProperty",
            json!({"name": "modelConfiguration", "correlationID": "rd"}),
        ))
        .await;
    let read = consumer.recv().await;
    assert_eq!(
        (
            read["value"]["modelName"].as_str(),
            read["correlationID"].as_str()
        ),
        (Some("o3"), Some("rd"))
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn a_running_forecast_can_be_cancelled() {
    let sidecar = weather_agent::start_sidecar().await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(THING_ID, "invokeAction", json!({"action": "getWeather", "input": {"question": "Rain in Paris?", "interactionMode": "text"}, "correlationID": "x"})))
        .await;
    assert_eq!(consumer.recv().await["status"], "pending");
    consumer
        .send(lmos(
            THING_ID,
            "cancelAction",
            json!({"action": "getWeather", "correlationID": "x"}),
        ))
        .await;
    loop {
        let s = consumer.recv().await;
        assert_ne!(s["status"], "completed", "cancelled before it finished");
        if s["status"] == "cancelled" {
            break;
        }
    }
    consumer
        .send(lmos(
            THING_ID,
            "queryAction",
            json!({"action": "getWeather", "correlationID": "x"}),
        ))
        .await;
    assert_eq!(consumer.recv().await["status"], "cancelled");
    sidecar.stop().await;
}

#[tokio::test]
async fn asked_to_stream_get_weather_sends_the_forecast_token_by_token() {
    use lmos_sidecar::lmos::stream::{Ending, Reassembler};
    let sidecar = weather_agent::start_sidecar().await;
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(THING_ID, "invokeAction", json!({"action": "getWeather", "input": {"question": "What is the weather in Oslo?", "interactionMode": "text"}, "stream": true, "correlationID": "ws"})))
        .await;
    let mut r = Reassembler::default();
    let mut tokens = Vec::new();
    let mut last = json!(null);
    while !r.ended() {
        last = consumer.recv().await;
        assert_eq!(last["correlationID"], "ws", "{last}");
        if let Some(token) = r.feed(&last).unwrap() {
            tokens.push(String::from_utf8(token).unwrap());
        }
    }
    let forecast = "The weather in Oslo is sunny with a temperature of 25°C.";
    assert_eq!(tokens.len(), forecast.split(' ').count(), "{tokens:?}");
    assert_eq!(tokens.concat(), forecast);
    assert!(r.gaps.is_empty());
    assert_eq!(r.ending, Some(Ending::Complete));
    assert_eq!(last["output"], forecast, "completed still has it whole");
    sidecar.stop().await;
}
