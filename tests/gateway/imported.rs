//! An imported upstream as its Thing's agent, with a scripted upstream in
//! the test (the real MCP and A2A servers are in tests/interop/imports.rs):
//! what the bridge does with the router's requests, the upstream's answers,
//! its going away, its silence.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lmos_sidecar::config::ImportConfig;
use lmos_sidecar::imports::upstream::{
    ActionOffer, Call, Change, Offer, Outcome, PropertyOffer, Update, Upstream, UpstreamError,
};
use lmos_sidecar::telemetry::metrics::Metrics;
use lmos_sidecar::telemetry::TraceContext;
use lmos_testkit::{http, lmos, wait_for_td, TestSidecar, WsClient};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Mutex};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const THING: &str = "urn:lmos:import:scripted";

/// Answers as the test tells it; `down` makes it unreachable.
#[derive(Clone)]
struct Scripted {
    down: Arc<AtomicBool>,
    news: Arc<Mutex<mpsc::UnboundedReceiver<Change>>>,
}

fn offer() -> Offer {
    let action = |name: &str| ActionOffer {
        name: name.into(),
        ..Default::default()
    };
    Offer {
        title: "Scripted".into(),
        actions: vec![
            action("add"),
            action("slow"),
            action("silent"),
            action("failing"),
        ],
        properties: vec![PropertyOffer {
            name: "greeting".into(),
            schema: json!({"type": "string"}),
            ..Default::default()
        }],
        ..Default::default()
    }
}

impl Upstream for Scripted {
    fn protocol(&self) -> &'static str {
        "mcp"
    }

    fn target(&self) -> &str {
        "scripted://test"
    }

    async fn connect(&self) -> Result<Offer, UpstreamError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(UpstreamError::Unreachable("connection refused".into()));
        }
        Ok(offer())
    }

    async fn offer(&self) -> Result<Offer, UpstreamError> {
        let mut o = offer();
        o.actions.push(ActionOffer {
            name: "added".into(),
            ..Default::default()
        });
        Ok(o)
    }

    async fn call(
        &self,
        call: Call,
        updates: mpsc::Sender<Update>,
        cancel: CancellationToken,
    ) -> Result<Outcome, UpstreamError> {
        match call.action.as_str() {
            "add" => {
                let input = call.input.unwrap_or_default();
                let sum = input["a"].as_i64().unwrap_or(0) + input["b"].as_i64().unwrap_or(0);
                Ok(Outcome::Completed(json!({"sum": sum})))
            }
            "slow" => loop {
                let _ = updates.try_send(Update::Progress(json!({"progress": 1})));
                tokio::select! {
                    _ = cancel.cancelled() => return Ok(Outcome::Cancelled),
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            },
            "failing" => Ok(Outcome::Failed(json!({"error": "no luck"}))),
            _ => Err(UpstreamError::Timeout(1000)),
        }
    }

    async fn read(
        &self,
        _property: &str,
        _trace: Option<TraceContext>,
    ) -> Result<Value, UpstreamError> {
        Ok(json!("hello"))
    }

    async fn probe(&self) -> Result<(), UpstreamError> {
        Ok(())
    }

    async fn changed(&self) -> Change {
        match self.news.lock().await.recv().await {
            Some(change) => change,
            None => std::future::pending().await,
        }
    }

    async fn close(&self) {}
}

struct Harness {
    sidecar: TestSidecar,
    down: Arc<AtomicBool>,
    news: mpsc::UnboundedSender<Change>,
    stop: CancellationToken,
}

async fn harness() -> Harness {
    let sidecar = TestSidecar::start().await;
    let (news, news_rx) = mpsc::unbounded_channel();
    let down = Arc::new(AtomicBool::new(false));
    let upstream = Scripted {
        down: down.clone(),
        news: Arc::new(Mutex::new(news_rx)),
    };
    let import = ImportConfig {
        name: "scripted".into(),
        url: Some("http://127.0.0.1:1/mcp".into()),
        retry_min_ms: 100,
        retry_max_ms: 200,
        ..Default::default()
    };
    let stop = CancellationToken::new();
    let tracker = TaskTracker::new();
    lmos_sidecar::imports::serve(
        &tracker,
        &sidecar.gateway,
        &Metrics::new(),
        &import,
        upstream,
        stop.clone(),
    );
    wait_for_td(&sidecar, THING).await;
    Harness {
        sidecar,
        down,
        news,
        stop,
    }
}

/// The next message for `correlation`, skipping others.
async fn next_for(ws: &mut WsClient, correlation: &str) -> Value {
    loop {
        let m = ws.recv().await;
        if m["correlationID"] == correlation {
            return m;
        }
    }
}

