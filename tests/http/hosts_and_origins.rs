//! What a web page could make a browser send, as raw HTTP over real
//! sockets (the browser itself is in `tests/interop/browser.rs`): a `Host` a
//! DNS-rebinding page would name (421, on HTTP and WebSocket alike), an
//! `Origin` other than the sidecar's own or `null` (403 on the WebSocket
//! handshake and every state-changing request), a body that is not JSON
//! (415), and CORS, which stays closed. The scripted agent sees none of
//! the refused requests; the same requests without `Origin`, from the
//! sidecar's own origin, or with JSON, reach it.

use lmos_testkit as common;

use std::net::SocketAddr;

use common::{
    http_limit_hits, lamp_td, lmos, start_with_lamp, test_config, urlencode, TestSidecar, LAMP,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const THING: &str = LAMP;

struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn detail(&self) -> String {
        let problem: Value = serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {} {}", self.head, self.body));
        assert_eq!(problem["status"], self.status, "{problem}");
        problem["detail"].as_str().unwrap().to_owned()
    }
}

/// One request with exactly these headers (`Host` included); the answer's
/// head, and its body by `Content-Length` (a 101 has none).
async fn raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let read = async {
        let mut raw = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await.unwrap_or(0);
            raw.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&raw).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if body.len() >= length {
                    return (head.to_owned(), body.to_owned());
                }
            }
            assert!(n > 0, "closed without an answer: {text}");
        }
    };
    let (head, body) = tokio::time::timeout(common::WAIT, read)
        .await
        .expect("an answer in time");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Answer { status, head, body }
}

