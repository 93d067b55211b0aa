//! Hostile upstreams hurt no one else (issue 44, item 6). A sidecar process
//! imports the FastMCP fixture as `calc` and `tests/imports/hostile_mcp.py`
//! as `hostile`, both over stdio. Each test makes one hostile call (a
//! 20 MiB result, no answer, malformed JSON-RPC, 200 000 notifications) and
//! checks that it ends clearly and in time while, at the same moment,
//! another consumer's calls to `calc` and an ordinary MQTT publish and
//! subscribe keep working; the huge result must not grow the sidecar's
//! memory by its size. The stderr flood the hostile server starts with is
//! logged escaped and bounded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lmos_sidecar::config::{ImportConfig, ImportsConfig};
use lmos_testkit::process::{DataDir, Started};
use lmos_testkit::upstreams;
use lmos_testkit::{sidecar_command, MqttClient};
use serde_json::{json, Value};

use super::*;

const HOSTILE: &str = "urn:lmos:import:hostile";
const HOSTILE_PY: &str = "tests/imports/hostile_mcp.py";
const MIB: u64 = 1024;

/// A sidecar process importing `calc` and `hostile` (`tune`d), once both
/// Things are described.
struct Sidecar {
    process: Started,
    _dir: DataDir,
}

async fn sidecar(tune: impl FnOnce(&mut ImportConfig)) -> Sidecar {
    let dir = DataDir::new("hostile");
    let mut hostile = upstreams::mcp_python("hostile", HOSTILE_PY, &[]);
    tune(&mut hostile);
    let calc = upstreams::mcp_python("calc", MCP_PY, &["stdio"]);
    let imports = ImportsConfig {
        mcp: vec![calc, hostile],
        a2a: vec![],
    };
    // The imports' own lines at debug: the stderr the sidecar logs.
    let log =
        "[log]\nfilter = \"info,lmos_sidecar::imports=debug,rumqttd=off,opentelemetry_sdk=off\"\n";
    let file = dir.0.join("sidecar.toml");
    std::fs::write(
        &file,
        format!("{log}\n{}", upstreams::imports_toml(&imports)),
    )
    .unwrap();
    let mut cmd = sidecar_command!();
    cmd.arg("--config").arg(&file);
    let process = Started::start(&mut cmd);
    for thing in [CALC, HOSTILE] {
        connected(process.http, thing).await;
    }
    Sidecar { process, _dir: dir }
}

impl Sidecar {
    async fn ws(&self) -> WsClient {
        WsClient::connect(&format!("ws://{}/lmos", self.process.http)).await
    }

    fn pid(&self) -> u32 {
        self.process.process.0.id()
    }

    /// Still running (not crashed).
    fn alive(&mut self) -> bool {
        matches!(self.process.process.0.try_wait(), Ok(None))
    }
}

/// What the other clients saw while the hostile call ran.
#[derive(Debug, Default)]
struct Seen {
    rounds: u64,
    slowest: Duration,
    failures: Vec<String>,
}

/// Another consumer calling `calc`'s `add` and an MQTT client publishing to
/// itself, round after round, until stopped.
struct Others {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Seen>,
}

impl Others {
    async fn start(sidecar: &Sidecar) -> Others {
        let ws = sidecar.ws().await;
        let id = format!("others-{}", uuid::Uuid::new_v4());
        let mut mqtt = MqttClient::connect(sidecar.process.mqtt, &id).await;
        let topic = format!("others/{id}");
        mqtt.subscribe(&topic).await;
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(others(ws, mqtt, topic, stop.clone()));
        Others { stop, task }
    }

    async fn stop(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        tokio::time::timeout(common::WAIT, self.task)
            .await
            .expect("the other clients stop")
            .expect("the other clients did not panic")
    }
}

