//! The client against the real fixture servers (tests/imports/mcp_server.py
//! over stdio and Streamable HTTP, tests/imports/mcp_server.mjs over
//! Streamable HTTP). They need `python3` with `mcp` 2.3.0 and `node` with
//! the SDK in tests/mcp/node_modules (`npm ci --prefix tests/mcp`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::McpUpstream;
use crate::config::ImportConfig;
use crate::imports::upstream::{Call, Change, Outcome, Update, Upstream, UpstreamError};
use crate::telemetry::TraceContext;

pub(super) const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
pub(super) const WAIT: Duration = Duration::from_secs(10);

pub(super) fn fixture(file: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/imports");
    dir.join(file).display().to_string()
}

pub(super) fn config() -> ImportConfig {
    ImportConfig {
        name: "fixture".into(),
        connect_timeout_ms: 15_000,
        timeout_ms: 10_000,
        ..ImportConfig::default()
    }
}

fn stdio_config() -> ImportConfig {
    let command = vec!["python3".into(), fixture("mcp_server.py"), "stdio".into()];
    ImportConfig {
        command,
        ..config()
    }
}

/// An HTTP fixture, killed when dropped.
pub(super) struct Server {
    _child: Child,
    pub(super) url: String,
}

pub(super) async fn serve(program: &str, args: &[String]) -> Server {
    let mut child = Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program} (needed by these tests): {e}"));
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line()).await;
    let line = line
        .expect("the fixture did not listen in time")
        .unwrap()
        .unwrap();
    let port = line
        .strip_prefix("LISTENING ")
        .expect("LISTENING <port>")
        .trim();
    Server {
        _child: child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    }
}

async fn python_http() -> Server {
    serve("python3", &[fixture("mcp_server.py"), "http".into()]).await
}

async fn node_http() -> Server {
    serve("node", &[fixture("mcp_server.mjs")]).await
}

pub(super) fn call(action: &str, input: Value) -> Call {
    Call {
        action: action.into(),
        input: Some(input),
        id: format!("call-{}", uuid::Uuid::new_v4()),
        stream: false,
        trace: Some(TraceContext {
            traceparent: TRACEPARENT.into(),
            tracestate: Some("lmos=1".into()),
        }),
    }
}

pub(super) async fn run(
    up: &McpUpstream,
    call: Call,
) -> (Result<Outcome, UpstreamError>, Vec<Update>) {
    let (tx, mut rx) = mpsc::channel(64);
    let outcome = tokio::time::timeout(WAIT, up.call(call, tx, CancellationToken::new())).await;
    let mut updates = Vec::new();
    while let Ok(update) = rx.try_recv() {
        updates.push(update);
    }
    (outcome.expect("the call did not end in time"), updates)
}

pub(super) async fn outcome(up: &McpUpstream, action: &str, input: Value) -> Outcome {
    run(up, call(action, input)).await.0.unwrap()
}

