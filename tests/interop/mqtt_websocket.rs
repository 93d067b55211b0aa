//! MQTT.js (npm `mqtt`, pinned in `tests/mqttjs/`), the client web
//! dashboards use, over the sidecar's `/mqtt`:
//!
//! - from Node, MQTT 3.1.1 and 5: a QoS 1 event from another MQTT.js
//!   client, a retained reading given back as retained, and the WeatherAgent's
//!   `userFeedbackReceived` event (the agent is on the WebSocket gateway);
//! - from a page in headless Chromium on the sidecar's own origin (the
//!   console's), with MQTT.js's browser bundle, both versions;
//! - from a page on another origin: refused, and counted as such.
//!
//! Needs Node.js and `npm ci --prefix tests/mqttjs`, and Chromium (see
//! `.ci/setup`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use lmos_testkit::webdriver::{browser_available, start_driver, Browser};
use lmos_testkit::{self as common, http_limit_hits, lmos, test_config, weather_agent};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

fn mqttjs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mqttjs")
}

/// The report of one run of `scenario.js`, checked.
fn check_scenario(report: &Value, version: u64, thing: &str) {
    assert_eq!(report["version"], version, "{report}");
    let event = &report["event"];
    assert_eq!(
        event["topic"],
        format!("lmos/{thing}/events/ping"),
        "{report}"
    );
    assert_eq!(event["qos"], 1, "{report}");
    assert_eq!(
        event["payload"],
        json!({"n": version}).to_string(),
        "{report}"
    );
    let retained = &report["retained"];
    assert_eq!(retained["retain"], true, "{report}");
    assert_eq!(
        retained["payload"],
        json!({"on": true, "version": version}).to_string(),
        "{report}"
    );
}

#[tokio::test]
async fn mqtt_js_from_node_publishes_subscribes_and_hears_the_agent() {
    let sidecar = weather_agent::start_sidecar().await;
    let url = format!("ws://{}/mqtt", sidecar.http);
    let mut node = tokio::process::Command::new("node")
        .arg("client.mjs")
        .arg(&url)
        .arg("urn:test:dashboard")
        .current_dir(mqttjs())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs (is Node.js installed?)");
    let mut lines = BufReader::new(node.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("MQTT.js subscribed within a minute")
        .unwrap();
    assert_eq!(ready.as_deref(), Some("READY"), "MQTT.js said {ready:?}");

    // The agent, asked over the WebSocket gateway, sends its event.
    let mut consumer = sidecar.ws().await;
    consumer
        .send(lmos(
            weather_agent::THING_ID,
            "invokeAction",
            json!({"action": "getWeather", "input": {"question": "Weather in Oslo?", "interactionMode": "text"}, "correlationID": "c"}),
        ))
        .await;
    let report = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("MQTT.js reported")
        .unwrap()
        .expect("a report line");
    let report: Value = serde_json::from_str(&report).unwrap();
    assert!(report["error"].is_null(), "{report}");
    check_scenario(&report["v4"], 4, "urn:test:dashboard");
    check_scenario(&report["v5"], 5, "urn:test:dashboard");
    let feedback = &report["feedback"];
    assert_eq!(
        feedback["topic"],
        format!(
            "lmos/{}/events/userFeedbackReceived",
            weather_agent::THING_ID
        ),
        "{report}"
    );
    assert_eq!(feedback["event"]["messageType"], "event", "{report}");
    assert_eq!(
        feedback["event"]["data"]["comment"], "Thanks for the forecast for Oslo.",
        "{report}"
    );
    sidecar.stop().await;
}

/// MQTT.js's browser bundle and the scenario, as one script a page runs:
/// `window.mqtt` and `window.mqttScenario`, then the runs of `versions`
/// against `url` leave their reports (or the error) in `window.report`.
fn page_script(url: &str, thing: &str) -> String {
    let bundle = std::fs::read_to_string(mqttjs().join("node_modules/mqtt/dist/mqtt.min.js"))
        .expect("MQTT.js's browser bundle (npm ci --prefix tests/mqttjs)");
    let scenario = std::fs::read_to_string(mqttjs().join("scenario.js")).unwrap();
    format!(
        "{bundle}\nwindow.mqtt = mqtt;\n{scenario}\nwindow.report = null;\n\
         (async () => {{ const out = {{}}; try {{ for (const v of [4, 5]) out['v' + v] = \
         await window.mqttScenario(window.mqtt, {url:?}, v, {thing:?}); }} \
         catch (e) {{ out.error = String(e && e.message ? e.message : e); }} \
         window.report = JSON.stringify(out); }})();\nreturn true;"
    )
}

async fn run_in_page(browser: &Browser, url: &str, thing: &str) -> Value {
    browser.js(&page_script(url, thing)).await;
    let report = browser
        .wait_for(
            "MQTT.js's runs in the page",
            Duration::from_secs(30),
            "return window.report;",
        )
        .await;
    serde_json::from_str(report.as_str().unwrap()).unwrap()
}

/// A page on another origin (a second loopback port).
async fn other_origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = [0u8; 4096];
                let _ = stream.read(&mut head).await;
                let page = "<!doctype html><title>another site</title><p>another site</p>";
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                    page.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_js_in_a_page_of_the_sidecar_s_origin_works_and_another_origin_is_refused() {
    if !browser_available() {
        return;
    }
    let sidecar = common::TestSidecar::start_with(test_config()).await;
    let s = sidecar.http;
    let driver = start_driver().await;
    let browser = Browser::open(&driver, 900, 700).await;

    // The console's origin.
    browser.goto(&format!("http://{s}/console")).await;
    let url = format!("ws://{s}/mqtt");
    let report = run_in_page(&browser, &url, "urn:test:page").await;
    assert!(report["error"].is_null(), "{report}");
    check_scenario(&report["v4"], 4, "urn:test:page");
    check_scenario(&report["v5"], 5, "urn:test:page");

    // Another origin: the handshake is refused (403), so MQTT.js never
    // connects; the sidecar counts the refusal.
    let before = http_limit_hits(s, "allowed_origins").await;
    let other = other_origin().await;
    browser.goto(&format!("http://{other}/")).await;
    let report = run_in_page(&browser, &url, "urn:test:evil").await;
    assert!(report["v4"].is_null(), "{report}");
    assert!(report["error"].is_string(), "{report}");
    assert!(http_limit_hits(s, "allowed_origins").await > before);
    browser.close().await;
    sidecar.stop().await;
}

/// The Paho suite's behaviours that do not depend on TCP, with paho-mqtt's
/// WebSocket transport (`tests/paho_ws/behaviours.py`, paho-mqtt pinned in
/// `tests/requirements.txt`): basic QoS 0/1/2, retained messages, the will
/// on a keep-alive timeout, a zero-length client ID, unsubscribe,
/// overlapping subscriptions, offline queueing; each for 3.1.1 and 5.
#[tokio::test]
async fn paho_mqtt_over_websocket_passes_the_suite_s_behaviours() {
    let sidecar = common::TestSidecar::start_with(test_config()).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/paho_ws/behaviours.py");
    let run = tokio::process::Command::new(common::python())
        .arg(script)
        .arg(sidecar.http.ip().to_string())
        .arg(sidecar.http.port().to_string())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("the behaviours ran within 3 minutes")
        .expect("python3 runs (is the test venv made? .ci/setup)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches("PASS ").count(), 14, "{stdout}\n{stderr}");
    sidecar.stop().await;
}
