//! The console as a newcomer finds it some minutes after the sidecar
//! started (issue 34), in headless Chromium like `tests/interop/console.rs`:
//! traffic from before the page opened is in its charts (the sidecar keeps
//! the history), the errors are broken down by kind, a link opens a Thing's
//! view directly, its TD is a link away with its MQTT topics listed, a
//! property's write form starts
//! from the current value, the header says what `/readyz` says, and a
//! free-form message gets its answer. Needs `chromium` and `chromium-driver` (or
//! `LMOS_SKIP_BROWSER_TESTS=1`).

use std::time::Duration;

use lmos_testkit as common;
use lmos_testkit::weather_agent::{self, THING_ID};
use lmos_testkit::webdriver::{browser_available, start_driver, Browser};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_what_came_before_it_opened() {
    if !browser_available() {
        return;
    }
    let sidecar = weather_agent::start_sidecar().await;
    // Traffic and two errors before any page is open.
    let mut consumer = sidecar.ws().await;
    for i in 0..5 {
        consumer
            .send(common::lmos(
                THING_ID,
                "readProperty",
                json!({"name": "modelConfiguration", "correlationID": format!("r{i}")}),
            ))
            .await;
        consumer.recv().await;
    }
    for thing in ["urn:nobody-1", "urn:nobody-2"] {
        consumer
            .send(common::lmos(thing, "readProperty", json!({"name": "x"})))
            .await;
        assert_eq!(consumer.recv().await["messageType"], "error");
    }
    // Two samples apart, so the traffic is a point of the history.
    tokio::time::sleep(Duration::from_millis(2_200)).await;

    let driver = start_driver().await;
    let browser = Browser::open(&driver, 1280, 1000).await;
    // A link to the Thing's view, as the page itself offers it.
    let link = format!(
        "http://{}/console#thing={}",
        sidecar.http,
        common::urlencode(THING_ID)
    );
    browser.goto(&link).await;
    let legend = browser
        .wait_for(
            "the traffic before the page opened",
            Duration::from_secs(5),
            r#"const f = document.querySelector('#charts figure'); return f && !f.textContent.includes('none so far') ? f.textContent : null;"#,
        )
        .await;
    assert!(legend.as_str().unwrap().contains("websocket"), "{legend}");
    // What the charts plot includes seconds from before the page existed
    // (the page's own traffic would fill them only from its opening on).
    let before = browser
        .js("return app.history.filter((p) => p.t < performance.timeOrigin && (p.transport.websocket || 0) > 0).length;")
        .await;
    assert!(
        before.as_u64().unwrap() >= 1,
        "points before the page: {before}"
    );
    let errors = browser
        .wait_for(
            "the errors by kind",
            Duration::from_secs(5),
            r#"const e = document.querySelector('#problems [data-problem="errors"]'); return e ? e.textContent : null;"#,
        )
        .await;
    let errors = errors.as_str().unwrap();
    assert!(
        errors.starts_with("errors 2") && errors.contains('('),
        "total and kinds: {errors}"
    );
    // The link opened the Thing; its form holds the current value.
    let current = browser
        .wait_for(
            "the current value in the write form",
            Duration::from_secs(5),
            r#"const i = document.querySelector('form[data-write="modelConfiguration"] input[name="modelName"]'); return i && i.value ? i.value : null;"#,
        )
        .await;
    assert_eq!(current, "gpt-4o");
    let shown = browser
        .js(r#"return document.querySelector('[data-current="modelConfiguration"]').textContent;"#)
        .await;
    assert!(shown.as_str().unwrap().contains("gpt-4o"), "{shown}");
    let td = browser
        .js(r#"return document.querySelector('#detail-id a[data-link="td"]').href;"#)
        .await;
    let td = td.as_str().unwrap().to_owned();
    assert!(
        // encodeURIComponent's spelling.
        td.ends_with(&format!("/things/{}", THING_ID.replace(':', "%3A"))),
        "{td}"
    );
    let path = td
        .split_once(&sidecar.http.to_string())
        .unwrap()
        .1
        .to_owned();
    let served = common::http(sidecar.http, "GET", &path, None, b"").await;
    assert_eq!(served.status, 200, "the TD link works: {}", served.body);

    // The Thing's MQTT topics, from its TD: the retained reading's too.
    let topic = format!("lmos/{THING_ID}/properties/modelConfiguration");
    let row = browser
        .js(&format!(
            r#"const r = document.querySelector('#topics tr[data-topic="{topic}"]'); return r ? r.textContent : null;"#
        ))
        .await;
    assert!(
        row.as_str()
            .is_some_and(|r| r.contains("observeproperty") && r.contains("LMOS messages")),
        "{row}"
    );

    // Health from /readyz in the header.
    let health = browser
        .wait_for(
            "the health line",
            Duration::from_secs(5),
            r#"const h = document.querySelector('#health'); return h && h.dataset.ready ? h.dataset.ready + ' ' + h.textContent : null;"#,
        )
        .await;
    assert_eq!(health, "yes ready", "no cluster, nothing reached");
    // The agent, this test's consumer and the page itself, as of the last
    // poll (which may have come before the page's own connection).
    let connections = browser
        .js("return document.querySelector('#connections').textContent;")
        .await;
    let websocket: u32 = connections
        .as_str()
        .unwrap()
        .split(" · ")
        .find_map(|part| part.rsplit_once("websocket "))
        .and_then(|(_, n)| n.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{connections}"));
    assert!((2..=3).contains(&websocket), "{connections}");
    // Without authentication everyone is `anonymous`: all of them are the
    // caller's own.
    let yours: u32 = connections
        .as_str()
        .unwrap()
        .split_once("(yours: ")
        .and_then(|(_, rest)| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{connections}"));
    // Counted from another poll than the total: the page's own
    // connection may be in one and not yet in the other.
    assert!((2..=3).contains(&yours), "{connections}");

    // The free-form panel: a message of one's own, and its answer.
    let message = json!({"thingID": THING_ID, "messageType": "readProperty", "name": "modelConfiguration", "correlationID": "free-1"});
    browser
        .submit("#send", "message", &message.to_string())
        .await;
    let answer = browser
        .wait_for(
            "the answer to the free-form message",
            Duration::from_secs(5),
            r#"const a = [...document.querySelectorAll('#answers li')].find((li) => li.textContent.includes('←')); return a ? a.textContent : null;"#,
        )
        .await;
    let answer = answer.as_str().unwrap();
    assert!(
        answer.contains(r#""messageType":"propertyReading""#) && answer.contains("free-1"),
        "{answer}"
    );
    browser.close().await;
    drop(driver);
    sidecar.stop().await;
}
