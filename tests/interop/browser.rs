//! Cross-site attacks in a real headless Chromium (over WebDriver, see
//! `lmos_testkit::webdriver`), against a sidecar on loopback without
//! authentication, as on a developer's machine, whose one Thing's agent is
//! this test:
//!
//! - a page from another origin (a second loopback port, served by this
//!   test) tries a WebSocket to `/lmos` (plain and `?host=` a Thing that is
//!   offline), a `fetch` POST invoking an action and a PUT writing a
//!   property with `text/plain`, a JSON POST, a TD registration, and a
//!   form post: all fail, the sidecar counts each refusal it received, and
//!   the agent sees nothing;
//! - a page whose DNS name was rebound to the sidecar (Chromium's
//!   `--host-resolver-rules` maps `evil.example` to 127.0.0.1) gets 421 for
//!   the page, its same-origin JSON POST and its WebSocket;
//! - the same WebSocket and JSON POST from the sidecar's own origin work,
//!   and its `text/plain` PUT gets a readable 415.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs
//! them); without them the test fails, unless `LMOS_SKIP_BROWSER_TESTS=1`
//! says skipping is fine.

use lmos_testkit as common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{http_limit_hits, lmos, start_with_lamp, test_config, urlencode, LAMP};
use lmos_testkit::webdriver::{browser_available, start_driver, Browser};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const THING: &str = LAMP;
const OFFLINE: &str = "urn:test:offline";

/// What the pages run: `attack(base)` tries everything against the
/// sidecar at `base` and leaves each outcome in `window.outcome`.
const SCRIPT: &str = r#"
window.attack = async (base, thing) => {
  const out = {};
  const ws = (url) => new Promise((resolve) => {
    let s;
    try { s = new WebSocket(url, "lmosprotocol"); } catch (e) { resolve("threw"); return; }
    s.onopen = () => { resolve("open"); s.close(); };
    s.onerror = () => resolve("error");
    setTimeout(() => resolve("timeout"), 5000);
  });
  const send = async (method, path, type, body) => {
    try {
      const r = await fetch(base + path, { method, headers: type ? { "Content-Type": type } : {}, body });
      return "status " + r.status;
    } catch (e) { return "blocked"; }
  };
  const t = "/things/" + encodeURIComponent(thing);
  const wsBase = base.replace(/^http/, "ws");
  out.ws = await ws(wsBase + "/lmos");
  out.wsHost = await ws(wsBase + "/lmos?host=" + encodeURIComponent("urn:test:offline"));
  out.postText = await send("POST", t + "/actions/go", "text/plain", '{"city":"Oslo"}');
  out.putText = await send("PUT", t + "/properties/mode", "text/plain", '"evil"');
  out.postJson = await send("POST", t + "/actions/go", "application/json", '{"city":"Oslo"}');
  out.register = await send("POST", "/things", "text/plain", JSON.stringify({ title: "Evil" }));
  // Reads that need no CORS: the page cannot see the answer, but before
  // issue 43 the agent worked for them.
  out.img = await new Promise((resolve) => {
    const img = new Image();
    img.onload = () => resolve("loaded");
    img.onerror = () => resolve("error");
    img.src = base + t + "/properties/mode";
    setTimeout(() => resolve("timeout"), 5000);
  });
  out.noCors = await fetch(base + t + "/properties/mode", { mode: "no-cors" })
    .then((r) => r.type, () => "blocked");
  out.form = await new Promise((resolve) => {
    const frame = document.createElement("iframe");
    frame.name = "sink";
    document.body.append(frame);
    const form = document.createElement("form");
    form.method = "POST";
    form.enctype = "text/plain";
    form.target = "sink";
    form.action = base + t + "/actions/go";
    const input = document.createElement("input");
    input.name = '{"city":"';
    input.value = '"}';
    form.append(input);
    document.body.append(form);
    frame.onload = () => resolve("submitted");
    form.submit();
    setTimeout(() => resolve("timeout"), 5000);
  });
  window.outcome = out;
};
"#;

/// The other origin: every GET gets a page with [`SCRIPT`].
async fn serve_other_origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let page = format!(
        "<!doctype html><html><body><p>another site</p><script>{SCRIPT}</script></body></html>"
    );
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let page = page.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                    page.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

