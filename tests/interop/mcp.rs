//! MCP at `/mcp`, driven by the official SDK clients nobody here wrote: the
//! TypeScript SDK (npm `@modelcontextprotocol/sdk`, `tests/mcp/client.mjs`)
//! and the Python SDK (PyPI `mcp`, `tests/mcp/client.py`), against a real
//! sidecar and the example WeatherAgent.
//!
//! Needs Node.js with `npm ci --prefix tests/mcp`, and Python 3 with
//! `pip install --user mcp` (the version `.ci/run` pins; it installs both):
//! the tests fail, they do not skip, when they are missing.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use lmos_sidecar::auth::credentials::hash_password;
use lmos_sidecar::config::{Grants, HttpScheme, PrincipalConfig};
use lmos_testkit::weather_agent::{self, THING_DESCRIPTION, THING_ID};
use lmos_testkit::{self as common, test_config, ws_request, TestSidecar, WsClient};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

fn dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp");
    assert!(
        dir.join("node_modules/@modelcontextprotocol/sdk").is_dir(),
        "the MCP TypeScript SDK is not installed: run `npm ci --prefix tests/mcp` (.ci/run does this)"
    );
    dir
}

/// A client process: its stdout lines as they come, its last line the report.
pub(super) struct Run {
    child: Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Run {
    pub(super) fn start(program: &str, script: &str, args: &[String]) -> Run {
        let mut child = Command::new(program)
            .arg(script)
            .args(args)
            .current_dir(dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{program} runs ({e}); is it installed?"));
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Run { child, lines }
    }

    async fn line(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await
            .expect("the client answered within a minute")
            .unwrap()
            .expect("the client printed its report")
    }

    /// Waits for `step: {name}`.
    pub(super) async fn step(&mut self, name: &str) {
        loop {
            let line = self.line().await;
            if line == format!("step: {name}") {
                return;
            }
            assert!(!line.starts_with('{'), "ended before `{name}`: {line}");
        }
    }

    pub(super) async fn report(mut self) -> Value {
        loop {
            let line = self.line().await;
            if let Ok(report) = serde_json::from_str::<Value>(&line) {
                drop(self.child.stdin.take());
                let _ = self.child.wait().await;
                return report;
            }
        }
    }
}

fn node(scenario: &str, url: &str, headers: &[String]) -> Run {
    let mut args = vec![scenario.to_owned(), url.to_owned()];
    args.extend(headers.iter().cloned());
    Run::start("node", "client.mjs", &args)
}

pub(super) fn mcp_url(sidecar: &TestSidecar) -> String {
    format!("http://{}/mcp", sidecar.http)
}

pub(super) async fn with_weather_agent() -> (TestSidecar, tokio::task::JoinHandle<()>) {
    let sidecar = TestSidecar::start_with(test_config()).await;
    let url = sidecar.ws_url();
    let agent = tokio::spawn(async move {
        let _ = weather_agent::serve(&url).await;
    });
    common::wait_for_stats(&sidecar, |s| s.hosted_things == 1).await;
    common::wait_for_td(&sidecar, THING_ID).await;
    (sidecar, agent)
}

#[tokio::test]
async fn the_typescript_sdk_lists_and_calls_the_weather_agent_with_progress() {
    let (sidecar, _agent) = with_weather_agent().await;
    let mut statuses = sidecar.mqtt("mcp-test-watcher").await;
    statuses
        .subscribe(&format!("lmos/{THING_ID}/actions/getWeather/status/+"))
        .await;
    let report = node("weather", &mcp_url(&sidecar), &[]).report().await;
    assert_eq!(report["errors"], json!([]), "{report:#}");
    assert_eq!(report["protocolVersion"], "2025-11-25", "{report:#}");
    let tools = report["tools"].as_array().unwrap();
    let get = tools
        .iter()
        .find(|t| t["name"] == "getWeather")
        .expect("getWeather listed");
    assert_eq!(
        get["inputSchema"]["properties"]["question"]["type"],
        "string"
    );
    assert!(get["description"].as_str().unwrap().contains("weather"));

    // The forecast, structured too, after the agent's progress.
    let result = &report["result"];
    let forecast = "The weather in Oslo is sunny with a temperature of 25°C.";
    assert_eq!(result["content"][0]["text"], forecast, "{report:#}");
    assert_eq!(result["structuredContent"]["output"], forecast);
    assert_ne!(result["isError"], true);
    let progress: Vec<&str> = report["progress"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["message"].as_str())
        .collect();
    assert!(
        progress.starts_with(&[
            "Reading the question...",
            "Looking at the sky...",
            "Writing the forecast..."
        ]),
        "{progress:?}"
    );
    // Streamed tokens arrive as progress too, in order.
    assert_eq!(progress[3..].concat(), forecast, "{progress:?}");

    // Checked against the TD before the agent saw it: the router's error,
    // naming the member, not the agent's `failed`.
    let missing = &report["missing"];
    assert_eq!(missing["isError"], true, "{report:#}");
    let text = missing["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("question"), "{text}");
    assert!(!text.contains("ended"), "the agent was invoked: {text}");

    assert_eq!(report["unknown"]["code"], -32602, "{report:#}");
    // Counted as MCP in the metrics (and so on the console's transport chart).
    let metrics = common::http(sidecar.http, "GET", "/metrics", None, b"")
        .await
        .body;
    let line =
        r#"lmos_sidecar_messages_received_total{message_type="invokeAction",transport="mcp"}"#;
    assert!(metrics.contains(line), "{metrics}");
    assert!(
        report["cancel"]
            .as_str()
            .unwrap()
            .contains("changed my mind"),
        "{report:#}"
    );
    // The cancelled call reached the agent as cancelAction.
    agent_reports_cancelled(&mut statuses).await;
    sidecar.stop().await;
}

#[tokio::test]
async fn tools_vanish_when_the_agent_disconnects() {
    let (sidecar, agent) = with_weather_agent().await;
    let mut run = node("vanish", &mcp_url(&sidecar), &[]);
    run.step("listed").await;
    agent.abort();
    let report = run.report().await;
    assert_eq!(report["errors"], json!([]), "{report:#}");
    assert_eq!(
        report["before"],
        json!([
            "getWeather",
            "read_modelConfiguration",
            "write_modelConfiguration"
        ])
    );
    assert_eq!(report["listChanged"], 1, "{report:#}");
    assert_eq!(report["after"], json!([]), "{report:#}");
    sidecar.stop().await;
}

pub(super) fn basic(name: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{name}:pw"));
    format!("Basic {encoded}")
}

/// A sidecar requiring Basic: `agent` hosts the WeatherAgent's Thing,
/// `operator` may operate it, `stranger` may do nothing.
pub(super) async fn with_principals() -> (TestSidecar, WsClient) {
    let mut config = test_config();
    config.http.authentication = vec![HttpScheme::Basic];
    config.auth.anonymous = Grants::default();
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let principal =
        |name: &str, consume: &[&str], operate: &[&str], host: &[&str]| PrincipalConfig {
            name: name.into(),
            password_hash: hash_password("pw"),
            host: v(host),
            consume: v(consume),
            operate: v(operate),
            ..PrincipalConfig::default()
        };
    config.auth.principals = vec![
        principal("agent", &[THING_ID], &[], &[THING_ID]),
        principal("operator", &[THING_ID], &[THING_ID], &[]),
        principal("stranger", &[], &[], &[]),
    ];
    let sidecar = TestSidecar::start_with(config).await;
    let url = format!("{}?host={}", sidecar.ws_url(), common::urlencode(THING_ID));
    let mut request = ws_request(&url, Some("lmosprotocol"));
    request
        .headers_mut()
        .insert("Authorization", basic("agent").parse().unwrap());
    let mut agent = WsClient::connect_request(request).await.unwrap();
    agent
        .send(serde_json::from_str(THING_DESCRIPTION).unwrap())
        .await;
    common::wait_for_stats(&sidecar, |s| s.hosted_things == 1).await;
    let deadline = tokio::time::Instant::now() + common::WAIT;
    while common::http_with(
        sidecar.http,
        "GET",
        &format!("/things/{THING_ID}"),
        &[("Authorization", &basic("operator"))],
        b"",
    )
    .await
    .status
        != 200
    {
        assert!(tokio::time::Instant::now() < deadline, "TD registered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (sidecar, agent)
}

#[tokio::test]
async fn a_principal_without_rights_sees_no_tools_and_gets_the_protocol_s_error() {
    let (sidecar, mut agent) = with_principals().await;
    let auth = format!("Authorization={}", basic("stranger"));
    let report = node("denied", &mcp_url(&sidecar), &[auth]).report().await;
    assert_eq!(report["errors"], json!([]), "{report:#}");
    assert_eq!(report["tools"], json!([]), "{report:#}");
    assert_eq!(report["call"]["code"], -32602, "{report:#}");
    let invoked = tokio::time::timeout(Duration::from_millis(300), agent.recv()).await;
    assert!(invoked.is_err(), "the agent got {invoked:?}");
    // Without credentials: HTTP's 401, before any JSON-RPC.
    let anonymous = node("denied", &mcp_url(&sidecar), &[]).report().await;
    assert!(
        anonymous["errors"][0]
            .as_str()
            .unwrap()
            .contains("requires authentication"),
        "{anonymous:#}"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn the_mcp_client_s_trace_reaches_the_agent_s_invoke_action() {
    let (sidecar, mut agent) = with_principals().await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let args = [
        format!("Authorization={}", basic("operator")),
        format!("traceparent=00-{trace_id}-00f067aa0ba902b7-01"),
    ];
    let run = node("trace", &mcp_url(&sidecar), &args);
    let invoke = loop {
        let m = agent.recv().await;
        if m["messageType"] == "invokeAction" {
            break m;
        }
    };
    let traceparent = invoke["traceparent"].as_str().expect("a traceparent");
    assert_eq!(traceparent.split('-').nth(1), Some(trace_id), "{invoke}");
    let mut done = json!({
        "thingID": THING_ID, "messageID": "done", "messageType": "actionStatus",
        "action": "getWeather", "status": "completed", "output": "Sunny.",
    });
    done["correlationID"] = invoke["correlationID"].clone();
    agent.send(done).await;
    let report = run.report().await;
    assert_eq!(report["errors"], json!([]), "{report:#}");
    assert_eq!(
        report["result"]["content"][0]["text"], "Sunny.",
        "{report:#}"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn malformed_and_oversized_requests_get_json_rpc_errors() {
    let (sidecar, _agent) = with_weather_agent().await;
    let post = |body: Vec<u8>, session: Option<String>| {
        let addr = sidecar.http;
        async move {
            let mut headers = vec![
                ("Content-Type", "application/json".to_owned()),
                ("Accept", "application/json, text/event-stream".to_owned()),
            ];
            if let Some(s) = session {
                headers.push(("Mcp-Session-Id", s));
            }
            let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            common::http_with(addr, "POST", "/mcp", &h, &body).await
        }
    };
    let bad = post(b"{not json".to_vec(), None).await;
    assert_eq!(
        (bad.status, bad.json()["error"]["code"].clone()),
        (400, json!(-32700))
    );
    let batch = post(b"[]".to_vec(), None).await;
    assert_eq!(batch.json()["error"]["code"], -32600);
    let no_session = post(
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_vec(),
        None,
    )
    .await;
    assert_eq!(
        (
            no_session.status,
            no_session.json()["error"]["code"].clone()
        ),
        (400, json!(-32600))
    );
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":"{}"}}}}"#,
        "x".repeat(2 << 20)
    );
    let oversized = post(huge.into_bytes(), None).await;
    assert_eq!(
        (oversized.status, oversized.json()["error"]["code"].clone()),
        (413, json!(-32600))
    );
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}});
    let opened = post(init.to_string().into_bytes(), None).await;
    assert_eq!(opened.json()["result"]["protocolVersion"], "2025-06-18");
    let session = opened
        .header("mcp-session-id")
        .expect("a session")
        .to_owned();
    let unknown = post(
        br#"{"jsonrpc":"2.0","id":2,"method":"prompts/list"}"#.to_vec(),
        Some(session.clone()),
    )
    .await;
    assert_eq!(unknown.json()["error"]["code"], -32601);
    let gone = post(
        br#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#.to_vec(),
        Some("nope".into()),
    )
    .await;
    assert_eq!(gone.status, 404);
    // And the WebSocket still serves.
    let mut ws = sidecar.ws().await;
    ws.send(common::lmos(
        THING_ID,
        "readProperty",
        json!({"name": "modelConfiguration", "correlationID": "r"}),
    ))
    .await;
    assert_eq!(ws.recv().await["messageType"], "propertyReading");
    sidecar.stop().await;
}

pub(super) fn python(scenario: &str, url: &str) -> Run {
    Run::start(
        "python3",
        "client.py",
        &[scenario.to_owned(), url.to_owned()],
    )
}

#[tokio::test]
async fn the_python_sdk_lists_and_calls_the_weather_agent_with_progress() {
    let (sidecar, _agent) = with_weather_agent().await;
    let report = python("weather", &mcp_url(&sidecar)).report().await;
    assert_eq!(report["errors"], json!([]), "{report:#}");
    // It probes `server/discover` first and, answered, stays on the
    // stateless revision.
    assert_eq!(report["protocolVersion"], "2026-07-28", "{report:#}");
    assert_eq!(report["result"]["resultType"], "complete", "{report:#}");
    assert_eq!(
        report["tools"],
        json!([
            "getWeather",
            "read_modelConfiguration",
            "write_modelConfiguration"
        ])
    );
    let forecast = "The weather in Lisbon is sunny with a temperature of 25°C.";
    assert_eq!(
        report["result"]["content"][0]["text"], forecast,
        "{report:#}"
    );
    assert_eq!(report["result"]["structuredContent"]["output"], forecast);
    let messages: Vec<&str> = report["progress"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["message"].as_str())
        .collect();
    assert_eq!(
        messages.first(),
        Some(&"Reading the question..."),
        "{report:#}"
    );
    assert_eq!(messages[3..].concat(), forecast, "{report:#}");
    assert_eq!(report["missing"]["isError"], true, "{report:#}");
    let text = report["missing"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("question") && !text.contains("ended"),
        "{text}"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn the_python_sdk_sees_the_tools_vanish_with_the_agent() {
    let (sidecar, agent) = with_weather_agent().await;
    // At 2026-07-28 the news comes on a `subscriptions/listen` stream.
    let mut run = python("listen", &mcp_url(&sidecar));
    run.step("listed").await;
    agent.abort();
    let report = run.report().await;
    assert_eq!(report["errors"], json!([]), "{report:#}");
    assert_eq!(
        report["before"].as_array().map(Vec::len),
        Some(3),
        "{report:#}"
    );
    assert_eq!(report["listChanged"], "ToolsListChanged", "{report:#}");
    assert_eq!(report["after"], json!([]), "{report:#}");
    sidecar.stop().await;
}

#[tokio::test]
async fn sessions_are_bounded_per_principal_and_end_on_delete() {
    let mut config = test_config();
    config.mcp.max_sessions = 3;
    config.mcp.max_sessions_per_principal = 2;
    let sidecar = TestSidecar::start_with(config).await;
    let post = |body: Value, session: Option<String>| {
        let addr = sidecar.http;
        async move {
            let mut headers = vec![("Content-Type", "application/json".to_owned())];
            if let Some(s) = session {
                headers.push(("Mcp-Session-Id", s));
            }
            let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            common::http_with(addr, "POST", "/mcp", &h, body.to_string().as_bytes()).await
        }
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let mut sessions = Vec::new();
    for _ in 0..3 {
        let r = post(init.clone(), None).await;
        assert_eq!(r.status, 200, "{r:?}");
        sessions.push(r.header("mcp-session-id").unwrap().to_owned());
    }
    // The principal's third closed its least recently used one.
    assert_eq!(
        post(ping.clone(), Some(sessions[0].clone())).await.status,
        404
    );
    assert_eq!(
        post(ping.clone(), Some(sessions[2].clone())).await.json()["result"],
        json!({})
    );
    let metrics = common::http(sidecar.http, "GET", "/metrics", None, b"")
        .await
        .body;
    assert!(
        metrics.contains(r#"limit="max_sessions_per_principal",transport="mcp"} 1"#),
        "{metrics}"
    );
    // DELETE ends one; the others stay.
    let deleted = common::http_with(
        sidecar.http,
        "DELETE",
        "/mcp",
        &[("Mcp-Session-Id", &sessions[1])],
        b"",
    )
    .await;
    assert_eq!(deleted.status, 204);
    assert_eq!(post(ping, Some(sessions[1].clone())).await.status, 404);
    sidecar.stop().await;
}

#[tokio::test]
async fn a_tool_call_is_a_server_span_after_the_mcp_conventions_parent_of_the_invocation() {
    use opentelemetry::trace::SpanKind;
    let (sidecar, exporter, mut agent) = traced_with_scripted_weather_agent().await;
    let (trace_id, client_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let run = node(
        "trace",
        &mcp_url(&sidecar),
        &[format!("traceparent=00-{trace_id}-{client_span}-01")],
    );
    let invoke = complete_the_invocation(&mut agent).await;
    let report = run.report().await;
    assert_eq!(report["errors"], json!([]), "{report:#}");

    let spans = exporter.get_finished_spans().unwrap();
    let call = spans
        .iter()
        .find(|s| s.name == "tools/call getWeather")
        .unwrap_or_else(|| {
            panic!(
                "no MCP span in {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        });
    assert_eq!(call.span_kind, SpanKind::Server);
    assert_eq!(call.span_context.trace_id().to_string(), trace_id);
    assert_eq!(call.parent_span_id.to_string(), client_span);
    assert!(call.end_time > call.start_time, "the span lasts the call");
    let attribute = |key: &str| {
        call.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(attribute("mcp.method.name").as_deref(), Some("tools/call"));
    assert_eq!(attribute("gen_ai.tool.name").as_deref(), Some("getWeather"));
    assert_eq!(
        attribute("gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(
        attribute("mcp.session.id").as_deref(),
        report["sessionId"].as_str()
    );
    assert_eq!(
        attribute("mcp.protocol.version").as_deref(),
        Some("2025-11-25")
    );
    // The invocation's hops are its children: one trace from the client
    // through the MCP call to the agent.
    let call_id = call.span_context.span_id();
    assert!(
        spans.iter().any(|s| s.parent_span_id == call_id),
        "no span under the MCP call"
    );
    let (_, parent_on_the_agent) = {
        let tp = invoke["traceparent"].as_str().unwrap();
        let parts: Vec<&str> = tp.split('-').collect();
        (parts[1].to_owned(), parts[2].to_owned())
    };
    assert!(
        spans.iter().any(
            |s| s.span_context.span_id().to_string() == parent_on_the_agent
                && s.span_context.trace_id().to_string() == trace_id
        ),
        "the agent's parent span is one of the trace's"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn switched_off_the_agent_protocols_are_not_served() {
    let mut config = test_config();
    config.mcp.enabled = false;
    config.a2a.enabled = false;
    let sidecar = TestSidecar::start_with(config).await;
    let ping = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    for path in ["/mcp", "/a2a/urn:x"] {
        let r = common::http(sidecar.http, "POST", path, Some("application/json"), ping).await;
        assert_eq!(r.status, 404, "{path}: {r:?}");
    }
    let card = common::http(
        sidecar.http,
        "GET",
        "/.well-known/agent-card.json",
        None,
        b"",
    )
    .await;
    assert_eq!(card.status, 404);
    sidecar.stop().await;
}

/// Waits (10 s at most) for the agent to report an invocation cancelled on
/// the action-status topics `statuses` is subscribed to.
pub(crate) async fn agent_reports_cancelled(statuses: &mut common::MqttClient) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, status, _) = tokio::time::timeout_at(deadline, statuses.recv_json())
            .await
            .expect("the agent reported the cancelled invocation");
        if status["status"] == "cancelled" {
            return;
        }
    }
}

/// A sidecar exporting its spans to memory, with the WeatherAgent's TD
/// registered by a WebSocket agent the test answers for.
pub(crate) async fn traced_with_scripted_weather_agent() -> (
    TestSidecar,
    opentelemetry_sdk::trace::InMemorySpanExporter,
    WsClient,
) {
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let tracing = lmos_sidecar::telemetry::Tracing::with_exporter(exporter.clone(), false);
    let sidecar = TestSidecar::start_traced(test_config(), tracing).await;
    let mut agent = sidecar.ws_agent(THING_ID).await;
    agent
        .send(serde_json::from_str(THING_DESCRIPTION).unwrap())
        .await;
    common::wait_for_td(&sidecar, THING_ID).await;
    (sidecar, exporter, agent)
}

/// Answers the next `invokeAction` the scripted agent gets with
/// `completed` "Sunny."; the request it answered.
pub(crate) async fn complete_the_invocation(agent: &mut WsClient) -> Value {
    let invoke = loop {
        let m = agent.recv().await;
        if m["messageType"] == "invokeAction" {
            break m;
        }
    };
    let mut done = json!({
        "thingID": THING_ID, "messageID": "done", "messageType": "actionStatus",
        "action": "getWeather", "status": "completed", "output": "Sunny.",
    });
    done["correlationID"] = invoke["correlationID"].clone();
    agent.send(done).await;
    invoke
}

/// The spoken forecast's audio content, as an SDK reported its result:
/// the transcript first, then one `audio` block of the whole WAV file.
fn assert_spoken(report: &Value) {
    assert_eq!(report["errors"], json!([]), "{report:#}");
    let content = report["result"]["content"].as_array().unwrap();
    assert_eq!(
        content[0]["text"], "The weather in Oslo is sunny with a temperature of 25°C.",
        "{report:#}"
    );
    assert_eq!(content[1]["type"], "audio", "{report:#}");
    assert_eq!(content[1]["mimeType"], "audio/wav");
    let data = content[1]["data"].as_str().unwrap();
    let wav = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    let samples = lmos_sidecar::demo_agent::voice::samples_of(&wav);
    assert!(
        samples.is_some_and(|n| n > 0),
        "one WAV file of the streamed chunks"
    );
    assert_eq!(content.len(), 2, "{report:#}");
}

#[tokio::test]
async fn both_sdks_get_a_spoken_forecast_as_audio_content() {
    let (sidecar, _agent) = with_weather_agent().await;
    let url = mcp_url(&sidecar);
    let report = node("voice", &url, &[]).report().await;
    assert_spoken(&report);
    let report = python("voice", &url).report().await;
    assert_spoken(&report);
    assert_eq!(
        report["types"],
        json!(["TextContent", "AudioContent"]),
        "{report:#}"
    );
    sidecar.stop().await;
}
