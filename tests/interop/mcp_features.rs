//! `/mcp`'s resources, logging, completion and media content, driven by
//! the official MCP TypeScript SDK (`tests/mcp/features.mjs`) against a
//! real sidecar and a scripted LMOS agent on its WebSocket: a Thing with
//! an observable property, a templated one whose `uriVariables` have an
//! `enum`, actions answering a PNG and a WAV (TD `contentEncoding` +
//! `contentMediaType`), one that reports progress and one that fails.
//!
//! Needs Node.js with `npm ci --prefix tests/mcp` (`.ci/run` does it).

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use lmos_sidecar::auth::credentials::hash_password;
use lmos_sidecar::config::{Grants, HttpScheme, PrincipalConfig};
use lmos_testkit::{self as common, test_config, ws_request, TestSidecar, WsClient};
use serde_json::{json, Value};
use tokio::process::Command;

const THING: &str = "urn:test:media";
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA==";

fn td() -> Value {
    let form = |n: &str| json!([{"href": format!("https://media.example/{n}")}]);
    let media =
        |t: &str| json!({"type": "string", "contentEncoding": "base64", "contentMediaType": t});
    json!({
        "@context": ["https://www.w3.org/2022/wot/td/v1.1", {"lmos": "https://eclipse.dev/lmos/protocol/v1"}],
        "@type": "lmos:Agent",
        "id": THING,
        "title": "Media",
        "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}},
        "security": "nosec_sc",
        "properties": {
            "forecast": {"type": "string", "readOnly": true, "observable": true, "forms": form("forecast")},
            "cityReport": {"type": "string", "readOnly": true, "forms": form("cityReport"),
                "uriVariables": {"city": {"type": "string", "enum": ["Oslo", "Bonn", "Bologna"]}}},
        },
        "actions": {
            "snapshot": {"output": media("image/png"), "forms": form("snapshot")},
            "speak": {"output": media("audio/wav"), "forms": form("speak")},
            "slow": {"forms": form("slow")},
            "broken": {"forms": form("broken")},
        }
    })
}

fn message(kind: &str, correlation: &Value, members: Value) -> Value {
    let mut m = json!({"thingID": THING, "messageID": uuid::Uuid::new_v4().to_string(),
        "messageType": kind, "correlationID": correlation});
    for (k, v) in members.as_object().into_iter().flatten() {
        m[k] = v.clone();
    }
    m
}

fn answers(m: &Value) -> Vec<Value> {
    let c = &m["correlationID"];
    let now = "2026-01-01T00:00:00Z";
    let status = |s: &str, output: Value| {
        message(
            "actionStatus",
            c,
            json!({"action": m["action"], "status": s, "output": output}),
        )
    };
    match (m["messageType"].as_str(), m["name"].as_str()) {
        (Some("readProperty"), Some("forecast")) => vec![message(
            "propertyReading",
            c,
            json!({"name": "forecast", "value": "Sunny in Oslo.", "timestamp": now}),
        )],
        (Some("readProperty"), Some("cityReport")) => {
            let city = m["uriVariables"]["city"].as_str().unwrap_or("nowhere");
            let value = format!("Report for {city}.");
            vec![message(
                "propertyReading",
                c,
                json!({"name": "cityReport", "value": value, "timestamp": now}),
            )]
        }
        (Some("invokeAction"), _) => match m["action"].as_str() {
            Some("snapshot") => vec![status("completed", json!(PNG))],
            Some("speak") => vec![status("completed", json!(WAV))],
            Some("slow") => vec![
                status("running", json!({"progress": "Looking at the sky..."})),
                status("running", json!({"progress": "Writing the forecast..."})),
                status("completed", json!("Done.")),
            ],
            _ => vec![status("failed", json!({"error": "The sky is gone."}))],
        },
        _ => Vec::new(),
    }
}

/// Answers as the Thing's agent; publishes a new forecast now and then,
/// which observers hear of.
async fn agent(mut ws: WsClient) {
    ws.send(td()).await;
    let mut tick = tokio::time::interval(Duration::from_millis(300));
    loop {
        tokio::select! {
            m = ws.recv_within(Duration::from_secs(3600)) => {
                for answer in answers(&m) {
                    ws.send(answer).await;
                }
            }
            _ = tick.tick() => {
                let reading = json!({"thingID": THING, "messageID": uuid::Uuid::new_v4().to_string(),
                    "messageType": "propertyReading", "name": "forecast",
                    "value": "Rain later.", "timestamp": "2026-01-01T00:00:01Z"});
                ws.send(reading).await;
            }
        }
    }
}

fn basic(name: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{name}:pw"));
    format!("Basic {encoded}")
}

