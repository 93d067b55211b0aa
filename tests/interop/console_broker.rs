//! The console as an operator's MQTT tool, in a real headless Chromium
//! (issue 47, item 2): the topic tree shows a retained reading and an
//! action status with their values and properties; publishing from the page
//! reaches an MQTT subscriber, and a principal without the right sees the
//! refusal; the clients and sessions lists show a connected MQTT client and
//! a kept session, the search filters them, an administrator's disconnect
//! ends the client and anyone else's is refused (in the page and by a
//! direct HTTP call); the recent-message search finds a message; the
//! charts have axis labels. It writes `docs/console-broker.png` and
//! `docs/console-clients.png`.

use lmos_testkit as common;

use std::path::{Path, PathBuf};

use base64::Engine;
use lmos_sidecar::config::{HttpScheme, PrincipalConfig};
use lmos_testkit::webdriver::{browser_available, start_driver, Browser};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::json;
use tokio::sync::mpsc;

const THING: &str = "urn:test:boiler";

fn principal(dir: &Path, name: &str) -> PrincipalConfig {
    let path = dir.join(name);
    std::fs::write(&path, format!("{name}-pw")).unwrap();
    PrincipalConfig {
        name: name.into(),
        password_file: path.display().to_string(),
        ..PrincipalConfig::default()
    }
}

/// An MQTT 3.1.1 client of `user`'s; its publications and its end go to
/// the returned receiver (`None` once the connection ended).
fn mqtt(
    sidecar: &common::TestSidecar,
    id: &str,
    user: &str,
    clean: bool,
) -> (
    AsyncClient,
    mpsc::UnboundedReceiver<Option<(String, String)>>,
) {
    let mut options = MqttOptions::new(id, "127.0.0.1", sidecar.mqtt.port());
    options.set_credentials(user, format!("{user}-pw"));
    options.set_clean_session(clean);
    let (client, mut eventloop) = AsyncClient::new(options, 100);
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let payload = String::from_utf8_lossy(&p.payload).into_owned();
                    let _ = tx.send(Some((p.topic, payload)));
                }
                Ok(_) => {}
                Err(_) => {
                    let _ = tx.send(None);
                    return;
                }
            }
        }
    });
    (client, rx)
}

async fn screenshot(browser: &Browser, name: &str) {
    let png = browser.call("GET", "/screenshot", None).await;
    let png = base64::engine::general_purpose::STANDARD
        .decode(png.as_str().unwrap())
        .unwrap();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    std::fs::write(docs.join(name), &png).unwrap();
}

