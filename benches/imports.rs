//! An imported MCP server's trivial tool, called through the sidecar and
//! directly, in the same run: the FastMCP fixture (`tests/imports/
//! mcp_server.py http`, Streamable HTTP) and its `echo` tool, called
//! (a) by the sidecar's own MCP client (`lmos_sidecar::imports::mcp::
//! McpUpstream`) directly, so that the only difference from (b) is the bus;
//! (b) by a WebSocket consumer's `invokeAction`, through a sidecar in this
//! process that imports the same server; and, for reference, (c) by the
//! official MCP Python SDK's client (`benches/imports_sdk_client.py`).
//!
//! `cargo bench --bench imports`; settings: IMPORT_CALLS per row (2000,
//! after 200 unmeasured), IMPORT_ROUNDS rounds of the ways alternated (3),
//! IMPORT_SDK=0 leaves out (c), IMPORT_SERVER=ts calls the TypeScript SDK's
//! fixture server (`tests/imports/mcp_server.mjs`) instead. One call in
//! flight at a time. Columns: calls per second, p50 and p99 in
//! microseconds; then the sidecar's overhead, (b) − (a), per round.

use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use lmos_sidecar::imports::mcp::McpUpstream;
use lmos_sidecar::imports::upstream::{Call, Outcome, Upstream};
use lmos_testkit::bench::env_or;
use lmos_testkit::upstreams::{self, Fixture};
use lmos_testkit::{lmos, test_config, urlencode, TestSidecar, WsClient};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const THING: &str = "urn:lmos:import:bench";

/// One way to call `echo`.
enum Way<U> {
    Direct(U),
    /// The consumer's connection (new for each row: an idle one is closed
    /// by the sidecar's keep-alive while the other rows run), the URL.
    Sidecar(Option<Box<WsClient>>, String),
}

impl<U: Upstream> Way<U> {
    fn name(&self) -> &'static str {
        match self {
            Way::Direct(_) => "(a) MCP client → server",
            Way::Sidecar(..) => "(b) WebSocket → sidecar → server",
        }
    }

    async fn call(&mut self, n: usize) -> Result<()> {
        let text = format!("call {n}");
        let output = match self {
            Way::Direct(upstream) => {
                let (updates, _ignored) = tokio::sync::mpsc::channel(16);
                let call = Call {
                    action: "echo".into(),
                    input: Some(json!({"text": text})),
                    id: format!("bench-{n}"),
                    stream: false,
                    trace: None,
                };
                match upstream.call(call, updates, CancellationToken::new()).await {
                    Ok(Outcome::Completed(output)) => output,
                    other => bail!("call {n}: {other:?}"),
                }
            }
            Way::Sidecar(ws, _) => {
                let ws = ws.as_mut().context("connected")?;
                let c = format!("c{n}");
                ws.send(lmos(
                    THING,
                    "invokeAction",
                    json!({"action": "echo", "input": {"text": text}, "correlationID": c}),
                ))
                .await;
                loop {
                    let m = ws.recv().await;
                    if m["correlationID"] != c.as_str() {
                        continue;
                    }
                    match m["status"].as_str() {
                        Some("completed") => break m["output"].clone(),
                        Some("pending" | "running") => {}
                        _ => bail!("call {n}: {m}"),
                    }
                }
            }
        };
        if output != json!(text) {
            bail!("{}: wrong answer to call {n}: {output}", self.name());
        }
        Ok(())
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// Calls per second, p50 and p99 in µs, of `calls` calls after 200.
async fn measure<U: Upstream>(
    way: &mut Way<U>,
    n: &mut usize,
    calls: usize,
) -> Result<(f64, u64, u64)> {
    if let Way::Sidecar(ws, url) = way {
        *ws = Some(Box::new(WsClient::connect(url).await));
    }
    for _ in 0..200 {
        *n += 1;
        way.call(*n).await?;
    }
    let mut latencies = Vec::with_capacity(calls);
    let start = Instant::now();
    for _ in 0..calls {
        *n += 1;
        let t = Instant::now();
        way.call(*n).await?;
        latencies.push(t.elapsed().as_micros() as u64);
    }
    let rate = calls as f64 / start.elapsed().as_secs_f64();
    latencies.sort_unstable();
    Ok((
        rate,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
    ))
}

/// (c): the Python SDK's client in a process of its own.
async fn sdk(url: &str, calls: usize) -> Result<(f64, u64, u64)> {
    let script = upstreams::path("benches/imports_sdk_client.py");
    let out = tokio::process::Command::new("python3")
        .args([script.as_str(), url, &calls.to_string(), "200"])
        .kill_on_drop(true)
        .output()
        .await
        .context("python3 runs")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| {
            anyhow!(
                "no report: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let int = |k: &str| report[k].as_u64().unwrap_or_default();
    Ok((
        report["rate"].as_f64().unwrap_or_default(),
        int("p50_us"),
        int("p99_us"),
    ))
}

/// Waits until the sidecar has reached the server (its TD has `echo`).
async fn imported(sidecar: &TestSidecar) -> Result<()> {
    let path = format!("/things/{}", urlencode(THING));
    for _ in 0..600 {
        let td = lmos_testkit::http(sidecar.http, "GET", &path, None, b"").await;
        if td.status == 200 && td.json()["actions"]["echo"].is_object() {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    bail!("the sidecar never reached the server")
}

#[tokio::main]
async fn main() -> Result<()> {
    let calls = env_or("IMPORT_CALLS", 2000);
    let rounds = env_or("IMPORT_ROUNDS", 3);
    let with_sdk = env_or("IMPORT_SDK", 1) == 1;
    let server = match std::env::var("IMPORT_SERVER").as_deref() {
        Ok("ts") => Fixture::node("tests/imports/mcp_server.mjs", &[]).await,
        _ => Fixture::python("tests/imports/mcp_server.py", &["http"]).await,
    };
    let url = server.url("/mcp");
    let import = upstreams::mcp_url("bench", &url);

    let direct = McpUpstream::new(&import).map_err(|e| anyhow!("{e}"))?;
    direct.connect().await.map_err(|e| anyhow!("{e}"))?;
    let mut config = test_config();
    config.imports.mcp = vec![import];
    let sidecar = TestSidecar::start_with(config).await;
    imported(&sidecar).await?;
    let mut ways = vec![Way::Direct(direct), Way::Sidecar(None, sidecar.ws_url())];

    println!("| round | way | calls/s | p50 µs | p99 µs |");
    println!("|---|---|---|---|---|");
    let mut n = 0;
    let mut overheads = Vec::new();
    for round in 1..=rounds {
        let mut p50s = Vec::new();
        for way in &mut ways {
            let (rate, p50, p99) = measure(way, &mut n, calls).await?;
            println!("| {round} | {} | {rate:.0} | {p50} | {p99} |", way.name());
            p50s.push((p50, p99));
        }
        if with_sdk {
            let (rate, p50, p99) = sdk(&url, calls).await?;
            println!("| {round} | (c) Python SDK client → server | {rate:.0} | {p50} | {p99} |");
        }
        let (a, b) = (p50s[0], p50s[1]);
        overheads.push((b.0 as i64 - a.0 as i64, b.1 as i64 - a.1 as i64));
    }
    println!();
    println!("| round | sidecar overhead p50 µs | p99 µs |");
    println!("|---|---|---|");
    for (round, (p50, p99)) in overheads.iter().enumerate() {
        println!("| {} | {p50} | {p99} |", round + 1);
    }
    drop(ways);
    sidecar.stop().await;
    server.stop().await;
    Ok(())
}