async fn others(
    mut ws: WsClient,
    mut mqtt: MqttClient,
    topic: String,
    stop: Arc<AtomicBool>,
) -> Seen {
    let mut seen = Seen::default();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let got = invoke(&mut ws, CALC, "add", json!({"a": 2, "b": 3}), json!({})).await;
        let done = last(&got);
        if done["status"] != "completed" || !is_sum(&done["output"], 5.0) {
            seen.failures.push(format!("calc add: {got:?}"));
        }
        let i = seen.rounds;
        mqtt.publish(&topic, &json!({"i": i}), false).await;
        let (_, echoed, _) = mqtt.recv_json().await;
        if echoed != json!({"i": i}) {
            seen.failures.push(format!("mqtt: {echoed}"));
        }
        seen.rounds += 1;
        seen.slowest = seen.slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen
}

/// Asserts the other clients were served all along, and quickly.
fn served(seen: &Seen) {
    assert!(seen.failures.is_empty(), "{:#?}", seen.failures);
    assert!(seen.rounds >= 1, "{seen:?}");
    assert!(seen.slowest < Duration::from_secs(2), "{seen:?}");
}

/// Why a call failed: a `failed` status's output or an error's detail.
fn failure(m: &Value) -> Option<String> {
    match (m["messageType"].as_str(), m["status"].as_str()) {
        (Some("error"), _) => Some(format!("{} {}", m["status"], m["detail"])),
        (_, Some("failed")) => Some(m["output"].to_string()),
        _ => None,
    }
}

/// One hostile call, timed; its messages.
async fn hostile_call(ws: &mut WsClient, tool: &str, input: Value) -> (Vec<Value>, Duration) {
    let started = Instant::now();
    let got = invoke(ws, HOSTILE, tool, input, json!({})).await;
    (got, started.elapsed())
}