/// Runs `attack` in the page and waits for its outcome.
async fn attack(browser: &Browser, base: &str) -> Value {
    browser
        .js(&format!(
            "window.outcome = null; if (!window.attack) {{ {SCRIPT} }} attack({base:?}, {THING:?}); return true;"
        ))
        .await;
    let outcome = browser
        .wait_for(
            "the page's attempts",
            Duration::from_secs(20),
            "return window.outcome ? JSON.stringify(window.outcome) : null;",
        )
        .await;
    serde_json::from_str(outcome.as_str().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_other_origins_and_rebound_names_cannot_drive_the_agent() {
    if !browser_available() {
        return;
    }
    let started = Instant::now();
    let (sidecar, mut agent) = start_with_lamp(test_config()).await;
    let s = sidecar.http;
    let sidecar_base = format!("http://{s}");
    let other = serve_other_origin().await;
    let driver = start_driver().await;

    // Another origin: a page on another loopback port.
    let browser = Browser::open_with(&driver, 800, 600, &[]).await;
    browser.goto(&format!("http://{other}/")).await;
    let outcome = attack(&browser, &sidecar_base).await;
    let expected = json!({
        "ws": "error", "wsHost": "error",
        // Sent (no preflight for text/plain), refused, and unreadable.
        "postText": "blocked", "register": "blocked",
        // Preflighted, and the preflight is not granted.
        "putText": "blocked", "postJson": "blocked",
        "form": "submitted",
        // Refused (403) before the agent is asked; an image that is not one.
        "img": "error", "noCors": "opaque",
    });
    assert_eq!(outcome, expected);
    // The sidecar received and refused the WebSockets, the text POSTs, the
    // form, the two cross-site reads, and the two preflights (`Sec-Fetch-Site: same-site` from an
    // origin not admitted: issue 43's cross-site rule refuses the OPTIONS
    // before any handler); the browser itself then stopped the PUT and the
    // JSON POST.
    assert_eq!(http_limit_hits(s, "allowed_origins").await, 9);
    agent.assert_nothing_pending().await;
    let things = common::http(s, "GET", "/things", None, b"").await.json();
    assert_eq!(things.as_array().unwrap().len(), 1, "{things}");
    // Nobody took the offline Thing's place.
    drop(sidecar.ws_agent(OFFLINE).await);
    browser.close().await;

    // DNS rebinding: `evil.example` now resolves to the sidecar.
    let rebound = Browser::open_with(
        &driver,
        800,
        600,
        &["--host-resolver-rules=MAP evil.example 127.0.0.1"],
    )
    .await;
    let evil_base = format!("http://evil.example:{}", s.port());
    rebound.goto(&format!("{evil_base}/healthz")).await;
    let page = rebound.js("return document.body.innerText;").await;
    let page = page.as_str().unwrap();
    assert!(
        page.contains("421") && page.contains("http.allowed_hosts"),
        "{page}"
    );
    let outcome = attack(&rebound, &evil_base).await;
    // Same origin now: everything is sent, and readable as refused.
    assert_eq!(outcome["ws"], "error", "{outcome}");
    assert_eq!(outcome["wsHost"], "error", "{outcome}");
    for attempt in ["postText", "putText", "postJson", "register"] {
        assert_eq!(outcome[attempt], "status 421", "{attempt}: {outcome}");
    }
    agent.assert_nothing_pending().await;
    assert!(http_limit_hits(s, "allowed_hosts").await >= 8);
    rebound.close().await;

    // The sidecar's own origin: a document it serves.
    let own = Browser::open_with(&driver, 800, 600, &[]).await;
    own.goto(&format!("{sidecar_base}/healthz")).await;
    let script = format!(
        "window.own = null; (async () => {{ \
           const ws = await new Promise((resolve) => {{ const s = new WebSocket({ws:?}, 'lmosprotocol'); s.onopen = () => {{ resolve('open'); s.close(); }}; s.onerror = () => resolve('error'); }}); \
           const text = await fetch({property:?}, {{ method: 'PUT', headers: {{ 'Content-Type': 'text/plain' }}, body: '\"x\"' }}); \
           const json = await fetch({action:?}, {{ method: 'POST', headers: {{ 'Content-Type': 'application/json' }}, body: '{{\"city\":\"Oslo\"}}' }}); \
           window.own = {{ ws, text: text.status, json: json.status, output: await json.json() }}; \
         }})(); return true;",
        ws = format!("ws://{s}/lmos"),
        property = format!("/things/{}/properties/mode", urlencode(THING)),
        action = format!("/things/{}/actions/go", urlencode(THING)),
    );
    own.js(&script).await;
    let request = agent.recv().await;
    assert_eq!(request["messageType"], "invokeAction");
    assert_eq!(request["input"], json!({"city": "Oslo"}));
    agent
        .send(lmos(
            THING,
            "actionStatus",
            json!({"action": "go", "status": "completed", "output": "sunny", "correlationID": request["correlationID"]}),
        ))
        .await;
    let own_outcome = own
        .wait_for(
            "the own origin's attempts",
            Duration::from_secs(10),
            "return window.own ? JSON.stringify(window.own) : null;",
        )
        .await;
    let own_outcome: Value = serde_json::from_str(own_outcome.as_str().unwrap()).unwrap();
    assert_eq!(
        own_outcome,
        json!({"ws": "open", "text": 415, "json": 200, "output": "sunny"})
    );
    agent.assert_nothing_pending().await;
    own.close().await;

    drop(driver);
    sidecar.stop().await;
    println!(
        "browser test: other origin {expected}; {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
}