/// Everything both servers offer, on a connected upstream.
pub(super) async fn exercise(up: &McpUpstream) {
    let offer = tokio::time::timeout(WAIT, up.connect())
        .await
        .unwrap()
        .unwrap();
    let names: Vec<&str> = offer.actions.iter().map(|a| a.name.as_str()).collect();
    for name in ["add", "echo", "count", "fail", "add_tool", "whoami"] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let add = offer.actions.iter().find(|a| a.name == "add").unwrap();
    assert!(add.safe && add.idempotent, "{add:?}");
    assert_eq!(add.description.as_deref(), Some("Adds two numbers."));
    assert_eq!(
        add.input.as_ref().unwrap()["properties"]["a"]["type"],
        "number"
    );
    assert_eq!(
        add.output.as_ref().unwrap()["properties"]["sum"]["type"],
        "number"
    );
    let echo = offer.actions.iter().find(|a| a.name == "echo").unwrap();
    assert!(!echo.safe && echo.output.is_none());
    assert_eq!(offer.properties.len(), 1);
    assert_eq!(offer.properties[0].name, "greeting");
    assert_eq!(offer.properties[0].extra["lmos:uri"], "memo://greeting");
    assert_eq!(offer.extra["lmos:protocol"], "mcp");
    assert!(offer.title.starts_with("mcp-fixture") && offer.description.is_some());
    up.probe().await.unwrap();

    let Outcome::Completed(sum) = outcome(up, "add", json!({"a": 1, "b": 2})).await else {
        panic!("add did not complete");
    };
    assert_eq!(sum["sum"].as_f64(), Some(3.0));
    assert_eq!(
        outcome(up, "echo", json!({"text": "hi"})).await,
        Outcome::Completed(json!("hi"))
    );
    let Outcome::Failed(failed) = outcome(up, "fail", json!({})).await else {
        panic!("fail did not fail");
    };
    assert_eq!(failed["error"], "the tool failed on purpose");
    assert_eq!(
        outcome(up, "whoami", json!({})).await,
        Outcome::Completed(json!(TRACEPARENT))
    );
    assert_eq!(
        up.read("greeting", None).await.unwrap(),
        json!("hello from the fixture")
    );
    assert!(matches!(
        up.read("nothing", None).await,
        Err(UpstreamError::NotFound(_))
    ));
    let refused = run(up, call("echo", json!("not an object"))).await.0;
    assert!(matches!(
        refused,
        Err(UpstreamError::Refused { status: 400, .. })
    ));

    counts_with_progress(up).await;
    a_count_is_cancelled(up).await;
    an_added_tool_is_news(up).await;
}

async fn counts_with_progress(up: &McpUpstream) {
    let (ended, updates) = run(up, call("count", json!({"to": 3, "delay_ms": 20}))).await;
    assert_eq!(ended.unwrap(), Outcome::Completed(json!("counted to 3")));
    let expected: Vec<Update> = (1..=3)
        .map(|i| {
            Update::Progress(json!({"progress": i, "total": 3, "message": format!("step {i}")}))
        })
        .collect();
    assert_eq!(updates, expected);
}

async fn a_count_is_cancelled(up: &McpUpstream) {
    let (tx, mut rx) = mpsc::channel(64);
    let cancel = CancellationToken::new();
    let counting = up.call(
        call("count", json!({"to": 100, "delay_ms": 50})),
        tx,
        cancel.clone(),
    );
    let cancelling = async {
        let first = tokio::time::timeout(WAIT, rx.recv()).await.unwrap();
        assert!(matches!(first, Some(Update::Progress(_))));
        cancel.cancel();
        Instant::now()
    };
    let (ended, cancelled_at) = tokio::join!(counting, cancelling);
    assert_eq!(ended.unwrap(), Outcome::Cancelled);
    assert!(cancelled_at.elapsed() < Duration::from_millis(500));
    // The connection goes on.
    assert_eq!(
        outcome(up, "echo", json!({"text": "after"})).await,
        Outcome::Completed(json!("after"))
    );
}

