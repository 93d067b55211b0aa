//! [`A2aUpstream`] against a real a2a-sdk 1.3.0 agent:
//! `tests/imports/a2a_agent.py`, one per test, on 127.0.0.1.

use std::process::Stdio;
use std::time::{Duration, Instant};

use hyper::header::{HeaderName, CONTENT_TYPE};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::imports::http::HttpClient;

/// The fixture agent; killed when dropped (it also exits when its stdin
/// closes, should the test process die first).
struct Agent {
    _child: Child,
    /// Held open: a closed pipe would fail the agent's next print.
    _stdout: BufReader<ChildStdout>,
    port: u16,
}

impl Agent {
    async fn start(args: &[&str]) -> Agent {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/imports/a2a_agent.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut line = String::new();
        let mut stdout = BufReader::new(stdout);
        tokio::time::timeout(Duration::from_secs(30), stdout.read_line(&mut line))
            .await
            .expect("the agent starts")
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("LISTENING ")
            .and_then(|p| p.parse().ok());
        Agent {
            _child: child,
            _stdout: stdout,
            port: port.unwrap_or_else(|| panic!("not LISTENING: {line:?}")),
        }
    }

    fn config(&self) -> ImportConfig {
        ImportConfig {
            name: "weather".into(),
            card_url: Some(self.card_url()),
            timeout_ms: 10_000,
            ..ImportConfig::default()
        }
    }

    fn card_url(&self) -> String {
        format!("http://127.0.0.1:{}/.well-known/agent-card.json", self.port)
    }

    /// A 1.0 JSON-RPC request straight to the agent (to check on it).
    async fn ask(&self, method: &str, params: Value) -> Value {
        let http = HttpClient::new(&ImportConfig::default()).unwrap();
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let headers = [
            (CONTENT_TYPE, "application/json".to_owned()),
            (HeaderName::from_static("a2a-version"), "1.0".to_owned()),
        ];
        let url = format!("http://127.0.0.1:{}/", self.port);
        let response = http.request(
            hyper::Method::POST,
            &url,
            &headers,
            Some(body.to_string().into_bytes()),
        );
        let response = response.await.unwrap().json_capped(1 << 20).await.unwrap();
        response["result"].clone()
    }
}

fn call(action: &str, input: Option<Value>) -> Call {
    Call {
        action: action.into(),
        input,
        id: format!("route-{action}"),
        stream: true,
        trace: None,
    }
}

/// Runs a call to its end; its outcome and every update it passed on.
async fn run(upstream: &A2aUpstream, call: Call) -> (Result<Outcome, UpstreamError>, Vec<Update>) {
    let (tx, mut rx) = mpsc::channel(64);
    let outcome = upstream.call(call, tx, CancellationToken::new()).await;
    let mut updates = Vec::new();
    while let Ok(update) = rx.try_recv() {
        updates.push(update);
    }
    (outcome, updates)
}

fn working(step: &str) -> Update {
    Update::Progress(json!({"state": "working", "message": step}))
}

fn text(chunk: &str) -> Update {
    Update::Chunk {
        data: json!(chunk),
        content_type: Some("text/plain".into()),
        base64: false,
    }
}

#[tokio::test]
async fn connect_offers_the_cards_skills() {
    let agent = Agent::start(&[]).await;
    let upstream = A2aUpstream::new(&agent.config()).unwrap();
    assert_eq!(upstream.protocol(), "a2a");
    assert_eq!(upstream.target(), agent.card_url());
    let offer = upstream.connect().await.unwrap();
    assert_eq!(offer.title, "Fixture Weather Agent");
    assert_eq!(offer.version.as_deref(), Some("1.2.3"));
    let names: Vec<_> = offer.actions.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["forecast", "fail", "ask", "slow"]);
    assert_eq!(offer.extra["lmos:protocol"], "a2a");
    assert_eq!(offer.extra["lmos:agentCard"], agent.card_url());
    assert_eq!(offer.actions[0].extra["lmos:tags"], json!(["weather"]));
    assert_eq!(upstream.offer().await.unwrap(), offer);
    upstream.probe().await.unwrap();
    assert!(matches!(
        upstream.read("anything", None).await,
        Err(UpstreamError::NotFound(_))
    ));
}

#[tokio::test]
async fn forecast_streams_progress_and_chunks_then_completes() {
    for args in [&[][..], &["--v03"][..]] {
        let agent = Agent::start(args).await;
        let upstream = A2aUpstream::new(&agent.config()).unwrap();
        upstream.connect().await.unwrap();
        let (outcome, updates) = run(&upstream, call("forecast", Some(json!("Oslo")))).await;
        assert_eq!(
            outcome,
            Ok(Outcome::Completed(json!("The weather in Oslo is sunny."))),
            "{args:?}"
        );
        let expected = [
            working("step 1"),
            working("step 2"),
            working("step 3"),
            text("The weather "),
            text("in Oslo "),
            text("is sunny."),
        ];
        assert_eq!(updates, expected, "{args:?}");
    }
}

#[tokio::test]
async fn an_agent_without_streaming_gets_a_blocking_send() {
    for args in [&["--no-streaming"][..], &["--no-streaming", "--v03"][..]] {
        let agent = Agent::start(args).await;
        let upstream = A2aUpstream::new(&agent.config()).unwrap();
        upstream.connect().await.unwrap();
        let (outcome, updates) = run(&upstream, call("forecast", None)).await;
        assert_eq!(
            outcome,
            Ok(Outcome::Completed(json!("The weather in Oslo is sunny."))),
            "{args:?}"
        );
        assert_eq!(updates, [], "{args:?}");
        let (outcome, _) = run(&upstream, call("fail", None)).await;
        assert!(
            matches!(outcome, Ok(Outcome::Failed(_))),
            "{args:?} {outcome:?}"
        );
    }
}