/// Basic authentication: `agent` hosts the Thing, `reader` may consume and
/// operate it, `operator` may only operate it (no `consume`).
async fn sidecar_with_agent() -> (TestSidecar, tokio::task::JoinHandle<()>) {
    let mut config = test_config();
    config.http.authentication = vec![HttpScheme::Basic];
    config.auth.anonymous = Grants::default();
    let thing = vec![THING.to_owned()];
    let none = Vec::new();
    let principal =
        |name: &str, consume: &Vec<String>, operate: &Vec<String>, host| PrincipalConfig {
            name: name.into(),
            password_hash: hash_password("pw"),
            host,
            consume: consume.clone(),
            operate: operate.clone(),
            ..PrincipalConfig::default()
        };
    config.auth.principals = vec![
        principal("agent", &thing, &none, thing.clone()),
        principal("reader", &thing, &thing, none.clone()),
        principal("operator", &none, &thing, none.clone()),
    ];
    let sidecar = TestSidecar::start_with(config).await;
    let url = format!("{}?host={}", sidecar.ws_url(), common::urlencode(THING));
    let mut request = ws_request(&url, Some("lmosprotocol"));
    request
        .headers_mut()
        .insert("Authorization", basic("agent").parse().unwrap());
    let ws = WsClient::connect_request(request).await.unwrap();
    let agent = tokio::spawn(agent(ws));
    common::wait_for_stats(&sidecar, |s| s.hosted_things == 1).await;
    let deadline = tokio::time::Instant::now() + common::WAIT;
    let auth = basic("reader");
    let path = format!("/things/{THING}");
    while common::http_with(sidecar.http, "GET", &path, &[("Authorization", &auth)], b"")
        .await
        .status
        != 200
    {
        assert!(tokio::time::Instant::now() < deadline, "TD registered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (sidecar, agent)
}

async fn client(scenario: &str, sidecar: &TestSidecar, principal: &str) -> Value {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp");
    assert!(
        dir.join("node_modules/@modelcontextprotocol/sdk").is_dir(),
        "the MCP TypeScript SDK is not installed: run `npm ci --prefix tests/mcp` (.ci/run does this)"
    );
    let url = format!("http://{}/mcp", sidecar.http);
    let output = Command::new("node")
        .args(["features.mjs", scenario, &url])
        .arg(format!("Authorization={}", basic(principal)))
        .current_dir(dir)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(90), output)
        .await
        .expect("the client ends within 90 s")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|_| panic!("a report: {stdout}"))
}

#[tokio::test]
async fn the_typescript_sdk_reads_watches_completes_and_gets_media_and_logs() {
    let (sidecar, _agent) = sidecar_with_agent().await;
    let report = client("features", &sidecar, "reader").await;
    assert_eq!(report["errors"], json!([]), "{report:#}");
    let caps = &report["capabilities"];
    assert_eq!(caps["resources"]["subscribe"], true, "{caps}");
    assert!(caps["logging"].is_object() && caps["completions"].is_object());

    // Properties are resources; the one with uriVariables a template.
    let forecast = "lmos://urn%3Atest%3Amedia/properties/forecast";
    assert_eq!(report["resources"][0]["uri"], forecast, "{report:#}");
    assert_eq!(report["resources"].as_array().unwrap().len(), 1);
    assert_eq!(
        report["templates"][0]["uriTemplate"],
        "lmos://urn%3Atest%3Amedia/properties/cityReport{?city}"
    );
    let read = &report["read"]["contents"][0];
    assert_eq!(read["text"], "Sunny in Oslo.", "{report:#}");
    assert_eq!(read["mimeType"], "text/plain");
    // The URI's variable reached the agent as the read's uriVariables.
    assert_eq!(
        report["readTemplate"]["contents"][0]["text"],
        "Report for Bonn."
    );
    assert_eq!(report["unknown"]["code"], -32602, "{report:#}");
    assert_eq!(
        report["completion"]["completion"]["values"],
        json!(["Bonn", "Bologna"])
    );

    // Media outputs are image and audio content.
    let image = &report["image"]["content"][0];
    assert_eq!(
        (
            image["type"].as_str(),
            image["mimeType"].as_str(),
            image["data"].as_str()
        ),
        (Some("image"), Some("image/png"), Some(PNG))
    );
    let audio = &report["audio"]["content"][0];
    assert_eq!(
        (audio["type"].as_str(), audio["mimeType"].as_str()),
        (Some("audio"), Some("audio/wav"))
    );

    // Logging at info: the agent's progress text and its failure, no debug.
    let logs = report["logs"].as_array().unwrap();
    let said: Vec<(&str, &str)> = logs
        .iter()
        .map(|l| (l["level"].as_str().unwrap(), l["data"].as_str().unwrap()))
        .collect();
    assert!(
        said.contains(&("info", "Looking at the sky..."))
            && said.contains(&("info", "Writing the forecast...")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|(l, d)| *l == "error" && d.contains("The sky is gone.")),
        "{said:?}"
    );
    assert!(said.iter().all(|(l, _)| *l != "debug"), "{said:?}");
    assert_eq!(report["broken"]["isError"], true);

    // A subscription hears of the agent's new readings.
    assert!(
        report["updates"]
            .as_array()
            .unwrap()
            .contains(&json!(forecast)),
        "{report:#}"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn a_principal_without_consume_sees_no_resources_of_the_thing() {
    let (sidecar, _agent) = sidecar_with_agent().await;
    let report = client("blind", &sidecar, "operator").await;
    assert_eq!(report["errors"], json!([]), "{report:#}");
    assert_eq!(report["resources"], json!([]), "{report:#}");
    assert_eq!(report["templates"], json!([]), "{report:#}");
    // Unknown and forbidden read alike.
    assert_eq!(report["read"]["code"], -32602, "{report:#}");
    assert_eq!(report["subscribe"]["code"], -32602, "{report:#}");
    // It may still operate: the actions are its tools, the reads are not.
    let tools = report["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("snapshot")), "{tools:?}");
    assert!(!tools.contains(&json!("read_forecast")), "{tools:?}");
    sidecar.stop().await;
}
