//! Traces without Jaeger (issue 47 item 3): with no OTLP endpoint, the
//! sidecar keeps its recent spans and the console shows them. An
//! invocation from a WebSocket consumer to the WeatherAgent is found by
//! its trace ID, its spans say who talked to whom, the messages pass on
//! with the consumer's `traceparent` untouched, and the trace is shown
//! only to those who may read its Thing. In headless Chromium, the
//! console's own invocation links to its waterfall (writing
//! `docs/console-trace.png`).

use lmos_testkit as common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use lmos_sidecar::config::{Config, HttpScheme, PrincipalConfig};
use lmos_testkit::weather_agent::{self, THING_ID};
use lmos_testkit::webdriver::{browser_available, start_driver, Browser};
use lmos_testkit::{TestSidecar, WsClient};
use serde_json::{json, Value};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CONSUMER_SPAN: &str = "00f067aa0ba902b7";

fn principal(dir: &Path, name: &str, consume: &str, operate: &str) -> PrincipalConfig {
    let file = dir.join(name);
    std::fs::write(&file, format!("{name}-token")).unwrap();
    PrincipalConfig {
        name: name.into(),
        token_file: file.display().to_string(),
        password_file: {
            let pw = dir.join(format!("{name}.pw"));
            std::fs::write(&pw, format!("{name}-pw")).unwrap();
            pw.display().to_string()
        },
        consume: vec![consume.into()],
        operate: vec![operate.into()],
        ..PrincipalConfig::default()
    }
}