/// The hostile server still answers `ok` (at once, or after a restart).
async fn still_ok(ws: &mut WsClient) {
    let deadline = Instant::now() + common::WAIT;
    loop {
        let got = invoke(ws, HOSTILE, "ok", json!({}), json!({})).await;
        if last(&got)["status"] == "completed" {
            assert_eq!(last(&got)["output"], "ok", "{got:#?}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "ok never answered again: {got:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The process's largest resident set, sampled until `stop`.
fn sample_rss(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut most = 0;
        while !stop.load(Ordering::Relaxed) {
            most = most.max(upstreams::rss_kib(pid).0);
            std::thread::sleep(Duration::from_millis(2));
        }
        most
    })
}

#[tokio::test]
async fn a_huge_result_fails_its_call_naming_max_message_bytes_and_memory_stays_bounded() {
    let mut sidecar = sidecar(|_| {}).await;
    let mut ws = sidecar.ws().await;
    for _ in 0..3 {
        assert_adds(&mut ws).await;
    }
    still_ok(&mut ws).await;
    let (before, peak_before) = upstreams::rss_kib(sidecar.pid());
    let sampling = Arc::new(AtomicBool::new(false));
    let sampler = sample_rss(sidecar.pid(), sampling.clone());
    let others = Others::start(&sidecar).await;

    let (got, took) = hostile_call(&mut ws, "huge", json!({})).await;
    let seen = others.stop().await;
    sampling.store(true, Ordering::Relaxed);
    let most = sampler.join().unwrap();
    let (_, peak_after) = upstreams::rss_kib(sidecar.pid());

    let why = failure(last(&got)).unwrap_or_else(|| panic!("not failed: {got:#?}"));
    assert!(why.contains("max_message_bytes"), "{why}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    served(&seen);
    let grown = most.saturating_sub(before);
    eprintln!("huge: {why}; in {took:?}; RSS {before} KiB, at most {most} KiB (peak {peak_before} -> {peak_after} KiB); others {seen:?}");
    assert!(
        grown < 16 * MIB,
        "the 20 MiB answer grew the sidecar by {grown} KiB (from {before} KiB; peak {peak_before} -> {peak_after} KiB)"
    );
    still_ok(&mut ws).await;
    assert!(sidecar.alive());
}

#[tokio::test]
async fn a_tool_that_never_answers_fails_after_timeout_ms() {
    let mut sidecar = sidecar(|h| h.timeout_ms = 1_000).await;
    let mut ws = sidecar.ws().await;
    still_ok(&mut ws).await;
    let others = Others::start(&sidecar).await;
    let (got, took) = hostile_call(&mut ws, "silent", json!({})).await;
    served(&others.stop().await);
    let end = last(&got);
    let why = failure(end).unwrap_or_else(|| panic!("not failed: {got:#?}"));
    assert!(
        end["status"] == "failed" || end["status"] == "504",
        "failed, or an LMOS 504: {end}"
    );
    assert!(why.contains("1000 ms"), "says how long it waited: {why}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    still_ok(&mut ws).await;
    assert!(sidecar.alive());
}

#[tokio::test]
async fn malformed_json_rpc_ends_that_call_not_the_sidecar() {
    let mut sidecar = sidecar(|h| h.timeout_ms = 3_000).await;
    let mut ws = sidecar.ws().await;
    still_ok(&mut ws).await;
    let others = Others::start(&sidecar).await;
    let (got, took) = hostile_call(&mut ws, "malformed", json!({})).await;
    served(&others.stop().await);
    let why = failure(last(&got)).unwrap_or_else(|| panic!("not failed: {got:#?}"));
    assert!(!why.is_empty(), "{got:#?}");
    assert!(took < Duration::from_secs(5), "{took:?}: {why}");
    still_ok(&mut ws).await;
    assert!(sidecar.alive());
}

#[tokio::test]
async fn a_notification_flood_is_thinned_to_max_updates_per_second() {
    const PER_SECOND: u32 = 20;
    let mut sidecar = sidecar(|h| h.max_updates_per_second = PER_SECOND).await;
    let mut ws = sidecar.ws().await;
    still_ok(&mut ws).await;
    let others = Others::start(&sidecar).await;
    let (got, took) = hostile_call(&mut ws, "flood", json!({})).await;
    served(&others.stop().await);
    let done = last(&got);
    assert_eq!(
        (&done["status"], &done["output"]),
        (&json!("completed"), &json!("flooded")),
        "{done}"
    );
    let updates = running(&got).len() as f64;
    eprintln!("flood: {updates} statuses in {took:?}");
    let allowed = f64::from(PER_SECOND) * (took.as_secs_f64() + 1.0) * 1.2;
    assert!(
        updates <= allowed,
        "{updates} statuses in {took:?}, at most ~{PER_SECOND}/s"
    );
    assert!(updates >= 1.0, "progress still passes: {got:#?}");
    assert!(sidecar.alive());
}

/// Every string in a log line, however deep.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

#[tokio::test]
async fn a_stderr_flood_is_logged_escaped_and_bounded() {
    let mut sidecar = sidecar(|_| {}).await;
    let mut ws = sidecar.ws().await;
    still_ok(&mut ws).await;
    assert_adds(&mut ws).await;
    // Everything logged until the log has been quiet for a second.
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Ok(line) = sidecar.process.logs.recv_timeout(Duration::from_secs(1)) {
        lines.push(line);
        assert!(Instant::now() < deadline, "the sidecar logs for ever");
    }
    let mut from_stderr = 0;
    for line in &lines {
        let mut texts = Vec::new();
        strings(line, &mut texts);
        let all = texts.concat();
        if all.contains("forged") || all.contains("AAAAAAAAAAAAAAAA") {
            from_stderr += 1;
        }
        let control = all
            .chars()
            .find(|c| c.is_control() && *c != '\n' && *c != '\t');
        assert_eq!(control, None, "a raw control character logged: {line}");
        let size = line.to_string().len();
        assert!(size < 64 * 1024, "a log line of {size} bytes");
    }
    eprintln!("stderr: {from_stderr} of {} log lines", lines.len());
    assert!(
        from_stderr >= 1,
        "the child's stderr is logged: {} lines",
        lines.len()
    );
    assert!(
        from_stderr <= 5_000,
        "50 000 stderr lines logged as {from_stderr}: not bounded"
    );
    assert!(sidecar.alive());
}