const UPGRADE: [(&str, &str); 5] = [
    ("Upgrade", "websocket"),
    ("Connection", "Upgrade"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ("Sec-WebSocket-Version", "13"),
    ("Sec-WebSocket-Protocol", "lmosprotocol"),
];

async fn handshake(addr: SocketAddr, path: &str, host: &str, origin: Option<&str>) -> Answer {
    let mut headers = vec![("Host", host)];
    headers.extend(UPGRADE);
    headers.extend(origin.map(|o| ("Origin", o)));
    raw(addr, "GET", path, &headers, "").await
}

fn action() -> String {
    format!("/things/{}/actions/go", urlencode(THING))
}

fn property() -> String {
    format!("/things/{}/properties/mode", urlencode(THING))
}

#[tokio::test]
async fn host_names_a_rebinding_page_would_use_are_misdirected() {
    let (sidecar, mut agent) = start_with_lamp(test_config()).await;
    let a = sidecar.http;
    let port = a.port().to_string();
    for host in [
        "evil.example",
        &format!("evil.example:{port}"),
        "localhost.evil.example",
    ] {
        let h = [("Host", host)];
        let r = raw(a, "GET", "/readyz", &h, "").await;
        assert_eq!(r.status, 421, "{host}: {}", r.head);
        let detail = r.detail();
        assert!(
            detail.contains(host) && detail.contains("http.allowed_hosts"),
            "{detail}"
        );
        let json = [("Host", host), ("Content-Type", "application/json")];
        assert_eq!(raw(a, "POST", &action(), &json, "{}").await.status, 421);
        assert_eq!(raw(a, "GET", "/no/such/page", &h, "").await.status, 421);
        let ws = handshake(a, "/lmos?host=urn%3Atest%3Aoffline", host, None).await;
        assert_eq!(ws.status, 421, "{}", ws.head);
    }
    for host in [
        "localhost".to_owned(),
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        format!("lamp.localhost:{port}"),
    ] {
        let r = raw(a, "GET", "/readyz", &[("Host", &host)], "").await;
        assert_eq!(r.status, 200, "{host}: {}", r.head);
    }
    let ws = handshake(a, "/lmos", &format!("localhost:{port}"), None).await;
    assert_eq!(ws.status, 101, "{}", ws.head);
    agent.assert_nothing_pending().await;
    assert_eq!(http_limit_hits(a, "allowed_hosts").await, 12);
    // Nobody took the offline Thing.
    drop(sidecar.ws_agent("urn:test:offline").await);
    sidecar.stop().await;

    // Names clients use are configured; the rest stay misdirected.
    let mut config = test_config();
    config.http.allowed_hosts = vec!["sidecar.test".into(), "*.sidecar.test".into()];
    config.discovery.public_host = "lamp.lan".into();
    let sidecar = TestSidecar::start_with(config).await;
    for (host, status) in [
        ("sidecar.test", 200),
        ("a.sidecar.test:80", 200),
        ("lamp.lan", 200),
        ("localhost", 200),
        ("evil.example", 421),
    ] {
        let r = raw(sidecar.http, "GET", "/readyz", &[("Host", host)], "").await;
        assert_eq!(r.status, status, "{host}");
    }
    sidecar.stop().await;
}

#[tokio::test]
async fn pages_of_other_origins_may_not_open_websockets_or_change_state() {
    let (sidecar, mut agent) = start_with_lamp(test_config()).await;
    let a = sidecar.http;
    let host = a.to_string();
    let own = format!("http://{host}");
    for origin in [
        "http://evil.example",
        "http://127.0.0.1:1",
        "http://localhost:3000",
        "null",
    ] {
        let ws = handshake(a, "/lmos?host=urn%3Atest%3Aoffline", &host, Some(origin)).await;
        assert_eq!(ws.status, 403, "{origin}: {}", ws.head);
        let detail = ws.detail();
        assert!(detail.contains("http.allowed_origins"), "{detail}");
        assert!(detail.contains(origin), "{detail}");
        let headers = [
            ("Host", host.as_str()),
            ("Origin", origin),
            ("Content-Type", "application/json"),
        ];
        let td = lamp_td().to_string();
        let tries = [
            ("POST", action(), "{}"),
            ("PUT", property(), r#""evil""#),
            ("POST", "/things".to_owned(), td.as_str()),
            ("DELETE", format!("/things/{THING}"), ""),
        ];
        for (method, path, body) in &tries {
            let r = raw(a, method, path, &headers, body).await;
            assert_eq!(r.status, 403, "{origin} {method} {path}: {}", r.head);
        }
        // Reading is not refused, and not readable by the page: no CORS.
        let r = raw(a, "GET", "/things", &headers, "").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("access-control-allow-origin"), None);
    }
    agent.assert_nothing_pending().await;
    let things = common::http(a, "GET", "/things", None, b"").await.json();
    assert_eq!(things.as_array().unwrap().len(), 1, "{things}");
    drop(sidecar.ws_agent("urn:test:offline").await);

    // The sidecar's own origin, and no Origin at all, may.
    let localhost = format!("http://localhost:{}", a.port());
    for origin in [Some(own.as_str()), Some(localhost.as_str()), None] {
        let ws = handshake(a, "/lmos", &host, origin).await;
        assert_eq!(ws.status, 101, "{origin:?}: {}", ws.head);
    }
    let call = tokio::spawn(async move {
        let headers = [
            ("Host", host.as_str()),
            ("Content-Type", "application/json"),
            ("Origin", own.as_str()),
        ];
        raw(a, "POST", &action(), &headers, r#"{"n": 1}"#).await
    });
    let request = agent.recv().await;
    assert_eq!(request["messageType"], "invokeAction");
    assert_eq!(request["input"], json!({"n": 1}));
    agent.send(completed(&request)).await;
    assert_eq!(call.await.unwrap().status, 204);
    assert_eq!(http_limit_hits(a, "allowed_origins").await, 20);
    sidecar.stop().await;

    // Listed origins, and `null` when listed.
    let mut config = test_config();
    config.http.allowed_origins = vec!["https://console.example".into(), "null".into()];
    let sidecar = TestSidecar::start_with(config).await;
    let host = sidecar.http.to_string();
    for (origin, status) in [
        ("https://console.example", 101),
        ("https://console.example:443", 101),
        ("null", 101),
        ("http://console.example", 403),
    ] {
        let ws = handshake(sidecar.http, "/lmos", &host, Some(origin)).await;
        assert_eq!(ws.status, status, "{origin}");
    }
    sidecar.stop().await;
}

fn completed(request: &Value) -> Value {
    lmos(
        THING,
        "actionStatus",
        json!({"action": "go", "status": "completed", "correlationID": request["correlationID"]}),
    )
}

#[tokio::test]
async fn state_changing_bodies_must_be_json() {
    let (sidecar, mut agent) = start_with_lamp(test_config()).await;
    let a = sidecar.http;
    let host = a.to_string();
    let thing = format!("/things/{THING}");
    let td = lamp_td().to_string();
    let cases: Vec<(&str, String, Option<&str>, &str, &str)> = vec![
        (
            "POST",
            action(),
            Some("text/plain"),
            r#"{"n": 1}"#,
            "application/json",
        ),
        (
            "POST",
            action(),
            Some("application/x-www-form-urlencoded"),
            "n=1",
            "application/json",
        ),
        (
            "POST",
            action(),
            Some("multipart/form-data; boundary=x"),
            "--x--",
            "application/json",
        ),
        ("POST", action(), None, r#"{"n": 1}"#, "application/json"),
        (
            "PUT",
            property(),
            Some("text/plain"),
            r#""on""#,
            "application/json",
        ),
        ("PUT", property(), None, r#""on""#, "application/json"),
        (
            "POST",
            "/things".into(),
            Some("text/plain"),
            &td,
            "application/td+json",
        ),
        ("PUT", thing.clone(), None, &td, "application/td+json"),
        (
            "PATCH",
            thing.clone(),
            Some("application/json"),
            r#"{"title": "x"}"#,
            "application/merge-patch+json",
        ),
    ];
    for (method, path, content_type, body, accepted) in &cases {
        let mut headers = vec![("Host", host.as_str())];
        headers.extend(content_type.map(|c| ("Content-Type", c)));
        let r = raw(a, method, path, &headers, body).await;
        assert_eq!(
            r.status, 415,
            "{method} {path} {content_type:?}: {}",
            r.head
        );
        let detail = r.detail();
        assert!(detail.contains(accepted), "{detail}");
        match content_type {
            Some(c) => assert!(detail.contains(c), "{detail}"),
            None => assert!(detail.contains("no Content-Type"), "{detail}"),
        }
        if *method == "PATCH" {
            assert_eq!(
                r.header("accept-patch"),
                Some("application/merge-patch+json")
            );
        }
    }
    agent.assert_nothing_pending().await;
    assert_eq!(http_limit_hits(a, "content_type").await, cases.len() as u64);

    // JSON with a charset, and no body at all (node-wot's invokeAction
    // without input sends neither body nor Content-Type), reach the agent.
    for (content_type, body) in [
        (Some("application/json; charset=utf-8"), r#"{"n": 2}"#),
        (None, ""),
    ] {
        let host = host.clone();
        let call = tokio::spawn(async move {
            let mut headers = vec![("Host", host.as_str())];
            headers.extend(content_type.map(|c| ("Content-Type", c)));
            raw(a, "POST", &action(), &headers, body).await
        });
        let request = agent.recv().await;
        assert_eq!(request["messageType"], "invokeAction");
        assert_eq!(
            request.get("input"),
            (!body.is_empty()).then(|| json!({"n": 2})).as_ref()
        );
        agent.send(completed(&request)).await;
        assert_eq!(call.await.unwrap().status, 204);
    }
    sidecar.stop().await;
}

#[tokio::test]
async fn cors_stays_closed() {
    let (sidecar, _agent) = start_with_lamp(test_config()).await;
    let a = sidecar.http;
    let host = a.to_string();
    let own = format!("http://{host}");
    for origin in ["http://evil.example", own.as_str()] {
        for (path, method) in [
            (action(), "POST"),
            (property(), "PUT"),
            ("/lmos".to_owned(), "GET"),
            ("/things".to_owned(), "GET"),
        ] {
            let headers = [
                ("Host", host.as_str()),
                ("Origin", origin),
                ("Access-Control-Request-Method", method),
                (
                    "Access-Control-Request-Headers",
                    "content-type, authorization",
                ),
            ];
            let r = raw(a, "OPTIONS", &path, &headers, "").await;
            let allows: Vec<&str> = r
                .head
                .lines()
                .filter(|l| l.to_lowercase().starts_with("access-control-"))
                .collect();
            assert!(allows.is_empty(), "{origin} OPTIONS {path}: {allows:?}");
            assert!(r.status >= 400, "a preflight is not granted: {}", r.head);
        }
    }
    sidecar.stop().await;
}

/// With HTTP Basic on, a page of another origin cannot ride on the
/// credentials the browser has cached for the sidecar: it is refused before
/// they are even checked.
#[tokio::test]
async fn cached_credentials_do_not_let_another_origin_in() {
    use base64::Engine;
    let mut config = test_config();
    config.http.authentication = vec![lmos_sidecar::config::HttpScheme::Basic];
    config.auth.principals = vec![lmos_sidecar::config::PrincipalConfig {
        name: "dev".into(),
        password_hash: lmos_sidecar::auth::credentials::hash_password("pw"),
        host: vec!["*".into()],
        consume: vec!["*".into()],
        operate: vec!["*".into()],
        ..Default::default()
    }];
    let sidecar = TestSidecar::start_with(config).await;
    let a = sidecar.http;
    let host = a.to_string();
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("dev:pw")
    );
    let mut headers = vec![("Host", host.as_str()), ("Authorization", basic.as_str())];
    headers.extend(UPGRADE);
    let r = raw(a, "GET", "/lmos", &headers, "").await;
    assert_eq!(r.status, 101, "{}", r.head);
    headers.push(("Origin", "http://localhost:3000"));
    let r = raw(a, "GET", "/lmos", &headers, "").await;
    assert_eq!(r.status, 403, "{}", r.head);
    let post = [
        ("Host", host.as_str()),
        ("Authorization", basic.as_str()),
        ("Origin", "http://localhost:3000"),
        ("Content-Type", "text/plain"),
    ];
    let r = raw(a, "POST", &action(), &post, "{}").await;
    assert_eq!(r.status, 403, "{}", r.head);
    assert_eq!(http_limit_hits(a, "allowed_origins").await, 2);
    sidecar.stop().await;
}

/// A property read answered by the test's agent; the caller's status.
async fn read_reaching_the_agent(
    a: SocketAddr,
    agent: &mut common::WsClient,
    headers: Vec<(&'static str, String)>,
) -> u16 {
    let call = tokio::spawn(async move {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        raw(a, "GET", &property(), &headers, "").await
    });
    let request = agent.recv().await;
    assert_eq!(request["messageType"], "readProperty", "{request}");
    let mut answer = common::reading(THING, "mode", json!("on"));
    answer["correlationID"] = request["correlationID"].clone();
    agent.send(answer).await;
    call.await.unwrap().status
}

#[tokio::test]
async fn cross_site_requests_never_reach_an_agent() {
    let (sidecar, mut agent) = start_with_lamp(test_config()).await;
    let a = sidecar.http;
    let host = a.to_string();
    let dev_server = "http://localhost:3000";
    // An `<img src>` or no-cors fetch from another site (no Origin), a
    // cross-origin fetch, a dev server on another port of localhost.
    let tries: [(&str, Option<&str>); 4] = [
        ("cross-site", None),
        ("cross-site", Some("http://evil.example")),
        ("same-site", Some(dev_server)),
        ("same-site", None),
    ];
    for (site, origin) in tries {
        let mut headers = vec![("Host", host.as_str()), ("Sec-Fetch-Site", site)];
        headers.extend(origin.map(|o| ("Origin", o)));
        let r = raw(a, "GET", &property(), &headers, "").await;
        assert_eq!(r.status, 403, "{site} {origin:?}: {}", r.head);
        let detail = r.detail();
        assert!(
            detail.contains(site) && detail.contains("http.allowed_origins"),
            "{detail}"
        );
        let r = raw(a, "GET", &action(), &headers, "").await;
        assert_eq!(r.status, 403, "{site} {origin:?}: {}", r.head);
        let mut upgrade = headers.clone();
        upgrade.extend(UPGRADE);
        let ws = raw(a, "GET", "/lmos?host=urn%3Atest%3Aoffline", &upgrade, "").await;
        assert_eq!(ws.status, 403, "{site} {origin:?}: {}", ws.head);
        // Reading the directory or the probes reaches no agent: not refused.
        let r = raw(a, "GET", "/readyz", &headers, "").await;
        assert_eq!(r.status, 200, "{}", r.head);
        let r = raw(a, "GET", &format!("/things/{THING}"), &headers, "").await;
        assert_eq!(r.status, 200, "{}", r.head);
    }
    agent.assert_nothing_pending().await;
    assert_eq!(http_limit_hits(a, "allowed_origins").await, 12);
    drop(sidecar.ws_agent("urn:test:offline").await);

    // Without the header (curl, node-wot, SDKs), from the page's own origin
    // or typed in the address bar, the agent answers.
    let own = format!("http://{host}");
    let host_only = vec![("Host", host.clone())];
    let with = |site: &str, origin: Option<&str>| {
        let mut h = vec![("Host", host.clone()), ("Sec-Fetch-Site", site.to_owned())];
        h.extend(origin.map(|o| ("Origin", o.to_owned())));
        h
    };
    for headers in [
        host_only,
        with("same-origin", None),
        with("none", None),
        with("same-site", Some(&own)),
    ] {
        let shown = format!("{headers:?}");
        let status = read_reaching_the_agent(a, &mut agent, headers).await;
        assert_eq!(status, 200, "{shown}");
    }
    sidecar.stop().await;

    // A listed origin keeps working across sites.
    let mut config = test_config();
    config.http.allowed_origins = vec![dev_server.into()];
    let (sidecar, mut agent) = start_with_lamp(config).await;
    let host = sidecar.http.to_string();
    let headers = vec![
        ("Host", host.clone()),
        ("Sec-Fetch-Site", "same-site".to_owned()),
        ("Origin", dev_server.to_owned()),
    ];
    let status = read_reaching_the_agent(sidecar.http, &mut agent, headers).await;
    assert_eq!(status, 200);
    sidecar.stop().await;
}
