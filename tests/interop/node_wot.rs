//! node-wot 0.8.16 (npm `@node-wot/core`, `binding-mqtt`, `binding-http`),
//! a W3C WoT consumer nobody here wrote, consumes the example agent through
//! a real sidecar using only the TD the sidecar serves: it subscribes the
//! event and observes the property over the MQTT forms, reads and writes the
//! property and invokes the action over the HTTP forms
//! (`tests/node-wot/consume.js`). Its values must equal what the agent sent,
//! as an LMOS consumer on the WebSocket sees it.
//!
//! Needs Node.js and the packages in `tests/node-wot` (`npm ci --prefix
//! tests/node-wot`; `.ci/run` does both): the test fails, it does not skip,
//! when they are missing.

use lmos_testkit as common;

use lmos_testkit::weather_agent;

use std::path::PathBuf;
use std::time::Duration;

use common::{lmos, urlencode, WsClient};
use serde_json::{json, Value};
use weather_agent::THING_ID;

fn node_wot_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node-wot");
    assert!(
        dir.join("node_modules/@node-wot/core").is_dir(),
        "node-wot is not installed: run `npm ci --prefix tests/node-wot` (Node.js 18 or later; .ci/run does this)"
    );
    dir
}

/// The next message on `ws` that passes `pick`.
async fn next_matching(ws: &mut WsClient, pick: impl Fn(&Value) -> bool) -> Value {
    loop {
        let m = ws.recv().await;
        if pick(&m) {
            return m;
        }
    }
}

#[tokio::test]
async fn node_wot_follows_the_served_forms_and_sees_what_the_agent_sent() {
    let dir = node_wot_dir();
    let sidecar = weather_agent::start_sidecar().await;

    // An LMOS consumer watches the same event and property.
    let mut lmos_consumer = sidecar.ws().await;
    lmos_consumer
        .send(lmos(
            THING_ID,
            "subscribeEvent",
            json!({"event": "userFeedbackReceived", "correlationID": "fb"}),
        ))
        .await;
    lmos_consumer
        .send(lmos(
            THING_ID,
            "observeProperty",
            json!({"name": "modelConfiguration", "correlationID": "obs"}),
        ))
        .await;
    lmos_consumer.barrier().await;
    lmos_consumer
        .send(lmos(
            THING_ID,
            "readProperty",
            json!({"name": "modelConfiguration", "correlationID": "r"}),
        ))
        .await;
    let before = next_matching(&mut lmos_consumer, |m| m["correlationID"] == "r").await;

    let td_url = format!("http://{}/things/{}", sidecar.http, urlencode(THING_ID));
    let run = tokio::process::Command::new("node")
        .arg("consume.js")
        .arg(&td_url)
        .arg("Lisbon")
        .current_dir(&dir)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("node-wot finished within a minute")
        .expect("node runs (is Node.js installed?)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "node-wot failed: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no report from node-wot: {stdout}\n{stderr}"));
    assert_eq!(report["errors"], json!([]), "{report}");

    // Read over HTTP: the agent's value.
    assert_eq!(report["initial"], before["value"], "{report}");
    // Written over HTTP, read back over HTTP and observed over MQTT: the
    // reading the agent published, as LMOS consumers got it.
    let written = json!({"modelName": "node-wot", "temperature": 0.25, "maxTokens": 42});
    let reading = next_matching(&mut lmos_consumer, |m| {
        m["correlationID"] == "obs" && m["value"] == written
    })
    .await;
    assert_eq!(report["afterWrite"], reading["value"], "{report}");
    assert_eq!(report["observedWrite"], reading["value"], "{report}");
    assert_eq!(
        report["observed"][0], before["value"],
        "the retained value first: {report}"
    );
    // Invoked over HTTP: the agent's output; the event it then sent, over MQTT.
    assert_eq!(
        report["output"], "The weather in Lisbon is sunny with a temperature of 25°C.",
        "{report}"
    );
    let event = next_matching(&mut lmos_consumer, |m| m["correlationID"] == "fb").await;
    assert_eq!(report["feedback"], event["data"], "{report}");
    sidecar.stop().await;
}