#[tokio::test]
async fn fail_fails_with_the_agents_message() {
    let agent = Agent::start(&[]).await;
    let upstream = A2aUpstream::new(&agent.config()).unwrap();
    let (outcome, _) = run(&upstream, call("fail", None)).await;
    let expected = json!({"error": "the agent failed on purpose", "state": "failed"});
    assert_eq!(outcome, Ok(Outcome::Failed(expected)));
}

#[tokio::test]
async fn ask_asks_and_the_answer_continues_the_task() {
    for args in [&[][..], &["--v03"][..]] {
        let agent = Agent::start(args).await;
        let upstream = A2aUpstream::new(&agent.config()).unwrap();
        let (outcome, _) = run(&upstream, call("ask", Some(json!({"where": "?"})))).await;
        let Ok(Outcome::Completed(asked)) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(asked["state"], "input-required");
        assert_eq!(asked["message"], "Which city?");
        let (task, context) = (asked["taskId"].clone(), asked["contextId"].clone());
        assert!(task.is_string() && context.is_string(), "{asked}");
        let answer = json!({"taskId": task, "contextId": context, "input": "Bergen"});
        let (outcome, _) = run(&upstream, call("ask", Some(answer))).await;
        assert_eq!(
            outcome,
            Ok(Outcome::Completed(json!("Forecast for Bergen: sunny."))),
            "{args:?}"
        );
    }
}

#[tokio::test]
async fn a_cancelled_call_cancels_the_agents_task() {
    for args in [&[][..], &["--v03"][..]] {
        let agent = Agent::start(args).await;
        let upstream = A2aUpstream::new(&agent.config()).unwrap();
        let (tx, mut rx) = mpsc::channel(64);
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        let stopper = async move {
            // Cancelled once it runs: after its first progress.
            let first = rx.recv().await;
            stop.cancel();
            first
        };
        let started = Instant::now();
        let (outcome, first) = tokio::join!(upstream.call(call("slow", None), tx, cancel), stopper);
        assert_eq!(outcome, Ok(Outcome::Cancelled), "{args:?}");
        assert!(matches!(first, Some(Update::Progress(_))), "{first:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        let tasks = agent.ask("ListTasks", json!({})).await;
        let states: Vec<_> = tasks["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["status"]["state"].clone())
            .collect();
        assert_eq!(states, [json!("TASK_STATE_CANCELED")], "{args:?}");
    }
}

#[tokio::test]
async fn a_call_cancelled_at_once_still_cancels_the_task() {
    let agent = Agent::start(&[]).await;
    let upstream = A2aUpstream::new(&agent.config()).unwrap();
    upstream.connect().await.unwrap();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let (tx, _rx) = mpsc::channel(64);
    assert_eq!(
        upstream.call(call("slow", None), tx, cancel).await,
        Ok(Outcome::Cancelled)
    );
    // The request went out (the token fired before it was answered): the
    // task the agent started was found on its stream and cancelled.
    let tasks = agent.ask("ListTasks", json!({})).await;
    let states: Vec<_> = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"]["state"].clone())
        .collect();
    assert_eq!(states, [json!("TASK_STATE_CANCELED")]);
}

#[tokio::test]
async fn the_traceparent_reaches_the_agent_as_a_header() {
    let agent = Agent::start(&[]).await;
    let upstream = A2aUpstream::new(&agent.config()).unwrap();
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let trace = TraceContext {
        traceparent: traceparent.into(),
        tracestate: Some("k=v".into()),
    };
    let mut whoami = call("whoami", None);
    whoami.trace = Some(trace);
    // whoami answers with a Message, not a task.
    let (outcome, _) = run(&upstream, whoami).await;
    assert_eq!(outcome, Ok(Outcome::Completed(json!(traceparent))));
    let (outcome, _) = run(&upstream, call("whoami", None)).await;
    assert_eq!(outcome, Ok(Outcome::Completed(json!("none"))));
}

#[tokio::test]
async fn an_oversize_event_fails_that_call_only() {
    let agent = Agent::start(&[]).await;
    let config = ImportConfig {
        max_message_bytes: 16 * 1024,
        ..agent.config()
    };
    let upstream = A2aUpstream::new(&config).unwrap();
    upstream.connect().await.unwrap();
    let (outcome, _) = run(&upstream, call("big", None)).await;
    assert_eq!(outcome, Err(UpstreamError::TooLarge(16 * 1024)));
    let (outcome, _) = run(&upstream, call("forecast", None)).await;
    assert_eq!(
        outcome,
        Ok(Outcome::Completed(json!("The weather in Oslo is sunny.")))
    );
}

#[tokio::test]
async fn an_agent_that_went_away_is_unreachable() {
    let agent = Agent::start(&[]).await;
    let upstream = A2aUpstream::new(&agent.config()).unwrap();
    upstream.connect().await.unwrap();
    drop(agent);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(matches!(
        upstream.probe().await,
        Err(UpstreamError::Unreachable(_))
    ));
    let (outcome, _) = run(&upstream, call("forecast", None)).await;
    assert!(
        matches!(outcome, Err(UpstreamError::Unreachable(_))),
        "{outcome:?}"
    );
}