async fn an_added_tool_is_news(up: &McpUpstream) {
    let added = outcome(up, "add_tool", json!({"name": "zed"})).await;
    assert_eq!(added, Outcome::Completed(json!("added zed")));
    let change = tokio::time::timeout(WAIT, up.changed())
        .await
        .expect("no list_changed");
    assert_eq!(change, Change::Lists);
    let offer = up.offer().await.unwrap();
    assert!(offer.actions.iter().any(|a| a.name == "zed"));
    assert_eq!(
        outcome(up, "zed", json!({})).await,
        Outcome::Completed(json!("I am zed"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_over_stdio_then_its_death_is_news() {
    let up = McpUpstream::new(&stdio_config()).unwrap();
    assert_eq!(
        (up.protocol(), up.target().contains("mcp_server.py")),
        ("mcp", true)
    );
    exercise(&up).await;
    assert_eq!(up.protocol_version().as_deref(), Some("2025-11-25"));

    let pid = up.child_pid().expect("a child").to_string();
    Command::new("kill")
        .args(["-9", &pid])
        .status()
        .await
        .unwrap();
    let Change::Lost(reason) = tokio::time::timeout(WAIT, up.changed()).await.unwrap() else {
        panic!("no loss");
    };
    assert!(
        reason.contains("exited") && reason.contains('9'),
        "{reason}"
    );
    assert!(matches!(
        up.probe().await,
        Err(UpstreamError::Unreachable(_))
    ));

    // Connected again: a new child.
    up.connect().await.unwrap();
    assert_ne!(up.child_pid().unwrap().to_string(), pid);
    up.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_over_streamable_http() {
    let server = python_http().await;
    let up = McpUpstream::new(&ImportConfig {
        url: Some(server.url.clone()),
        ..config()
    })
    .unwrap();
    exercise(&up).await;
    // The SDK serves both eras: the stateless one is preferred.
    assert_eq!(up.protocol_version().as_deref(), Some("2026-07-28"));
    up.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_over_streamable_http() {
    let server = node_http().await;
    let up = McpUpstream::new(&ImportConfig {
        url: Some(server.url.clone()),
        ..config()
    })
    .unwrap();
    exercise(&up).await;
    // SDK 1.32.2 knows no server/discover: the handshake it is.
    assert_eq!(up.protocol_version().as_deref(), Some("2025-11-25"));
    up.close().await;
    // The session was deleted: a stale connection would now be refused.
    assert!(matches!(
        up.probe().await,
        Err(UpstreamError::Unreachable(_))
    ));
}

/// Past `max_message_bytes` a call fails (`TooLarge`), the connection
/// goes on; a call gets no longer than `timeout_ms` since its last sign
/// of life; `close` stops the child.
pub(super) async fn bounds(config: ImportConfig) {
    let up = McpUpstream::new(&config).unwrap();
    tokio::time::timeout(WAIT, up.connect())
        .await
        .unwrap()
        .unwrap();
    let big = "x".repeat(64 * 1024);
    let (ended, _) = run(&up, call("echo", json!({"text": big}))).await;
    assert_eq!(ended, Err(UpstreamError::TooLarge(16 * 1024)));
    assert_eq!(
        outcome(&up, "echo", json!({"text": "small"})).await,
        Outcome::Completed(json!("small"))
    );

    // Progress every 300 ms keeps a 900 ms timeout from firing …
    let (ended, updates) = run(&up, call("count", json!({"to": 4, "delay_ms": 300}))).await;
    assert_eq!(
        (ended.unwrap(), updates.len()),
        (Outcome::Completed(json!("counted to 4")), 4)
    );
    // … silence does not.
    let started = Instant::now();
    let (ended, _) = run(&up, call("count", json!({"to": 1, "delay_ms": 5000}))).await;
    assert_eq!(ended, Err(UpstreamError::Timeout(900)));
    assert!(started.elapsed() < Duration::from_secs(3));

    let pid = up.child_pid();
    up.close().await;
    if let Some(pid) = pid {
        let mut probe = Command::new("kill");
        probe
            .args(["-0", &pid.to_string()])
            .stderr(std::process::Stdio::null());
        let alive = probe.status().await.unwrap();
        assert!(!alive.success(), "the child outlived close");
    }
}

pub(super) fn bounded(config: ImportConfig) -> ImportConfig {
    ImportConfig {
        max_message_bytes: 16 * 1024,
        timeout_ms: 900,
        ..config
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_over_stdio() {
    bounds(bounded(stdio_config())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_over_streamable_http() {
    let server = node_http().await;
    let url = Some(server.url.clone());
    bounds(bounded(ImportConfig { url, ..config() })).await;
}

#[tokio::test]
async fn a_server_that_is_not_there_is_unreachable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    drop(listener);
    let up = McpUpstream::new(&ImportConfig {
        url: Some(url),
        ..config()
    })
    .unwrap();
    assert!(matches!(
        up.connect().await,
        Err(UpstreamError::Unreachable(_))
    ));
    let missing = ImportConfig {
        command: vec!["/nonexistent/mcp-server".into()],
        ..config()
    };
    let up = McpUpstream::new(&missing).unwrap();
    assert!(matches!(
        up.connect().await,
        Err(UpstreamError::Unreachable(_))
    ));
}
