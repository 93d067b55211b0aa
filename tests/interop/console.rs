//! The live console (`GET /console`) in a real headless Chromium, driven
//! over the WebDriver protocol (chromedriver, spoken here over plain HTTP),
//! against a sidecar with the example WeatherAgent: the agent appears, an
//! action invoked from the generated form shows `pending` … `completed`,
//! the agent's event shows up in the live list within a second, nothing is
//! loaded from anywhere but the sidecar (and Chromium's proxy for anything
//! else is a closed port), a flood of events is sampled with a notice while
//! the page keeps answering, the layout fits a phone, and a principal that
//! may only consume sees its write refused. It writes `docs/console.png`. Needs Debian's `chromium` and `chromium-driver`
//! (`.ci/run` installs them); without them the test fails, unless
//! `LMOS_SKIP_BROWSER_TESTS=1` says skipping is fine.

use lmos_testkit as common;

use lmos_testkit::weather_agent;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use lmos_sidecar::config::{HttpScheme, PrincipalConfig};
use lmos_testkit::webdriver::{browser_available, start_driver, Browser};
use serde_json::{json, Value};
use weather_agent::THING_ID;

/// Opens the WeatherAgent's card and waits for its `form` to show.
async fn open_thing(browser: &Browser, form: &str, what: &str) {
    browser
        .click(&format!(r#"button[data-open="{THING_ID}"]"#))
        .await;
    browser
        .wait_for(
            what,
            Duration::from_secs(5),
            &format!("return document.querySelector('{form}') !== null;"),
        )
        .await;
}

fn secret_file(dir: &Path, name: &str, secret: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, secret).unwrap();
    path.display().to_string()
}

fn principal(name: &str) -> PrincipalConfig {
    PrincipalConfig {
        name: name.into(),
        ..PrincipalConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_the_agent_its_events_and_invocations_and_refuses_what_the_principal_may_not(
) {
    if !browser_available() {
        return;
    }
    let started = Instant::now();
    let dir: PathBuf = std::env::temp_dir().join(format!("lmos-console-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut config = common::test_config();
    config.http.authentication = vec![HttpScheme::Basic, HttpScheme::Bearer];
    let mut operator = principal("operator");
    operator.password_file = secret_file(&dir, "operator", "operator-pw");
    operator.consume = vec!["*".into()];
    operator.operate = vec!["*".into()];
    let mut viewer = principal("viewer");
    viewer.password_file = secret_file(&dir, "viewer", "viewer-pw");
    viewer.consume = vec!["*".into()];
    let mut agent = principal("weather-agent");
    agent.token_file = secret_file(&dir, "agent", "agent-token");
    agent.host = vec![THING_ID.into()];
    config.auth.principals = vec![operator, viewer, agent];
    config.tracing.jaeger_ui_url = "http://jaeger.invalid:16686".into();
    // The flood below must not cost the page its connection; what a slow
    // page misses under `drop` is what sampling would skip anyway.
    config.gateway.slow_consumer = lmos_sidecar::config::SlowConsumerPolicy::Drop;
    // The example agent authenticates with its token, as LMOS_TOKEN gives
    // it in the Kubernetes example (not set here: the environment is one
    // for every test in this binary).
    let sidecar = common::TestSidecar::start_with(config).await;
    // The agent's TD, registered on its socket, as the operator sees it.
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("operator:operator-pw")
    );
    weather_agent::start_with_token(&sidecar, "agent-token", &basic).await;
    let origin = format!("http://{}", sidecar.http);
    let driver = start_driver().await;

    // An operator: sees the agent, invokes, sees the event.
    let browser = Browser::open(&driver, 1280, 1100).await;
    let row = format!(r#"tr[data-thing="{THING_ID}"]"#);
    browser
        .open_console(
            &format!("http://operator:operator-pw@{}/console", sidecar.http),
            "the agent appears, connected over WebSocket",
            &format!(r#"{row}[data-agent="websocket"]"#),
        )
        .await;
    // Its own connection is counted as its own, not the agent's.
    browser
        .wait_for(
            "the operator's own connection",
            Duration::from_secs(5),
            "const c = document.querySelector('#connections').textContent; return c.includes('websocket 2 (yours: 1 ') ? c : null;",
        )
        .await;
    let form = r#"form[data-invoke="getWeather"]"#;
    open_thing(&browser, form, "the action's form").await;
    browser
        .submit(form, "question", "What is the weather in Oslo?")
        .await;
    let statuses = browser
        .wait_for(
            "the invocation completes",
            Duration::from_secs(5),
            r#"const li = document.querySelector('#invocations li'); return li && li.dataset.status === 'completed' ? li.dataset.statuses : null;"#,
        )
        .await;
    let completed = Instant::now();
    let statuses: Vec<&str> = statuses.as_str().unwrap().split(' ').collect();
    assert_eq!(statuses.first(), Some(&"pending"), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&"completed"), "{statuses:?}");
    let text = browser
        .js("return document.querySelector('#invocations li').textContent;")
        .await;
    assert!(
        text.as_str().unwrap().contains("sunny"),
        "the output is shown: {text}"
    );
    // The agent sends its event right after `completed`.
    let latency = browser
        .wait_for(
            "the event in the live list",
            Duration::from_secs(1),
            r#"const li = document.querySelector('#live li[data-kind="event"][data-name="userFeedbackReceived"]'); return li ? li.dataset.latency : null;"#,
        )
        .await;
    let shown_after = completed.elapsed();
    let latency: i64 = latency.as_str().unwrap().parse().unwrap();
    assert!(
        latency < 1000,
        "the event showed {latency} ms after the agent stamped it"
    );

    // Nothing was loaded from anywhere but the sidecar.
    let loaded = browser
        .js("return [location.href].concat(performance.getEntriesByType('resource').map(e => e.name)).map(u => new URL(u).origin + new URL(u).pathname);")
        .await;
    let loaded: Vec<&str> = loaded
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(loaded.len() >= 3, "page, script, style: {loaded:?}");
    for url in &loaded {
        assert!(
            url.starts_with(&format!("{origin}/")),
            "{url} is not the sidecar"
        );
    }

    // A spoken answer plays in the page (issue 48 item 3): the WAV chunks
    // the agent streams, put together as one audio element the browser
    // decodes (11 words of 150 ms).
    browser
        .js(&format!(
            r#"document.querySelector('{form} [name="interactionMode"]').value = '"voice"'; return true;"#
        ))
        .await;
    browser
        .click(&format!(r#"{form} button[type="submit"]"#))
        .await;
    let spoken = browser
        .wait_for(
            "the spoken forecast's audio is playable",
            Duration::from_secs(10),
            "const a = document.querySelector('#invocations li audio'); return a && a.readyState >= 1 ? [a.dataset.audio, a.duration, a.closest('li').dataset.status] : null;",
        )
        .await;
    assert_eq!(spoken[0], "audio/wav", "{spoken}");
    let seconds = spoken[1].as_f64().unwrap();
    assert!((1.6..1.7).contains(&seconds), "{seconds} s of audio");
    assert_eq!(spoken[2], "completed");

    // Every topic of the Thing, those its TD's forms leave out included,
    // each wrapping only after a `/` (issue 47, point 13).
    browser
        .js("document.querySelector('#topics-box').open = true;")
        .await;
    let topics = browser
        .wait_for(
            "the topic table lists the Thing's topics",
            Duration::from_secs(5),
            "const r = [...document.querySelectorAll('#topics tbody tr[data-topic]')].map(r => r.dataset.topic); return r.length ? r : null;",
        )
        .await;
    let topics: Vec<&str> = topics
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for suffix in [
        "/actions/getWeather/status/+",
        "/replies/+",
        "/td",
        "/agent/status",
        "/agent/replies",
        "/events/userFeedbackReceived",
    ] {
        assert!(
            topics.iter().any(|t| t.ends_with(suffix)),
            "{suffix} missing from {topics:?}"
        );
    }
    let mid_word = browser
        .js("const c = document.querySelector('#topics code.topic'); return getComputedStyle(c).overflowWrap + ' ' + getComputedStyle(c).wordBreak + ' ' + c.querySelectorAll('wbr').length;")
        .await;
    let mid_word = mid_word.as_str().unwrap().to_owned();
    assert!(
        mid_word.starts_with("normal normal ") && !mid_word.ends_with(" 0"),
        "a topic wraps only at its <wbr>s: {mid_word}"
    );
    // The charts have a y axis with its unit and an x axis with clock times.
    let axes = browser
        .wait_for(
            "the charts' axes",
            Duration::from_secs(5),
            r"const svg = document.querySelector('#charts svg'); if (!svg) return null; const u = svg.querySelector('text.axis-unit'); const x = [...svg.querySelectorAll('text.axis-x')].map(t => t.textContent); const y = svg.querySelectorAll('text.axis-y').length; return u && x.length && y >= 2 ? [u.textContent, x, y] : null;",
        )
        .await;
    assert_eq!(axes[0], "msg/s", "{axes}");
    let ticks = axes[1].as_array().unwrap();
    assert!(
        ticks.iter().all(|t| {
            let t = t.as_str().unwrap();
            t.len() == 5 && t.as_bytes()[2] == b':'
        }),
        "the x axis is labelled with clock times: {axes}"
    );

    // Let the plots gather a few points, then the screenshot for the README.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    browser.js("window.scrollTo(0, 0);").await;
    let png = browser.call("GET", "/screenshot", None).await;
    let png = base64::engine::general_purpose::STANDARD
        .decode(png.as_str().unwrap())
        .unwrap();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("console.png"), &png).unwrap();
    browser
        .js("document.querySelector('#topics-box').scrollIntoView();")
        .await;
    let png = browser.call("GET", "/screenshot", None).await;
    let png = base64::engine::general_purpose::STANDARD
        .decode(png.as_str().unwrap())
        .unwrap();
    std::fs::write(docs.join("console-topics.png"), &png).unwrap();

    // A flood of events: the page samples, says so, and stays responsive.
    // QoS 0 from a plain client: as fast as the broker takes them.
    let options = rumqttc::MqttOptions::new("flood", "127.0.0.1", sidecar.mqtt.port());
    let (mqtt, mut eventloop) = rumqttc::AsyncClient::new(options, 1000);
    let pump = tokio::spawn(async move { while eventloop.poll().await.is_ok() {} });
    let topic = format!("lmos/{THING_ID}/events/userFeedbackReceived");
    let payload = common::event(THING_ID, "userFeedbackReceived", json!({"rating": 5})).to_string();
    let flood_started = Instant::now();
    let mut sent = 0u32;
    let mut sampling = Value::Null;
    while flood_started.elapsed() < Duration::from_secs(5) {
        for _ in 0..1000 {
            mqtt.publish(&topic, rumqttc::QoS::AtMostOnce, false, payload.clone())
                .await
                .unwrap();
            sent += 1;
        }
        let asked = Instant::now();
        sampling = browser
            .js("const s = document.querySelector('#sampling'); return s.hidden ? null : s.textContent;")
            .await;
        // A page that rendered every event froze for seconds; one that
        // samples answers within a frame or two. The bound leaves room for
        // a busy 2-core CI machine running other tests at the same time
        // (500 ms failed there once, at 676 ms).
        assert!(
            asked.elapsed() < Duration::from_millis(1500),
            "the page took {:?} to answer during the flood",
            asked.elapsed()
        );
        if !sampling.is_null() {
            break;
        }
    }
    assert!(
        sampling
            .as_str()
            .is_some_and(|s| s.contains("showing 1 in")),
        "no sampling notice after {sent} events in {:?}",
        flood_started.elapsed()
    );
    pump.abort();
    let flood = format!(
        "{sent} events in {:?}, the page said \"{}\"",
        flood_started.elapsed(),
        sampling.as_str().unwrap_or_default()
    );

    // At phone width nothing sticks out sideways.
    browser
        .call(
            "POST",
            "/window/rect",
            Some(json!({"width": 390, "height": 844})),
        )
        .await;
    let overflow = browser
        .wait_for(
            "the layout at phone width",
            Duration::from_secs(2),
            "return window.innerWidth < 500 ? document.documentElement.scrollWidth - window.innerWidth : null;",
        )
        .await;
    assert!(
        overflow.as_i64().unwrap() <= 0,
        "{overflow} px wider than a phone"
    );
    browser.close().await;

    // A principal that may only consume: the write is refused, and says so.
    let browser = Browser::open(&driver, 1024, 900).await;
    browser
        .open_console(
            &format!("http://viewer:viewer-pw@{}/console", sidecar.http),
            "the viewer's console is live",
            &row,
        )
        .await;
    let write = r#"form[data-write="modelConfiguration"]"#;
    open_thing(&browser, write, "the property's form").await;
    browser.submit(write, "modelName", "o3").await;
    let refusal = browser
        .wait_for(
            "the refusal",
            Duration::from_secs(5),
            r#"const r = document.querySelector('#result-prop-modelConfiguration.error'); return r ? r.textContent : null;"#,
        )
        .await;
    let refusal = refusal.as_str().unwrap();
    assert!(
        refusal.contains("403") && refusal.contains("viewer"),
        "{refusal}"
    );
    browser.close().await;

    drop(driver);
    sidecar.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "console test: event shown {} ms after completed, {latency} ms after the agent stamped it; flood: {flood}; {:.1} s in all",
        shown_after.as_millis(),
        started.elapsed().as_secs_f64()
    );
}

/// Without a browser: the page and its state need the directory's
/// credentials, and `console.enabled = false` removes them.
#[tokio::test]
async fn the_console_needs_credentials_and_can_be_turned_off() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("lmos-console-off-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut config = common::test_config();
    config.http.authentication = vec![HttpScheme::Basic];
    let mut viewer = principal("viewer");
    viewer.password_file = secret_file(&dir, "viewer", "viewer-pw");
    viewer.consume = vec!["urn:other:*".into()];
    config.auth.principals = vec![viewer];
    let sidecar = common::TestSidecar::start_with(config.clone()).await;
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("viewer:viewer-pw")
    );
    for path in ["/console", "/console/console.js", "/console/state"] {
        let r = common::http(sidecar.http, "GET", path, None, b"").await;
        assert_eq!(r.status, 401, "{path}");
        let r =
            common::http_with(sidecar.http, "GET", path, &[("Authorization", &basic)], b"").await;
        assert_eq!(r.status, 200, "{path}");
    }
    let r = common::http_with(
        sidecar.http,
        "GET",
        "/console",
        &[("Authorization", &basic)],
        b"",
    )
    .await;
    assert!(r
        .header("content-security-policy")
        .unwrap()
        .contains("default-src 'none'"));
    let state = common::http_with(
        sidecar.http,
        "GET",
        "/console/state",
        &[("Authorization", &basic)],
        b"",
    )
    .await
    .json();
    assert_eq!(state["principal"], "viewer");
    assert_eq!(state["jaegerUiUrl"], "");
    assert!(state["counters"]["messages"].is_object(), "{state}");
    sidecar.stop().await;

    config.console.enabled = false;
    let sidecar = common::TestSidecar::start_with(config).await;
    let r = common::http_with(
        sidecar.http,
        "GET",
        "/console",
        &[("Authorization", &basic)],
        b"",
    )
    .await;
    assert_eq!(r.status, 404);
    sidecar.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
