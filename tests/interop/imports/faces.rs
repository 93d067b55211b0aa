//! Our own faces in front of imports: the official MCP TypeScript client on
//! `/mcp` calling the imported FastMCP server (MCP → sidecar → MCP, a tool
//! list change passed on), and the official A2A Python client on
//! `/a2a/{thingID}` calling an imported MCP tool and the imported A2A
//! agent's streamed skill (A2A → sidecar → A2A).

use std::time::Duration;

use lmos_sidecar::config::ThingType;
use lmos_testkit::upstreams::{self, Fixture};
use lmos_testkit::urlencode;
use serde_json::{json, Value};

use super::a2a_calls::FORECAST;
use super::*;

/// A client script's one JSON report line (the last one it prints).
async fn report(program: &str, dir: &str, args: &[String]) -> Value {
    let run = tokio::process::Command::new(program)
        .args(args)
        .current_dir(upstreams::workspace().join(dir))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .expect("the client finished within 90 s")
        .unwrap_or_else(|e| panic!("{program} runs ({e}); is it installed?"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no report: {stdout}\n{stderr}"))
}

#[tokio::test]
async fn the_mcp_sdk_client_calls_an_imported_mcp_server_through_our_mcp() {
    let fixture = Fixture::python(MCP_PY, &["http"]).await;
    let sidecar = start(
        vec![upstreams::mcp_url("calc", &fixture.url("/mcp"))],
        vec![],
    )
    .await;
    let url = format!("http://{}/mcp", sidecar.http);
    let args = ["imports_client.mjs".to_owned(), url];
    let report = report("node", "tests/mcp", &args).await;
    assert_eq!(report["errors"], json!([]), "{report:#}");

    let tools = report["tools"].as_array().unwrap();
    let add = tools
        .iter()
        .find(|t| t["name"] == "add")
        .expect("add is listed");
    assert_eq!(
        add["inputSchema"]["properties"]["a"]["type"], "number",
        "{add:#}"
    );
    assert_eq!(add["annotations"]["readOnlyHint"], true, "{add:#}");
    assert!(
        is_sum(&report["add"]["structuredContent"], 5.0),
        "{report:#}"
    );
    assert_ne!(report["add"]["isError"], true, "{report:#}");

    let messages: Vec<&str> = report["progress"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["message"].as_str())
        .collect();
    assert_eq!(messages, ["step 1", "step 2", "step 3"], "{report:#}");
    assert_eq!(
        report["count"]["content"][0]["text"], "counted to 3",
        "{report:#}"
    );

    assert_eq!(report["fail"]["isError"], true, "{report:#}");
    let why = report["fail"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("the tool failed on purpose"), "{report:#}");
    assert_eq!(
        report["greeting"]["content"][0]["text"], "hello from the fixture",
        "{report:#}"
    );

    assert_eq!(
        report["added"]["content"][0]["text"], "added tripled",
        "{report:#}"
    );
    assert!(report["listChanged"].as_u64() >= Some(1), "{report:#}");
    assert!(
        report["after"]
            .as_array()
            .unwrap()
            .contains(&json!("tripled")),
        "{report:#}"
    );
    assert_eq!(
        report["tripled"]["content"][0]["text"], "I am tripled",
        "{report:#}"
    );
    sidecar.stop().await;
}

/// The A2A client's events for one message to `thing` through `/a2a`.
async fn a2a(sidecar: &TestSidecar, thing: &str, skill: &str, stream: bool, part: Value) -> Value {
    let agent = format!("http://{}/a2a/{}", sidecar.http, urlencode(thing));
    let stream = if stream { "1" } else { "0" };
    let args = [
        "imports_client.py".to_owned(),
        agent,
        skill.to_owned(),
        stream.to_owned(),
        part.to_string(),
    ];
    let report = report("python3", "tests/a2a", &args).await;
    assert_eq!(report["errors"], json!([]), "{report:#}");
    report["events"].clone()
}

/// The task's final state and its artifacts' parts, from the events.
fn ending(events: &Value) -> (String, Vec<Value>) {
    let mut state = String::new();
    let mut parts = Vec::new();
    for e in events.as_array().unwrap() {
        if let Some(s) = e["task"]["status"]["state"]
            .as_str()
            .or(e["statusUpdate"]["status"]["state"].as_str())
        {
            state = s.to_owned();
        }
        for a in e["task"]["artifacts"].as_array().into_iter().flatten() {
            parts.extend(a["parts"].as_array().into_iter().flatten().cloned());
        }
        if let Some(p) = e["artifactUpdate"]["artifact"]["parts"].as_array() {
            parts.extend(p.iter().cloned());
        }
    }
    (state, parts)
}

#[tokio::test]
async fn the_a2a_sdk_client_calls_an_imported_mcp_tool_through_our_a2a() {
    let fixture = Fixture::python(MCP_PY, &["http"]).await;
    // Our /a2a serves `lmos:Agent`s: the server is imported as one.
    let mut calc = upstreams::mcp_url("calc", &fixture.url("/mcp"));
    calc.thing_type = Some(ThingType::Agent);
    let sidecar = start(vec![calc], vec![]).await;
    let events = a2a(
        &sidecar,
        CALC,
        "add",
        false,
        json!({"data": {"a": 2, "b": 3}}),
    )
    .await;
    let (state, parts) = ending(&events);
    assert_eq!(state, "TASK_STATE_COMPLETED", "{events:#}");
    assert_eq!(parts.len(), 1, "{events:#}");
    assert!(is_sum(&parts[0]["data"], 5.0), "{events:#}");
    sidecar.stop().await;
}

#[tokio::test]
async fn the_a2a_sdk_client_streams_an_imported_a2a_agent_s_skill_through_our_a2a() {
    let agent = Fixture::python(A2A_PY, &[]).await;
    let sidecar = start(vec![], vec![upstreams::a2a("travel", &agent.url(CARD))]).await;
    let events = a2a(
        &sidecar,
        TRAVEL,
        "forecast",
        true,
        json!({"text": "forecast Oslo"}),
    )
    .await;
    let (state, parts) = ending(&events);
    assert_eq!(state, "TASK_STATE_COMPLETED", "{events:#}");
    let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
    assert!(text.contains(FORECAST), "{events:#}");
    sidecar.stop().await;
}
