//! [`A2aUpstream`] against a scripted agent that misbehaves: silence,
//! garbage, floods, early ends, HTTP errors, a card that changes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;

/// How the scripted agent answers a POST.
#[derive(Clone)]
enum Reply {
    /// An event stream of these `data:` payloads, then closed (or held
    /// open, silent, when `hold`).
    Sse(Vec<String>, bool),
    Json(Value),
    Status(u16),
}

type Answer = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

/// A one-request-per-connection HTTP agent: the card on GET, `answer` on
/// POST; it records the JSON-RPC methods it was sent.
struct Scripted {
    port: u16,
    card: Arc<Mutex<Value>>,
    methods: Arc<Mutex<Vec<String>>>,
}

impl Scripted {
    async fn start(answer: Answer) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let card = Arc::new(Mutex::new(card(port, true)));
        let methods = Arc::new(Mutex::new(Vec::new()));
        let (c, m) = (card.clone(), methods.clone());
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, c.clone(), m.clone(), answer.clone()));
            }
        });
        Scripted {
            port,
            card,
            methods,
        }
    }

    fn config(&self) -> ImportConfig {
        ImportConfig {
            name: "scripted".into(),
            card_url: Some(format!("http://127.0.0.1:{}/card", self.port)),
            timeout_ms: 2_000,
            ..ImportConfig::default()
        }
    }

    fn methods(&self) -> Vec<String> {
        self.methods.lock().unwrap().clone()
    }
}

