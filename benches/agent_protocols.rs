//! Round trips of one instant action over the four ways in, in the same
//! run: an LMOS `invokeAction` over the WebSocket, `POST` on the HTTP
//! binding, an MCP `tools/call` (JSON answer, no progress token) and an A2A
//! `SendMessage`. The agent (a WebSocket agent in the same process) answers
//! every invocation at once with `completed`, so the figures are the
//! sidecar's and the protocol's cost, not the agent's.
//!
//! `cargo bench --bench agent_protocols`; settings: AGENT_CALLS per row
//! (2000, after 200 unmeasured), AGENT_ROUNDS rounds of the four (3), one
//! call in flight at a time, each client on one keep-alive connection.
//! Columns: round trips per second, p50 and p99 in microseconds.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use lmos_testkit::{lmos, test_config, urlencode, TestSidecar};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const THING: &str = "urn:bench:echo";

fn td() -> Value {
    json!({
        "@context": ["https://www.w3.org/2022/wot/td/v1.1", {"lmos": "https://eclipse.dev/lmos/protocol/v1"}],
        "id": THING, "title": "Echo", "@type": "lmos:Agent",
        "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}}, "security": "nosec_sc",
        "actions": {"echo": {
            "description": "Answers with its input's text at once.",
            "input": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            "output": {"type": "string"},
            "synchronous": true,
            "forms": [{"href": "https://echo.example/echo"}],
        }},
    })
}

/// A keep-alive HTTP/1.1 connection for JSON requests and answers with a
/// `Content-Length`.
struct Http {
    stream: BufReader<TcpStream>,
    host: String,
}

impl Http {
    async fn connect(addr: std::net::SocketAddr) -> Result<Http> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        Ok(Http {
            stream: BufReader::new(tcp),
            host: addr.to_string(),
        })
    }

    async fn post(
        &mut self,
        path: &str,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> Result<(Vec<(String, String)>, Value)> {
        let body = body.to_string();
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            self.host,
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        head.push_str(&body);
        self.stream.get_mut().write_all(head.as_bytes()).await?;
        let mut status = String::new();
        self.stream.read_line(&mut status).await?;
        if !status.starts_with("HTTP/1.1 200") {
            bail!("answered {status}");
        }
        let mut headers = Vec::new();
        let mut length = 0;
        loop {
            let mut line = String::new();
            self.stream.read_line(&mut line).await?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (k, v) = line.split_once(':').context("a header")?;
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse()?;
            }
            headers.push((k.to_ascii_lowercase(), v.trim().to_owned()));
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await?;
        Ok((headers, serde_json::from_slice(&body)?))
    }
}

/// One way in: makes one call and checks its answer.
enum Way {
    WebSocket(Box<lmos_testkit::WsClient>),
    Binding(Http),
    Mcp(Http, String),
    A2a(Http),
}

impl Way {
    fn name(&self) -> &'static str {
        match self {
            Way::WebSocket(_) => "WebSocket invokeAction",
            Way::Binding(_) => "HTTP binding POST",
            Way::Mcp(..) => "MCP tools/call",
            Way::A2a(_) => "A2A SendMessage",
        }
    }

    async fn call(&mut self, n: usize) -> Result<()> {
        let text = format!("call {n}");
        let ok = match self {
            Way::WebSocket(ws) => {
                let c = format!("c{n}");
                ws.send(lmos(
                    THING,
                    "invokeAction",
                    json!({"action": "echo", "input": {"text": text}, "correlationID": c}),
                ))
                .await;
                loop {
                    let m = ws.recv().await;
                    if m["correlationID"] == c && m["status"] == "completed" {
                        break m["output"] == text;
                    }
                }
            }
            Way::Binding(http) => {
                let path = format!("/things/{}/actions/echo", urlencode(THING));
                http.post(&path, &[], &json!({"text": text})).await?.1 == json!(text)
            }
            Way::Mcp(http, session) => {
                let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}});
                let (_, answer) = http
                    .post("/mcp", &[("Mcp-Session-Id", session)], &call)
                    .await?;
                answer["result"]["content"][0]["text"] == json!(text)
            }
            Way::A2a(http) => {
                let path = format!("/a2a/{}", urlencode(THING));
                let send = json!({"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": {
                    "messageId": format!("m{n}"), "role": "ROLE_USER", "parts": [{"data": {"text": text}}]}}});
                let (_, answer) = http.post(&path, &[], &send).await?;
                answer["result"]["task"]["artifacts"][0]["parts"][0]["text"] == json!(text)
            }
        };
        if !ok {
            bail!("{}: wrong answer to call {n}", self.name());
        }
        Ok(())
    }
}

async fn ways(sidecar: &TestSidecar) -> Result<Vec<Way>> {
    let mut mcp = Http::connect(sidecar.http).await?;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}});
    let (headers, _) = mcp.post("/mcp", &[], &init).await?;
    let session = headers
        .into_iter()
        .find(|(k, _)| k == "mcp-session-id")
        .context("a session")?
        .1;
    Ok(vec![
        Way::WebSocket(Box::new(sidecar.ws().await)),
        Way::Binding(Http::connect(sidecar.http).await?),
        Way::Mcp(mcp, session),
        Way::A2a(Http::connect(sidecar.http).await?),
    ])
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() -> Result<()> {
    let calls = lmos_testkit::bench::env_or("AGENT_CALLS", 2000);
    let rounds = lmos_testkit::bench::env_or("AGENT_ROUNDS", 3);
    let sidecar = TestSidecar::start_with(test_config()).await;
    let mut agent = sidecar.ws_agent(THING).await;
    agent.send(td()).await;
    let serve = tokio::spawn(async move {
        loop {
            let m = agent.recv().await;
            if m["messageType"] == "invokeAction" {
                let done = lmos(
                    THING,
                    "actionStatus",
                    json!({
                    "action": "echo", "status": "completed", "output": m["input"]["text"],
                    "correlationID": m["correlationID"]}),
                );
                agent.send(done).await;
            }
        }
    });
    lmos_testkit::wait_for_td(&sidecar, THING).await;
    let mut ways = ways(&sidecar).await?;
    println!("| way in | round trips/s | p50 µs | p99 µs |");
    println!("|---|---|---|---|");
    let mut n = 0;
    for _ in 0..rounds {
        for way in &mut ways {
            for _ in 0..200 {
                n += 1;
                way.call(n).await?;
            }
            let mut latencies = Vec::with_capacity(calls);
            let start = Instant::now();
            for _ in 0..calls {
                n += 1;
                let t = Instant::now();
                way.call(n).await?;
                latencies.push(t.elapsed().as_micros() as u64);
            }
            let rate = calls as f64 / start.elapsed().as_secs_f64();
            latencies.sort_unstable();
            println!(
                "| {} | {rate:.0} | {} | {} |",
                way.name(),
                percentile(&latencies, 0.5),
                percentile(&latencies, 0.99)
            );
        }
    }
    serve.abort();
    sidecar.stop().await;
    Ok(())
}
