//! An imported MCP server's invocations are records like any agent's: a
//! sidecar process importing the FastMCP fixture (Streamable HTTP, run by
//! the test, so it outlives the sidecar) is stopped in the middle of a
//! call, by SIGTERM and by SIGKILL, and started again on its data
//! directory: `queryAction` finds the finished invocation, the one that
//! was running comes back `failed`, and the imported Thing serves again.
//! The second time the server is gone too when the sidecar comes back: the
//! records answer all the same, from the description kept on disk, and a
//! call gets a 503 naming the upstream.

use lmos_sidecar::config::ImportsConfig;
use lmos_testkit as common;
use lmos_testkit::process::{DataDir, Started};
use lmos_testkit::upstreams::{self, Fixture};
use lmos_testkit::{lmos, WsClient};
use serde_json::{json, Value};

const CALC: &str = "urn:lmos:import:calc";
const UP: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits until the imported Thing's TD has the server's tools (the bridge
/// registers one without affordances before it reaches the upstream).
async fn described(sidecar: &Started) {
    let path = format!("/things/{}", common::urlencode(CALC));
    let deadline = tokio::time::Instant::now() + UP;
    loop {
        let got = common::http(sidecar.http, "GET", &path, None, b"").await;
        if got.status == 200 && got.json()["actions"]["add"].is_object() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{CALC} was never described: {got:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Everything queued for the store so far is on disk once a TD
/// registration is answered (the store commits in order).
async fn on_disk(sidecar: &Started) {
    let mut td = common::lamp_td();
    td["id"] = json!("urn:test:barrier");
    let put = common::http(
        sidecar.http,
        "PUT",
        "/things/urn:test:barrier",
        Some("application/td+json"),
        td.to_string().as_bytes(),
    )
    .await;
    assert!(matches!(put.status, 201 | 204), "{put:?}");
}

fn ws_url(sidecar: &Started) -> String {
    format!("ws://{}/lmos", sidecar.http)
}

/// Everything answered under `correlation`, until a final status.
async fn until_final(ws: &mut WsClient, correlation: &str, stop_at_running: bool) -> Value {
    loop {
        let m = ws.recv().await;
        if m["correlationID"] != correlation {
            continue;
        }
        let status = m["status"].as_str().unwrap_or_default();
        let done =
            matches!(status, "completed" | "failed" | "cancelled") || m["messageType"] == "error";
        if done || (stop_at_running && status == "running") {
            return m;
        }
    }
}

async fn invoke(ws: &mut WsClient, action: &str, input: Value, correlation: &str) {
    ws.send(lmos(
        CALC,
        "invokeAction",
        json!({"action": action, "input": input, "correlationID": correlation}),
    ))
    .await;
}

async fn query(ws: &mut WsClient, action: &str, correlation: &str) -> Value {
    ws.send(lmos(
        CALC,
        "queryAction",
        json!({"action": action, "correlationID": correlation}),
    ))
    .await;
    until_final(ws, correlation, true).await
}

/// Calls until the server is reached again (before, the Thing's TD is the
/// one kept on disk and calls get a 503).
async fn reached_again(ws: &mut WsClient) {
    let deadline = tokio::time::Instant::now() + UP;
    for n in 0.. {
        let correlation = format!("add-again-{n}");
        invoke(ws, "add", json!({"a": 20, "b": 22}), &correlation).await;
        let added = until_final(ws, &correlation, false).await;
        if added["status"] == "completed" {
            assert_eq!(added["output"]["sum"].as_f64(), Some(42.0), "{added}");
            return;
        }
        assert_eq!(added["status"], "503", "only not connected yet: {added}");
        assert!(tokio::time::Instant::now() < deadline, "{added}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn an_imported_thing_s_invocations_survive_a_restart_in_the_middle_of_a_call() {
    let fixture = Fixture::python("tests/imports/mcp_server.py", &["http"]).await;
    let imports = ImportsConfig {
        mcp: vec![upstreams::mcp_url("calc", &fixture.url("/mcp"))],
        a2a: vec![],
    };
    let toml = upstreams::imports_toml(&imports);
    let mut fixture = Some(fixture);
    for kill in [false, true] {
        let dir = DataDir::new("imports-restart");
        let start = crate::configured(&dir, &toml);
        let first = start();
        described(&first).await;
        let mut ws = WsClient::connect(&ws_url(&first)).await;
        invoke(&mut ws, "add", json!({"a": 2, "b": 3}), "add-1").await;
        let added = until_final(&mut ws, "add-1", false).await;
        assert_eq!(added["output"]["sum"].as_f64(), Some(5.0), "{added}");
        invoke(
            &mut ws,
            "count",
            json!({"to": 50, "delay_ms": 100}),
            "count-1",
        )
        .await;
        let running = until_final(&mut ws, "count-1", true).await;
        assert_eq!(running["status"], "running", "{running}");
        on_disk(&first).await;
        if kill {
            first.kill();
        } else {
            first.terminate();
        }

        if kill {
            // The last round: the upstream does not come back.
            if let Some(f) = fixture.take() {
                f.stop().await;
            }
        }
        let second = start();
        described(&second).await;
        let mut ws = WsClient::connect(&ws_url(&second)).await;
        if kill {
            invoke(&mut ws, "add", json!({"a": 1, "b": 1}), "add-down").await;
            let refused = until_final(&mut ws, "add-down", false).await;
            assert_eq!(refused["status"], "503", "{refused}");
            let detail = refused["detail"].as_str().unwrap_or_default();
            assert!(detail.contains("`calc`"), "{refused}");
        } else {
            reached_again(&mut ws).await;
        }
        let got = query(&mut ws, "add", "add-1").await;
        assert_eq!(got["status"], "completed", "kill {kill}: {got}");
        assert_eq!(got["output"]["sum"].as_f64(), Some(5.0), "{got}");
        let got = query(&mut ws, "count", "count-1").await;
        assert_eq!(got["status"], "failed", "kill {kill}: {got}");
        let why = got["output"]["error"].as_str().unwrap_or_default();
        if kill {
            assert!(
                why.contains("restarted while this invocation was running"),
                "{got}"
            );
        } else {
            assert!(!why.is_empty(), "{got}");
        }
        second.terminate();
    }
}
