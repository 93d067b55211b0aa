//! The `a2a-sdk` fixture agent imported as `travel`: its TD (skills as
//! actions), its presence, and its skills from a WebSocket consumer (a
//! streamed forecast, a failure, input-required, a cancelled task), an
//! MQTT 5 client and the HTTP binding.

use std::time::Duration;

use lmos_sidecar::directory::TdValidator;
use lmos_sidecar::lmos::stream::Chunk;
use lmos_testkit::upstreams::{self, Fixture};
use lmos_testkit::{lmos, TestSidecar};
use serde_json::{json, Value};

use super::*;

/// The forecast the fixture streams.
pub const FORECAST: &str = "The weather in Oslo is sunny.";

/// A sidecar importing the fixture agent as `travel`, and the agent.
pub async fn travel() -> (TestSidecar, Fixture) {
    let agent = Fixture::python(A2A_PY, &[]).await;
    let import = upstreams::a2a("travel", &agent.url(CARD));
    (start(vec![], vec![import]).await, agent)
}

/// What a consumer sends a skill: text whose first word names it (the
/// fixture also reads the skill from the message's metadata).
fn ask(skill: &str) -> Value {
    json!(format!("{skill} Oslo"))
}

#[tokio::test]
async fn the_a2a_agent_is_a_thing_whose_skills_are_actions_on_every_transport() {
    let (sidecar, _agent) = travel().await;
    let td = connected(sidecar.http, TRAVEL).await;
    if let Err(e) = TdValidator::new().check(&td) {
        panic!("{e}: {td:#}");
    }
    let types = td["@type"].clone();
    assert!(
        types == "lmos:Agent"
            || types
                .as_array()
                .is_some_and(|t| t.contains(&json!("lmos:Agent"))),
        "{td:#}"
    );
    for skill in ["forecast", "fail", "ask", "slow"] {
        assert!(td["actions"][skill].is_object(), "{skill}: {td:#}");
    }
    assert_eq!(
        td["actions"]["forecast"]["description"], "Tells the weather, streamed.",
        "{td:#}"
    );
    let online = Presence::of(sidecar.mqtt, TRAVEL)
        .await
        .until("online", UP)
        .await;
    assert_eq!(
        online,
        json!({"thingID": TRAVEL, "status": "online", "transport": "a2a"})
    );

    let mut ws = sidecar.ws().await;
    streamed_forecast(&mut ws).await;
    let got = invoke(&mut ws, TRAVEL, "fail", ask("fail"), json!({})).await;
    let failed = last(&got);
    assert_eq!(failed["status"], "failed", "{got:#?}");
    assert!(
        failed["output"]
            .to_string()
            .contains("the agent failed on purpose"),
        "{got:#?}"
    );
    let got = invoke(&mut ws, TRAVEL, "ask", ask("ask"), json!({})).await;
    let asked = last(&got);
    assert_eq!(asked["status"], "completed", "{got:#?}");
    assert_eq!(asked["output"]["state"], "input-required", "{got:#?}");
    assert!(
        asked["output"].to_string().contains("Which city?"),
        "{got:#?}"
    );
    cancelled_slow(&mut ws).await;

    let reply = mqtt5_invoke(&sidecar, TRAVEL, "forecast", ask("forecast")).await;
    assert_eq!(reply["status"], "completed", "{reply}");
    assert_eq!(reply["output"], FORECAST, "{reply}");
    let output = http_invoke(&sidecar, TRAVEL, "forecast", ask("forecast")).await;
    assert_eq!(output, FORECAST);
    sidecar.stop().await;
}

/// `forecast` with `"stream": true`: progress, then the artifact's chunks
/// as the status's `stream` (seq 0, 1, 2), then the whole text.
async fn streamed_forecast(ws: &mut WsClient) {
    let got = invoke(
        ws,
        TRAVEL,
        "forecast",
        ask("forecast"),
        json!({"stream": true}),
    )
    .await;
    let progress: Vec<&Value> = running(&got)
        .into_iter()
        .filter(|m| m.get("stream").is_none())
        .collect();
    assert!(
        progress
            .iter()
            .any(|m| m["output"].to_string().contains("step 1")),
        "{got:#?}"
    );
    let chunks: Vec<Chunk> = got
        .iter()
        .filter_map(|m| m.get("stream"))
        .map(|c| Chunk::from_value(c).unwrap_or_else(|e| panic!("{e}: {c}")))
        .filter(|c| c.data.is_some())
        .collect();
    let seqs: Vec<u64> = chunks.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, [0, 1, 2], "{got:#?}");
    let texts: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c.data.as_ref()?.as_str())
        .collect();
    assert_eq!(texts, ["The weather ", "in Oslo ", "is sunny."], "{got:#?}");
    let done = last(&got);
    assert_eq!(done["status"], "completed", "{got:#?}");
    assert_eq!(done["output"], FORECAST, "{got:#?}");
}

/// `slow` cancelled after its first progress: the task is cancelled.
async fn cancelled_slow(ws: &mut WsClient) {
    let correlation = uuid::Uuid::new_v4().to_string();
    ws.send(lmos(
        TRAVEL,
        "invokeAction",
        json!({"action": "slow", "input": ask("slow"), "correlationID": correlation}),
    ))
    .await;
    loop {
        let m = ws.recv().await;
        assert!(!is_final(&m), "ended before it was cancelled: {m}");
        if m["status"] == "running" {
            break;
        }
    }
    ws.send(lmos(
        TRAVEL,
        "cancelAction",
        json!({"action": "slow", "correlationID": correlation}),
    ))
    .await;
    let started = tokio::time::Instant::now();
    let got = answers(ws, &correlation).await;
    assert_eq!(last(&got)["status"], "cancelled", "{got:#?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "cancelled in {:?}",
        started.elapsed()
    );
}
