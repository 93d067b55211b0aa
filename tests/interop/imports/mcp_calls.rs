//! Each MCP fixture server (Python FastMCP over stdio and over Streamable
//! HTTP, the TypeScript SDK over Streamable HTTP) imported as `calc`: its
//! TD, its presence, and its tools called from a WebSocket consumer, an
//! MQTT 5 client and the HTTP binding: a structured result, progress, an
//! error, a cancel, a resource read, a tool list change.

use std::time::Duration;

use lmos_sidecar::directory::TdValidator;
use lmos_testkit::upstreams::{self, Fixture};
use lmos_testkit::{self as common, lmos, TestSidecar};
use serde_json::{json, Value};

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    PythonStdio,
    PythonHttp,
    TypeScript,
}

/// A sidecar importing `server` as `calc`, and the fixture when the test
/// runs it (over HTTP).
async fn calc(server: Server) -> (TestSidecar, Option<Fixture>) {
    let (import, fixture) = match server {
        Server::PythonStdio => (upstreams::mcp_python("calc", MCP_PY, &["stdio"]), None),
        Server::PythonHttp => {
            let f = Fixture::python(MCP_PY, &["http"]).await;
            (upstreams::mcp_url("calc", &f.url("/mcp")), Some(f))
        }
        Server::TypeScript => {
            let f = Fixture::node(MCP_TS, &[]).await;
            (upstreams::mcp_url("calc", &f.url("/mcp")), Some(f))
        }
    };
    (start(vec![import], vec![]).await, fixture)
}

/// Everything a consumer sees of the imported server, by every transport.
async fn every_transport(server: Server) {
    let (sidecar, _fixture) = calc(server).await;
    described(&sidecar).await;
    let mut presence = Presence::of(sidecar.mqtt, CALC).await;
    let online = presence.until("online", UP).await;
    assert_eq!(
        online,
        json!({"thingID": CALC, "status": "online", "transport": "mcp"}),
        "{server:?}"
    );
    over_websocket(&sidecar).await;
    over_mqtt5(&sidecar).await;
    over_http(&sidecar).await;
    tool_list_change(&sidecar).await;
    sidecar.stop().await;
}

#[tokio::test]
async fn the_python_server_over_stdio_is_a_thing_on_every_transport() {
    every_transport(Server::PythonStdio).await;
}

#[tokio::test]
async fn the_python_server_over_streamable_http_is_a_thing_on_every_transport() {
    every_transport(Server::PythonHttp).await;
}

#[tokio::test]
async fn the_typescript_server_over_streamable_http_is_a_thing_on_every_transport() {
    every_transport(Server::TypeScript).await;
}

/// The TD: valid, `lmos:Tool`, tools as actions, the resource a read-only
/// property; the same on the retained `td` topic.
async fn described(sidecar: &TestSidecar) {
    let td = connected(sidecar.http, CALC).await;
    if let Err(e) = TdValidator::new().check(&td) {
        panic!("{e}: {td:#}");
    }
    assert_eq!(td["id"], CALC);
    let types = td["@type"].clone();
    assert!(
        types == "lmos:Tool"
            || types
                .as_array()
                .is_some_and(|t| t.contains(&json!("lmos:Tool"))),
        "{td:#}"
    );
    let add = &td["actions"]["add"];
    assert_eq!(add["safe"], true, "{td:#}");
    assert_eq!(add["idempotent"], true, "{td:#}");
    assert_eq!(add["description"], "Adds two numbers.", "{td:#}");
    assert_eq!(add["input"]["properties"]["a"]["type"], "number", "{td:#}");
    assert_eq!(add["input"]["properties"]["b"]["type"], "number", "{td:#}");
    let sum = &add["output"]["properties"]["sum"]["type"];
    assert!(*sum == "number" || *sum == "integer", "{td:#}");
    for tool in ["echo", "count", "fail"] {
        assert!(td["actions"][tool].is_object(), "{tool}: {td:#}");
    }
    assert_ne!(td["actions"]["echo"]["safe"], true, "no hint, not safe");
    let greeting = &td["properties"]["greeting"];
    assert_eq!(greeting["readOnly"], true, "{td:#}");
    assert_ne!(greeting["writeOnly"], true, "{td:#}");

    let mut watcher = sidecar.mqtt(&format!("td-{}", uuid::Uuid::new_v4())).await;
    watcher.subscribe(&format!("lmos/{CALC}/td")).await;
    let (_, retained, retain) = watcher.recv_json().await;
    assert!(retain, "the TD is retained");
    assert_eq!(retained["id"], CALC);
    assert_eq!(retained["actions"]["add"]["safe"], true, "{retained:#}");
}