fn card(port: u16, streaming: bool) -> Value {
    json!({
        "name": "Scripted", "version": "1",
        "supportedInterfaces": [{"url": format!("http://127.0.0.1:{port}/rpc"),
            "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": streaming},
        "skills": [{"id": "go", "name": "Go"}]
    })
}

async fn serve(
    mut socket: TcpStream,
    card: Arc<Mutex<Value>>,
    methods: Arc<Mutex<Vec<String>>>,
    answer: Answer,
) {
    let mut seen = Vec::new();
    let mut buf = [0; 8192];
    let head_end = loop {
        let Ok(n) = socket.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        seen.extend_from_slice(&buf[..n]);
        if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&seen[..head_end]).to_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    while seen.len() < head_end + length {
        let Ok(n) = socket.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        seen.extend_from_slice(&buf[..n]);
    }
    let reply = if head.starts_with("get") {
        Reply::Json(card.lock().unwrap().clone())
    } else {
        let request: Value = serde_json::from_slice(&seen[head_end..]).unwrap_or(Value::Null);
        methods
            .lock()
            .unwrap()
            .push(request["method"].as_str().unwrap_or("").to_owned());
        answer(&request)
    };
    let _ = write(&mut socket, reply).await;
}

async fn write(socket: &mut TcpStream, reply: Reply) -> std::io::Result<()> {
    match reply {
        Reply::Json(value) => {
            let body = value.to_string();
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(body.as_bytes()).await
        }
        Reply::Status(status) => {
            let head =
                format!("HTTP/1.1 {status} Nope\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            socket.write_all(head.as_bytes()).await
        }
        Reply::Sse(events, hold) => {
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            socket.write_all(head.as_bytes()).await?;
            for event in events {
                socket
                    .write_all(format!("data: {event}\n\n").as_bytes())
                    .await?;
            }
            if hold {
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            Ok(())
        }
    }
}

fn rpc(result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "result": result}).to_string()
}

fn task(state: &str) -> Value {
    json!({"task": {"id": "t1", "contextId": "c1", "status": {"state": state}}})
}

fn working(i: usize) -> String {
    rpc(
        json!({"statusUpdate": {"taskId": "t1", "status": {"state": "TASK_STATE_WORKING",
        "message": {"parts": [{"text": format!("step {i}")}]}}}}),
    )
}

fn completed() -> String {
    rpc(
        json!({"statusUpdate": {"taskId": "t1", "status": {"state": "TASK_STATE_COMPLETED",
        "message": {"parts": [{"text": "done"}]}}}}),
    )
}

async fn go(upstream: &A2aUpstream) -> (Result<Outcome, UpstreamError>, Vec<Update>) {
    let (tx, mut rx) = mpsc::channel(10_000);
    let call = Call {
        action: "go".into(),
        input: None,
        id: "r".into(),
        stream: true,
        trace: None,
    };
    let outcome = upstream.call(call, tx, CancellationToken::new()).await;
    let mut updates = Vec::new();
    while let Ok(update) = rx.try_recv() {
        updates.push(update);
    }
    (outcome, updates)
}

fn always(reply: Reply) -> Answer {
    Arc::new(move |_| reply.clone())
}

#[tokio::test]
async fn a_silent_stream_times_out_and_the_task_is_cancelled() {
    let events = vec![rpc(task("TASK_STATE_SUBMITTED"))];
    let agent = Scripted::start(Arc::new(move |request: &Value| {
        match request["method"].as_str() {
            Some("SendStreamingMessage") => Reply::Sse(events.clone(), true),
            _ => Reply::Json(json!({"jsonrpc": "2.0", "id": 1, "result": {"id": "t1"}})),
        }
    }))
    .await;
    let config = ImportConfig {
        timeout_ms: 300,
        ..agent.config()
    };
    let upstream = A2aUpstream::new(&config).unwrap();
    assert_eq!(go(&upstream).await.0, Err(UpstreamError::Timeout(300)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(agent.methods(), ["SendStreamingMessage", "CancelTask"]);
}

#[tokio::test]
async fn garbage_on_the_stream_fails_the_call() {
    for garbage in [
        "not json",
        "[1,2]",
        r#"{"jsonrpc":"2.0","id":1,"result":{"surprise":1}}"#,
    ] {
        let agent = Scripted::start(always(Reply::Sse(vec![garbage.to_owned()], false))).await;
        let upstream = A2aUpstream::new(&agent.config()).unwrap();
        let (outcome, _) = go(&upstream).await;
        assert!(
            matches!(outcome, Err(UpstreamError::Malformed(_))),
            "{garbage}: {outcome:?}"
        );
    }
}

#[tokio::test]
async fn a_progress_flood_is_cut_to_the_rate_but_the_answer_arrives() {
    let mut events: Vec<String> = (0..2_000).map(working).collect();
    events.push(completed());
    let agent = Scripted::start(always(Reply::Sse(events, false))).await;
    let config = ImportConfig {
        max_updates_per_second: 5,
        ..agent.config()
    };
    let upstream = A2aUpstream::new(&config).unwrap();
    let (outcome, updates) = go(&upstream).await;
    assert_eq!(outcome, Ok(Outcome::Completed(json!("done"))));
    // A fixed one-second window: 5, or 10 should the flood straddle two.
    assert!((5..=10).contains(&updates.len()), "{}", updates.len());
}

#[tokio::test]
async fn a_stream_that_ends_early_is_followed_by_get_task() {
    let agent = Scripted::start(Arc::new(|request: &Value| {
        match request["method"].as_str() {
            Some("SendStreamingMessage") => {
                Reply::Sse(vec![rpc(task("TASK_STATE_WORKING"))], false)
            }
            _ => Reply::Json(json!({"jsonrpc": "2.0", "id": 1, "result": {"id": "t1",
            "status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [{"artifactId": "a", "parts": [{"text": "polled"}]}]}})),
        }
    }))
    .await;
    let upstream = A2aUpstream::new(&agent.config()).unwrap();
    assert_eq!(
        go(&upstream).await.0,
        Ok(Outcome::Completed(json!("polled")))
    );
    assert_eq!(agent.methods(), ["SendStreamingMessage", "GetTask"]);
    // Without a task to ask about, it is an error.
    let agent = Scripted::start(always(Reply::Sse(vec![], false))).await;
    let upstream = A2aUpstream::new(&agent.config()).unwrap();
    assert!(matches!(
        go(&upstream).await.0,
        Err(UpstreamError::Malformed(_))
    ));
}

#[tokio::test]
async fn errors_become_refusals_with_their_status() {
    let error = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32009, "message": "version"}});
    let agent = Scripted::start(always(Reply::Json(error))).await;
    let upstream = A2aUpstream::new(&agent.config()).unwrap();
    assert!(matches!(
        go(&upstream).await.0,
        Err(UpstreamError::Refused { status: 502, .. })
    ));
    for (http, lmos) in [(401, 401), (404, 404), (500, 502), (503, 502)] {
        let agent = Scripted::start(always(Reply::Status(http))).await;
        let upstream = A2aUpstream::new(&agent.config()).unwrap();
        let (outcome, _) = go(&upstream).await;
        assert!(
            matches!(outcome, Err(UpstreamError::Refused { status, .. }) if status == lmos),
            "{http}: {outcome:?}"
        );
    }
}

#[tokio::test]
async fn a_blocking_agent_is_polled_until_its_task_ends() {
    let polls = Arc::new(Mutex::new(0));
    let seen = polls.clone();
    let agent = Scripted::start(Arc::new(move |request: &Value| {
        let state = match request["method"].as_str() {
            Some("SendMessage") => "TASK_STATE_SUBMITTED",
            _ => {
                let mut polls = seen.lock().unwrap();
                *polls += 1;
                if *polls < 2 {
                    "TASK_STATE_WORKING"
                } else {
                    "TASK_STATE_FAILED"
                }
            }
        };
        Reply::Json(json!({"jsonrpc": "2.0", "id": 1, "result": task(state)}))
    }))
    .await;
    *agent.card.lock().unwrap() = card(agent.port, false);
    let upstream = A2aUpstream::new(&agent.config()).unwrap();
    let (outcome, _) = go(&upstream).await;
    let failed = json!({"error": "the agent's task ended failed", "state": "failed"});
    assert_eq!(outcome, Ok(Outcome::Failed(failed)));
    assert_eq!(agent.methods(), ["SendMessage", "GetTask", "GetTask"]);
}

#[tokio::test]
async fn a_probe_notices_a_changed_card() {
    let agent = Scripted::start(always(Reply::Status(500))).await;
    let upstream = A2aUpstream::new(&agent.config()).unwrap();
    let offer = upstream.connect().await.unwrap();
    assert_eq!(offer.actions.len(), 1);
    upstream.probe().await.unwrap();
    let quiet = tokio::time::timeout(Duration::from_millis(100), upstream.changed()).await;
    assert!(quiet.is_err(), "no change yet");
    let mut changed = card(agent.port, true);
    changed["skills"] = json!([{"id": "go"}, {"id": "stop"}]);
    *agent.card.lock().unwrap() = changed;
    upstream.probe().await.unwrap();
    let news = tokio::time::timeout(Duration::from_secs(1), upstream.changed()).await;
    assert_eq!(news, Ok(Change::Lists));
    assert_eq!(upstream.offer().await.unwrap().actions.len(), 2);
    // A card grown past max_message_bytes fails the probe.
    let small = ImportConfig {
        max_message_bytes: 64,
        ..agent.config()
    };
    let upstream = A2aUpstream::new(&small).unwrap();
    assert_eq!(upstream.probe().await, Err(UpstreamError::TooLarge(64)));
}
