//! An upstream going away and coming back: its Thing's retained presence
//! goes offline with the error and online again, a call running when it
//! went ends `failed`, a call while it is away gets an LMOS 503 naming it,
//! and once it is back calls work. Over Streamable HTTP and A2A the test
//! takes the server away behind a relay and starts a fresh one on the same
//! address; over stdio it kills the child the sidecar started, which the
//! sidecar restarts.

use std::time::Duration;

use lmos_sidecar::config::ImportConfig;
use lmos_testkit::upstreams::{self, Fixture, Relay};
use lmos_testkit::{lmos, process};
use serde_json::{json, Value};

use super::*;

/// Quick to notice and quick to come back, for a test.
fn eager(mut import: ImportConfig) -> ImportConfig {
    import.probe_interval_ms = 300;
    import.retry_min_ms = 100;
    import.retry_max_ms = 500;
    import
}

/// Starts `count` to 50, 100 ms apart, and returns after its first progress.
async fn long_count(ws: &mut WsClient) -> String {
    let input = json!({"to": 50, "delay_ms": 100});
    long_call(ws, CALC, "count", input).await
}

/// Starts a long call, and returns after its first progress.
async fn long_call(ws: &mut WsClient, thing: &str, action: &str, input: Value) -> String {
    let correlation = uuid::Uuid::new_v4().to_string();
    ws.send(lmos(
        thing,
        "invokeAction",
        json!({"action": action, "input": input, "correlationID": correlation}),
    ))
    .await;
    loop {
        let m = ws.recv().await;
        assert!(!is_final(&m), "it ended at once: {m}");
        if m["status"] == "running" {
            return correlation;
        }
    }
}

/// The invocation that was running when its upstream went ends `failed`.
async fn ends_failed(ws: &mut WsClient, correlation: &str) {
    let got = answers(ws, correlation).await;
    let end = last(&got);
    assert_eq!(end["status"], "failed", "{got:#?}");
    assert!(end["output"]["error"].is_string(), "says why: {end}");
}

/// The offline presence carries the error; a call meanwhile gets a 503
/// whose detail names the upstream.
async fn away(
    presence: &mut Presence,
    ws: &mut WsClient,
    thing: &str,
    name: &str,
    call: (&str, Value),
) {
    let offline = presence.until("offline", UP).await;
    let error = offline["error"].as_str().unwrap_or_default();
    assert!(!error.is_empty(), "the presence says why: {offline}");
    assert_eq!(offline["thingID"], thing, "{offline}");
    let got = invoke(ws, thing, call.0, call.1, json!({})).await;
    let refused = last(&got);
    assert_eq!(
        (&refused["messageType"], &refused["status"]),
        (&json!("error"), &json!("503")),
        "{got:#?}"
    );
    let detail = refused["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(name), "names the upstream: {refused}");
    assert!(detail.len() > name.len() + 10, "and the error: {refused}");
}

#[tokio::test]
async fn a_streamable_http_server_goes_away_and_comes_back_on_its_address() {
    let first = Fixture::python(MCP_PY, &["http"]).await;
    let relay = Relay::to(first.addr()).await;
    let sidecar = start(
        vec![eager(upstreams::mcp_url("calc", &relay.url("/mcp")))],
        vec![],
    )
    .await;
    let mut presence = Presence::of(sidecar.mqtt, CALC).await;
    presence.until("online", UP).await;
    let mut ws = sidecar.ws().await;
    assert_adds(&mut ws).await;

    let running = long_count(&mut ws).await;
    relay.down();
    first.stop().await;
    ends_failed(&mut ws, &running).await;
    let add = ("add", json!({"a": 2, "b": 3}));
    away(&mut presence, &mut ws, CALC, "calc", add).await;

    let second = Fixture::python(MCP_PY, &["http"]).await;
    relay.up(second.addr()).await;
    let online = presence.until("online", UP).await;
    assert!(online.get("error").is_none(), "{online}");
    assert_adds(&mut ws).await;
    sidecar.stop().await;
}

#[tokio::test]
async fn a_stdio_server_that_dies_is_started_again() {
    let (import, mark) =
        upstreams::marked(eager(upstreams::mcp_python("calc", MCP_PY, &["stdio"])));
    let sidecar = start(vec![import], vec![]).await;
    let mut presence = Presence::of(sidecar.mqtt, CALC).await;
    presence.until("online", UP).await;
    let child = upstreams::marked_process(&mark).await;
    let mut ws = sidecar.ws().await;
    assert_adds(&mut ws).await;

    let running = long_count(&mut ws).await;
    assert_eq!(process::signal(child, libc::SIGKILL), 0);
    ends_failed(&mut ws, &running).await;
    let offline = presence.until("offline", UP).await;
    assert!(offline["error"].is_string(), "{offline}");
    presence.until("online", UP).await;
    let again = upstreams::marked_process(&mark).await;
    assert_ne!(again, child, "a new child");
    assert_adds(&mut ws).await;
    sidecar.stop().await;
    // Stopped with the sidecar.
    let deadline = tokio::time::Instant::now() + common::WAIT;
    while !upstreams::find_marked(&mark).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the child outlived the sidecar"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_a2a_agent_goes_away_and_comes_back_on_its_address() {
    let first = Fixture::python(A2A_PY, &[]).await;
    let relay = Relay::to(first.addr()).await;
    let sidecar = start(
        vec![],
        vec![eager(upstreams::a2a("travel", &relay.url(CARD)))],
    )
    .await;
    let mut presence = Presence::of(sidecar.mqtt, TRAVEL).await;
    presence.until("online", UP).await;
    let mut ws = sidecar.ws().await;
    let got = invoke(
        &mut ws,
        TRAVEL,
        "forecast",
        json!("forecast Oslo"),
        json!({}),
    )
    .await;
    assert_eq!(last(&got)["status"], "completed", "{got:#?}");

    let running = long_call(&mut ws, TRAVEL, "slow", json!("slow")).await;
    relay.down();
    first.stop().await;
    ends_failed(&mut ws, &running).await;
    let forecast = ("forecast", json!("forecast Oslo"));
    away(&mut presence, &mut ws, TRAVEL, "travel", forecast).await;

    let second = Fixture::python(A2A_PY, &[]).await;
    relay.up(second.addr()).await;
    presence.until("online", UP).await;
    let got = invoke(
        &mut ws,
        TRAVEL,
        "forecast",
        json!("forecast Oslo"),
        json!({}),
    )
    .await;
    assert_eq!(last(&got)["status"], "completed", "{got:#?}");
    sidecar.stop().await;
}