async fn td_actions(sidecar: &TestSidecar) -> Vec<String> {
    let td = http(sidecar.http, "GET", &format!("/things/{THING}"), None, b"")
        .await
        .json();
    td["actions"]
        .as_object()
        .map(|a| a.keys().cloned().collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_call_answers_only_the_consumer_that_asked() {
    let h = harness().await;
    // The TD has the offer's affordances once the upstream is connected.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !td_actions(&h.sidecar).await.contains(&"add".to_owned()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the TD never got its actions"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut asker = h.sidecar.ws().await;
    let mut other = h.sidecar.ws().await;
    let invoke = lmos(
        THING,
        "invokeAction",
        json!({"action": "add", "input": {"a": 2, "b": 3}, "correlationID": "c1"}),
    );
    asker.send(invoke).await;
    let pending = next_for(&mut asker, "c1").await;
    assert_eq!(pending["status"], "pending", "{pending}");
    let done = next_for(&mut asker, "c1").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"], json!({"sum": 5}));
    other.assert_nothing_pending().await;
    let read = lmos(
        THING,
        "readProperty",
        json!({"name": "greeting", "correlationID": "r1"}),
    );
    asker.send(read).await;
    let reading = next_for(&mut asker, "r1").await;
    assert_eq!(reading["messageType"], "propertyReading", "{reading}");
    assert_eq!(reading["value"], "hello");
    h.stop.cancel();
}

#[tokio::test]
async fn cancel_failure_silence_and_a_changed_list() {
    let h = harness().await;
    let mut ws = h.sidecar.ws().await;
    ws.send(lmos(
        THING,
        "invokeAction",
        json!({"action": "slow", "correlationID": "s1"}),
    ))
    .await;
    assert_eq!(next_for(&mut ws, "s1").await["status"], "pending");
    assert_eq!(next_for(&mut ws, "s1").await["status"], "running");
    ws.send(lmos(
        THING,
        "cancelAction",
        json!({"action": "slow", "correlationID": "s1"}),
    ))
    .await;
    let mut last = next_for(&mut ws, "s1").await;
    while last["status"] == "running" {
        last = next_for(&mut ws, "s1").await;
    }
    assert_eq!(last["status"], "cancelled", "{last}");

    ws.send(lmos(
        THING,
        "invokeAction",
        json!({"action": "failing", "correlationID": "f1"}),
    ))
    .await;
    next_for(&mut ws, "f1").await;
    let failed = next_for(&mut ws, "f1").await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["output"]["error"], "no luck");

    ws.send(lmos(
        THING,
        "invokeAction",
        json!({"action": "silent", "correlationID": "t1"}),
    ))
    .await;
    next_for(&mut ws, "t1").await;
    let error = next_for(&mut ws, "t1").await;
    assert_eq!(error["messageType"], "error", "{error}");
    assert_eq!(error["status"], "504");
    assert!(
        error["detail"].as_str().unwrap().contains("`scripted`"),
        "{error}"
    );

    ws.send(lmos(
        THING,
        "invokeAction",
        json!({"action": "nope", "correlationID": "n1"}),
    ))
    .await;
    let error = next_for(&mut ws, "n1").await;
    assert_eq!(error["status"], "404", "{error}");

    h.news.send(Change::Lists).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !td_actions(&h.sidecar).await.contains(&"added".to_owned()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the TD was not re-published"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.stop.cancel();
}

#[tokio::test]
async fn an_upstream_that_goes_away_fails_its_calls_and_answers_503_until_it_is_back() {
    let h = harness().await;
    let mut mqtt = h.sidecar.mqtt("watcher").await;
    mqtt.subscribe(&format!("lmos/{THING}/agent/status")).await;
    let mut ws = h.sidecar.ws().await;
    ws.send(lmos(
        THING,
        "invokeAction",
        json!({"action": "slow", "correlationID": "s1"}),
    ))
    .await;
    assert_eq!(next_for(&mut ws, "s1").await["status"], "pending");
    h.down.store(true, Ordering::SeqCst);
    h.news
        .send(Change::Lost("the child exited".into()))
        .unwrap();
    let mut last = next_for(&mut ws, "s1").await;
    while last["status"] == "running" {
        last = next_for(&mut ws, "s1").await;
    }
    assert_eq!(last["status"], "failed", "{last}");
    assert!(
        last["output"]["error"]
            .as_str()
            .unwrap()
            .contains("the child exited"),
        "{last}"
    );
    let offline = loop {
        let (_, status, _) = mqtt.recv_json().await;
        if status["status"] == "offline" {
            break status;
        }
    };
    assert!(
        offline["error"].as_str().unwrap().contains("scripted"),
        "{offline}"
    );

    ws.send(lmos(
        THING,
        "invokeAction",
        json!({"action": "add", "correlationID": "a1"}),
    ))
    .await;
    let error = next_for(&mut ws, "a1").await;
    assert_eq!(error["status"], "503", "{error}");
    assert!(
        error["detail"].as_str().unwrap().contains("`scripted`"),
        "{error}"
    );

    h.down.store(false, Ordering::SeqCst);
    loop {
        let (_, status, _) = mqtt.recv_json().await;
        if status["status"] == "online" {
            assert_eq!(status["transport"], "mcp");
            break;
        }
    }
    ws.send(lmos(
        THING,
        "invokeAction",
        json!({"action": "add", "input": {"a": 1, "b": 1}, "correlationID": "a2"}),
    ))
    .await;
    next_for(&mut ws, "a2").await;
    assert_eq!(next_for(&mut ws, "a2").await["output"], json!({"sum": 2}));
    h.stop.cancel();
}