/// Sets a field's value as typing would and fires its `input` event.
async fn set(browser: &Browser, css: &str, value: &str) {
    let script = format!(
        "const e = document.querySelector({}); e.value = {}; e.dispatchEvent(new Event('input'));",
        json!(css),
        json!(value)
    );
    browser.js(&script).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_topics_publishes_and_administers_clients() {
    if !browser_available() {
        return;
    }
    let dir: PathBuf =
        std::env::temp_dir().join(format!("lmos-console-broker-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut config = common::test_config();
    config.http.authentication = vec![HttpScheme::Basic];
    let mut admin = principal(&dir, "admin");
    admin.consume = vec!["*".into()];
    admin.operate = vec!["*".into()];
    admin.host = vec!["*".into()];
    let mut viewer = principal(&dir, "viewer");
    viewer.consume = vec!["*".into()];
    config.auth.principals = vec![admin, viewer];
    config.console.administrators = vec!["admin".into()];
    let sidecar = common::TestSidecar::start_with(config).await;

    // An agent (as admin, who hosts everything) reports an action status;
    // a viewer subscribes to the Thing's properties; a viewer's kept
    // session whose client has gone.
    let (agent, _agent_rx) = mqtt(&sidecar, "boiler-agent", "admin", true);
    let status_topic = format!("lmos/{THING}/actions/heat/status/inv-1");
    let status = json!({"thingID": THING, "messageType": "actionStatus", "action": "heat", "status": "running", "correlationID": "inv-1"});
    agent
        .publish(&status_topic, QoS::AtLeastOnce, false, status.to_string())
        .await
        .unwrap();
    let (watcher, mut watched) = mqtt(&sidecar, "watcher", "viewer", true);
    let reading_topic = format!("lmos/{THING}/properties/temperature");
    watcher
        .subscribe(&reading_topic, QoS::AtLeastOnce)
        .await
        .unwrap();
    let (kept, mut kept_rx) = mqtt(&sidecar, "kept-one", "viewer", false);
    kept.subscribe(format!("lmos/{THING}/events/+"), QoS::AtLeastOnce)
        .await
        .unwrap();
    kept.disconnect().await.unwrap();
    assert_eq!(kept_rx.recv().await, Some(None), "the kept client left");

    let driver = start_driver().await;
    let browser = Browser::open(&driver, 1280, 1100).await;
    let base = sidecar.http;
    browser
        .open_console(
            &format!("http://admin:admin-pw@{base}/console"),
            "the admin's console",
            "#tree",
        )
        .await;

    // Publishing a retained reading from the page reaches the subscriber.
    let reading = json!({"thingID": THING, "messageType": "propertyReading", "name": "temperature", "value": 21.5});
    set(&browser, "#publish [name=topic]", &reading_topic).await;
    set(&browser, "#publish [name=payload]", &reading.to_string()).await;
    browser
        .js("document.querySelector('#publish [name=retain]').checked = true;")
        .await;
    browser.click("#publish button[type=submit]").await;
    browser
        .wait_for(
            "the page says it published",
            common::WAIT,
            "return document.querySelector('#publish-result').dataset.outcome === 'published';",
        )
        .await;
    let got = tokio::time::timeout(common::WAIT, watched.recv())
        .await
        .expect("the subscriber got the page's publication");
    let (topic, payload) = got.unwrap().unwrap();
    assert_eq!(topic, reading_topic);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&payload).unwrap()["value"],
        21.5
    );

    // The tree: the retained reading and the action status, with values.
    browser
        .wait_for(
            "the tree shows the reading and the action status",
            common::WAIT,
            &format!(
                "return document.querySelector('#tree button[data-topic={}]') && document.querySelector('#tree button[data-topic={}]');",
                json!(reading_topic),
                json!(status_topic)
            ),
        )
        .await;
    browser.click("#tree-expand").await;
    browser
        .click(&format!("#tree button[data-topic={}]", json!(status_topic)))
        .await;
    let shown = browser
        .js("return document.querySelector('#topic-detail').innerText;")
        .await;
    let shown = shown.as_str().unwrap();
    assert!(
        shown.contains("\"status\": \"running\""),
        "pretty JSON: {shown}"
    );
    assert!(shown.contains("retained\nno"), "{shown}");
    browser
        .click(&format!(
            "#tree button[data-topic={}]",
            json!(reading_topic)
        ))
        .await;
    let shown = browser
        .js("return document.querySelector('#topic-detail').innerText;")
        .await;
    let shown = shown.as_str().unwrap();
    assert!(shown.contains("\"value\": 21.5"), "{shown}");
    assert!(shown.contains("retained\nyes"), "{shown}");
    assert!(shown.contains("last update"), "{shown}");
    browser
        .js("document.querySelector('#h-topics').scrollIntoView();")
        .await;
    screenshot(&browser, "console-broker.png").await;

    // The recent-message search finds the status by a word of its payload.
    set(&browser, "#recent-q", "running").await;
    browser
        .wait_for(
            "the search finds the action status",
            common::WAIT,
            &format!(
                "const r = [...document.querySelectorAll('#recent li[data-topic]')].map(l => l.dataset.topic); return r.length === 1 && r[0] === {} ;",
                json!(status_topic)
            ),
        )
        .await;

    // Clients and sessions: the live watcher and the kept session; the
    // search narrows to one.
    browser
        .wait_for(
            "the lists show a connected client and a kept session",
            common::WAIT,
            r#"return document.querySelector('tr[data-client="watcher"][data-connected="yes"] button[data-disconnect]') && document.querySelector('tr[data-client="kept-one"][data-connected="no"][data-kept="yes"]');"#,
        )
        .await;
    set(&browser, "#clients-q", "kept").await;
    browser
        .wait_for(
            "the search keeps only the kept session",
            common::WAIT,
            "const r = [...document.querySelectorAll('#mqtt-clients tr[data-client]')].map(r => r.dataset.client); return r.length === 1 && r[0] === 'kept-one';",
        )
        .await;
    set(&browser, "#clients-q", "").await;
    browser
        .wait_for(
            "all again",
            common::WAIT,
            r#"return document.querySelector('tr[data-client="watcher"] button[data-disconnect]');"#,
        )
        .await;
    browser
        .js("document.querySelector('#h-clients').scrollIntoView();")
        .await;
    screenshot(&browser, "console-clients.png").await;

    // The charts have labelled axes.
    let unit = browser
        .wait_for(
            "the chart's y axis",
            common::WAIT,
            "const u = document.querySelector('#charts svg text.axis-unit'); return u && document.querySelector('#charts svg text.axis-x') ? u.textContent : null;",
        )
        .await;
    assert_eq!(unit, "msg/s");

    // A viewer: may not publish readings, sees no disconnect button, and
    // its direct disconnect is refused.
    let other = Browser::open(&driver, 1000, 900).await;
    other
        .open_console(
            &format!("http://viewer:viewer-pw@{base}/console"),
            "the viewer's console",
            "#tree",
        )
        .await;
    set(&other, "#publish [name=topic]", &reading_topic).await;
    set(&other, "#publish [name=payload]", "{}").await;
    other.click("#publish button[type=submit]").await;
    let refusal = other
        .wait_for(
            "the viewer's publication is refused",
            common::WAIT,
            "const r = document.querySelector('#publish-result'); return r.dataset.outcome === 'refused' ? r.textContent : null;",
        )
        .await;
    assert!(
        refusal.as_str().unwrap().contains("403"),
        "the refusal says why: {refusal}"
    );
    other
        .wait_for(
            "the viewer sees its own watcher without a button",
            common::WAIT,
            r#"return document.querySelector('#clients-note').dataset.administer === 'no' && document.querySelector('tr[data-client="watcher"]') && !document.querySelector('button[data-disconnect]');"#,
        )
        .await;
    let by_page = other
        .js("return fetch(location.origin + '/console/disconnect', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify({clientId: 'watcher'})}).then(r => r.status);")
        .await;
    assert_eq!(by_page, 403, "the server refuses the viewer's disconnect");
    let viewer_auth = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("viewer:viewer-pw")
    );
    let direct = common::http_with(
        base,
        "POST",
        "/console/disconnect",
        &[
            ("Authorization", &viewer_auth),
            ("Content-Type", "application/json"),
        ],
        br#"{"clientId":"watcher"}"#,
    )
    .await;
    assert_eq!(direct.status, 403, "{}", direct.body);
    // A page on another site cannot publish, even with the admin's
    // credentials in the browser.
    let admin_auth = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("admin:admin-pw")
    );
    let cross = common::http_with(
        base,
        "POST",
        "/console/publish",
        &[
            ("Authorization", &admin_auth),
            ("Content-Type", "application/json"),
            ("Origin", "http://evil.example"),
            ("Sec-Fetch-Site", "cross-site"),
        ],
        br#"{"topic":"lmos/x/td","payload":"{}"}"#,
    )
    .await;
    assert_eq!(cross.status, 403, "{}", cross.body);
    let simple = common::http_with(
        base,
        "POST",
        "/console/publish",
        &[
            ("Authorization", &admin_auth),
            ("Content-Type", "text/plain"),
        ],
        br#"{"topic":"lmos/x/td","payload":"{}"}"#,
    )
    .await;
    assert_eq!(simple.status, 415, "{}", simple.body);
    other.close().await;

    // The admin disconnects the watcher: its connection ends.
    browser
        .click(r#"tr[data-client="watcher"] button[data-disconnect]"#)
        .await;
    browser
        .wait_for(
            "the page says it disconnected",
            common::WAIT,
            "return document.querySelector('#disconnect-result').dataset.outcome === 'disconnected';",
        )
        .await;
    loop {
        let next = tokio::time::timeout(common::WAIT, watched.recv())
            .await
            .expect("the watcher's connection ended");
        if matches!(next, Some(None) | None) {
            break;
        }
    }
    browser.close().await;
}