/// `add`, `count` with progress, `fail`, a cancelled `count`, `greeting`.
async fn over_websocket(sidecar: &TestSidecar) {
    let mut ws = sidecar.ws().await;
    assert_adds(&mut ws).await;

    let got = invoke(
        &mut ws,
        CALC,
        "count",
        json!({"to": 3, "delay_ms": 50}),
        json!({}),
    )
    .await;
    let progress: Vec<Value> = running(&got)
        .into_iter()
        .map(|m| m["output"].clone())
        .collect();
    let expected: Vec<Value> = (1..=3)
        .map(|i| json!({"progress": i, "total": 3, "message": format!("step {i}")}))
        .collect();
    assert_eq!(progress, expected, "{got:#?}");
    let done = last(&got);
    assert_eq!(
        (&done["status"], &done["output"]),
        (&json!("completed"), &json!("counted to 3")),
        "{got:#?}"
    );

    let got = invoke(&mut ws, CALC, "fail", json!({}), json!({})).await;
    let failed = last(&got);
    assert_eq!(failed["status"], "failed", "{got:#?}");
    assert_eq!(
        failed["output"]["error"], "the tool failed on purpose",
        "{got:#?}"
    );

    cancelled_count(&mut ws).await;

    let reading = read_property(&mut ws, CALC, "greeting").await;
    assert_eq!(reading["messageType"], "propertyReading", "{reading}");
    assert_eq!(reading["value"], "hello from the fixture", "{reading}");
}

/// `count` to 50, 100 ms apart, cancelled after its first progress.
async fn cancelled_count(ws: &mut WsClient) {
    let correlation = uuid::Uuid::new_v4().to_string();
    ws.send(lmos(
        CALC,
        "invokeAction",
        json!({"action": "count", "input": {"to": 50, "delay_ms": 100}, "correlationID": correlation}),
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
        CALC,
        "cancelAction",
        json!({"action": "count", "correlationID": correlation}),
    ))
    .await;
    let started = tokio::time::Instant::now();
    let got = answers(ws, &correlation).await;
    assert_eq!(last(&got)["status"], "cancelled", "{got:#?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "cancelled in {:?}, the count would have taken 5 s",
        started.elapsed()
    );
}

/// `add` by the request topic, answered on the MQTT 5 response topic.
async fn over_mqtt5(sidecar: &TestSidecar) {
    let reply = mqtt5_invoke(sidecar, CALC, "add", json!({"a": 2, "b": 3})).await;
    assert_eq!(reply["status"], "completed", "{reply}");
    assert!(is_sum(&reply["output"], 5.0), "{reply}");
}

/// `POST /things/{id}/actions/add`.
async fn over_http(sidecar: &TestSidecar) {
    let output = http_invoke(sidecar, CALC, "add", json!({"a": 2, "b": 3})).await;
    assert!(is_sum(&output, 5.0), "{output}");
}

/// `add_tool` makes the server announce a new tool: the TD is published
/// again with it (directory and retained topic), and it can be called.
async fn tool_list_change(sidecar: &TestSidecar) {
    let mut watcher = sidecar.mqtt(&format!("td-{}", uuid::Uuid::new_v4())).await;
    watcher.subscribe(&format!("lmos/{CALC}/td")).await;
    let (_, before, _) = watcher.recv_json().await;
    assert!(before["actions"]["tripled"].is_null(), "{before:#}");

    let mut ws = sidecar.ws().await;
    let got = invoke(
        &mut ws,
        CALC,
        "add_tool",
        json!({"name": "tripled"}),
        json!({}),
    )
    .await;
    assert_eq!(
        (&last(&got)["status"], &last(&got)["output"]),
        (&json!("completed"), &json!("added tripled")),
        "{got:#?}"
    );
    let td = td_when(sidecar.http, CALC, common::WAIT, |td| {
        td["actions"]["tripled"].is_object()
    })
    .await;
    assert!(td["actions"]["add"].is_object(), "the others stay: {td:#}");
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        let (_, published, _) = tokio::time::timeout_at(deadline, watcher.recv_json())
            .await
            .expect("the TD is published again on its topic");
        if published["actions"]["tripled"].is_object() {
            break;
        }
    }
    let got = invoke(&mut ws, CALC, "tripled", Value::Null, json!({})).await;
    assert_eq!(
        (&last(&got)["status"], &last(&got)["output"]),
        (&json!("completed"), &json!("I am tripled")),
        "{got:#?}"
    );
}