/// A consumer of the WeatherAgent, one who may read only another Thing,
/// an administrator who may read only that other Thing too, and the agent.
fn config(dir: &Path) -> Config {
    let mut config = common::test_config();
    config.http.authentication = vec![HttpScheme::Basic, HttpScheme::Bearer];
    config.auth.principals = vec![
        principal(dir, "consumer", THING_ID, THING_ID),
        principal(dir, "stranger", "urn:other", "urn:other"),
        principal(dir, "ops", "urn:other", "urn:other"),
        PrincipalConfig {
            host: vec![THING_ID.into()],
            ..principal(dir, "agent", THING_ID, "urn:none")
        },
    ];
    config.console.administrators = vec!["ops".into()];
    config
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lmos-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The sidecar, with the WeatherAgent connected under its own token and
/// its TD registered.
async fn start(config: Config) -> TestSidecar {
    let sidecar = TestSidecar::start_with(config).await;
    weather_agent::start_with_token(&sidecar, "agent-token", "Bearer consumer-token").await;
    sidecar
}

async fn get_as(sidecar: &TestSidecar, who: &str, path: &str) -> common::HttpResponse {
    let bearer = format!("Bearer {who}-token");
    common::http_with(
        sidecar.http,
        "GET",
        path,
        &[("Authorization", &bearer)],
        b"",
    )
    .await
}

/// The consumer invokes `getWeather` under its own trace and reads every
/// status up to `completed`.
async fn invoke_traced(sidecar: &TestSidecar) -> Vec<Value> {
    let mut request = common::ws_request(&sidecar.ws_url(), Some("lmosprotocol"));
    request
        .headers_mut()
        .insert("Authorization", "Bearer consumer-token".parse().unwrap());
    let mut consumer = WsClient::connect_request(request).await.unwrap();
    consumer
        .send(json!({
            "thingID": THING_ID, "messageType": "invokeAction", "action": "getWeather",
            "messageID": "m-1", "correlationID": "c-1",
            "input": {"question": "What is the weather in Oslo?", "interactionMode": "text"},
            "traceparent": format!("00-{TRACE}-{CONSUMER_SPAN}-01"),
            "tracestate": "congo=t61rcWkgMzE",
        }))
        .await;
    let mut statuses = Vec::new();
    loop {
        let m = consumer.recv().await;
        assert_eq!(m["messageType"], "actionStatus", "{m}");
        let done = m["status"] == "completed";
        statuses.push(m);
        if done {
            return statuses;
        }
    }
}

#[tokio::test]
async fn an_invocation_is_traced_in_memory_and_shown_only_to_who_may_read_its_thing() {
    let dir = temp_dir("traces");
    let sidecar = start(config(&dir)).await;
    let statuses = invoke_traced(&sidecar).await;
    // No collector: the messages go on with the consumer's context as it
    // sent it (the agent copies it into its statuses), never a span of
    // the sidecar's that no collector would hold.
    for s in &statuses {
        assert_eq!(
            s["traceparent"],
            format!("00-{TRACE}-{CONSUMER_SPAN}-01"),
            "{s}"
        );
        assert_eq!(s["tracestate"], "congo=t61rcWkgMzE", "{s}");
    }

    let answer = get_as(&sidecar, "consumer", &format!("/console/traces/{TRACE}")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let trace: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(trace["traceId"], TRACE);
    assert_eq!(trace["things"], json!([THING_ID]));
    let spans = trace["spanList"].as_array().unwrap();
    let request = &spans[0];
    assert_eq!(
        request["role"],
        format!("a consumer's request, sent to the agent of {THING_ID}"),
        "{trace:#}"
    );
    assert_eq!(request["parentId"], CONSUMER_SPAN);
    assert_eq!(request["parentRemote"], true);
    assert_eq!(request["kind"], "producer");
    assert!(request["error"].is_null());
    let answers = spans
        .iter()
        .filter(|s| s["role"] == format!("the agent of {THING_ID} answers"))
        .count();
    assert_eq!(answers, statuses.len(), "one span per status: {trace:#}");
    let attribute = |s: &Value, key: &str| {
        s["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|kv| kv[0] == key)
            .map(|kv| kv[1].clone())
    };
    assert_eq!(
        attribute(request, "lmos.affordance"),
        Some(json!("getWeather"))
    );
    assert_eq!(
        attribute(request, "lmos.correlation_id"),
        Some(json!("c-1"))
    );
    let offsets: Vec<u64> = spans
        .iter()
        .map(|s| s["offsetUs"].as_u64().unwrap())
        .collect();
    assert!(
        offsets.windows(2).all(|w| w[0] <= w[1]),
        "earliest first: {offsets:?}"
    );
    assert!(trace["durationUs"].as_u64().unwrap() >= *offsets.last().unwrap());

    // The list finds it by its ID and by its Thing.
    for q in [&TRACE[..8], &THING_ID[9..20]] {
        let list = get_as(&sidecar, "consumer", &format!("/console/traces?q={q}")).await;
        let list: Value = serde_json::from_str(&list.body).unwrap();
        assert_eq!(list["kept"], true);
        assert!(list["usedBytes"].as_u64().unwrap() > 0);
        assert!(
            list["traces"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["traceId"] == TRACE),
            "{q}: {list:#}"
        );
    }

    // Someone who may not read the Thing: not shown, as if unknown.
    let hidden = get_as(&sidecar, "stranger", &format!("/console/traces/{TRACE}")).await;
    assert_eq!(hidden.status, 404, "{}", hidden.body);
    let list = get_as(&sidecar, "stranger", "/console/traces").await;
    let list: Value = serde_json::from_str(&list.body).unwrap();
    assert_eq!(list["traces"], json!([]), "{list:#}");
    // An administrator sees every trace.
    let shown = get_as(&sidecar, "ops", &format!("/console/traces/{TRACE}")).await;
    assert_eq!(shown.status, 200, "{}", shown.body);

    let unknown = get_as(
        &sidecar,
        "consumer",
        &format!("/console/traces/{}", "1".repeat(32)),
    )
    .await;
    assert_eq!(unknown.status, 404);
    let bad = get_as(&sidecar, "consumer", "/console/traces/not-a-trace").await;
    assert_eq!(bad.status, 400);
    sidecar.stop().await;
}

#[tokio::test]
async fn a_zero_budget_keeps_no_spans_and_says_so() {
    let dir = temp_dir("traces-off");
    let mut config = config(&dir);
    config.tracing.recent_spans_bytes = 0;
    let sidecar = start(config).await;
    invoke_traced(&sidecar).await;
    let list = get_as(&sidecar, "consumer", "/console/traces").await;
    let list: Value = serde_json::from_str(&list.body).unwrap();
    assert_eq!(list["kept"], false, "{list}");
    let one = get_as(&sidecar, "consumer", &format!("/console/traces/{TRACE}")).await;
    assert_eq!(one.status, 404);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_links_its_invocation_to_a_waterfall() {
    if !browser_available() {
        return;
    }
    let dir = temp_dir("traces-browser");
    let sidecar = start(config(&dir)).await;
    let driver = start_driver().await;
    let browser = Browser::open(&driver, 1280, 1300).await;
    let row = format!(r#"tr[data-thing="{THING_ID}"]"#);
    browser
        .open_console(
            &format!("http://consumer:consumer-pw@{}/console", sidecar.http),
            "the agent appears",
            &format!(r#"{row}[data-agent="websocket"]"#),
        )
        .await;
    browser
        .click(&format!(r#"button[data-open="{THING_ID}"]"#))
        .await;
    let form = r#"form[data-invoke="getWeather"]"#;
    browser
        .wait_for(
            "the action's form",
            Duration::from_secs(5),
            &format!("return document.querySelector('{form}') !== null;"),
        )
        .await;
    browser
        .submit(form, "question", "What is the weather in Oslo?")
        .await;
    browser
        .wait_for(
            "the invocation completes",
            Duration::from_secs(5),
            r"const li = document.querySelector('#invocations li'); return li && li.dataset.status === 'completed';",
        )
        .await;
    // The agent's event follows `completed`; the page's subscription to it
    // is one more hop of the same trace.
    browser
        .wait_for(
            "the event in the live list",
            Duration::from_secs(5),
            r#"return document.querySelector('#live li[data-kind="event"]') !== null;"#,
        )
        .await;
    let trace = browser
        .js(r#"return document.querySelector('#invocations li a[data-link="trace"]').dataset.trace;"#)
        .await;
    let trace = trace.as_str().unwrap().to_owned();
    browser
        .click(r#"#invocations li a[data-link="trace"]"#)
        .await;
    let roles = browser
        .wait_for(
            "the waterfall",
            Duration::from_secs(5),
            r"const v = document.querySelector('#trace-view'); const r = [...document.querySelectorAll('#waterfall li .role')].map(e => e.textContent); return v.dataset.state === 'shown' && r.some(x => x.includes('WebSocket consumer')) ? r : null;",
        )
        .await;
    let roles: Vec<&str> = roles
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(
        roles[0].starts_with("a consumer's request, sent to the agent of"),
        "{roles:?}"
    );
    assert!(roles.iter().any(|r| r.ends_with("answers")), "{roles:?}");
    assert!(
        roles.iter().any(|r| r.contains("publishes on the bus")),
        "the event: {roles:?}"
    );
    assert!(
        roles
            .iter()
            .any(|r| r == &"the sidecar hands it to 1 WebSocket consumer"),
        "{roles:?}"
    );
    let title = browser
        .js("return document.querySelector('#trace-title').textContent;")
        .await;
    assert_eq!(title, format!("Trace {trace}"));
    // Every bar lies on the trace's time axis.
    let bars = browser
        .js("return [...document.querySelectorAll('#waterfall .bar')].map(b => [parseFloat(b.style.left), parseFloat(b.style.width)]);")
        .await;
    for bar in bars.as_array().unwrap() {
        let (left, width) = (bar[0].as_f64().unwrap(), bar[1].as_f64().unwrap());
        assert!(
            left >= 0.0 && width > 0.0 && left + width <= 100.01,
            "{bars}"
        );
    }
    // A span's attributes, on a click.
    browser.click("#waterfall li button.span-name").await;
    let detail = browser
        .wait_for(
            "the span's attributes",
            Duration::from_secs(5),
            "const d = document.querySelector('#span-detail dl'); return d ? d.textContent : null;",
        )
        .await;
    assert!(
        detail
            .as_str()
            .unwrap()
            .contains("lmos.affordancegetWeather"),
        "{detail}"
    );
    // The list has it, and a typed trace ID opens it as well.
    browser
        .wait_for(
            "the trace in the list",
            Duration::from_secs(5),
            &format!(
                "return document.querySelector('#traces tr[data-trace=\"{trace}\"]') !== null;"
            ),
        )
        .await;

    browser
        .js("document.querySelector('#trace-view').scrollIntoView();")
        .await;
    let png = browser.call("GET", "/screenshot", None).await;
    let png = base64::engine::general_purpose::STANDARD
        .decode(png.as_str().unwrap())
        .unwrap();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    std::fs::write(docs.join("console-trace.png"), &png).unwrap();

    browser
        .js("location.hash = ''; document.querySelector('#trace-view').hidden = true;")
        .await;
    browser.type_into("#traces-q", &trace).await;
    browser
        .wait_for(
            "a typed trace ID opens the trace",
            Duration::from_secs(5),
            &format!("const v = document.querySelector('#trace-view'); return !v.hidden && document.querySelector('#trace-title').textContent === 'Trace {trace}';"),
        )
        .await;
    browser.close().await;
    sidecar.stop().await;
}
