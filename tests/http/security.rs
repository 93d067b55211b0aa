//! Authentication, per-Thing authorization and TLS on the HTTP port (the
//! WebSocket gateway and the directory), against a real sidecar.

use lmos_testkit as common;

use base64::Engine;
use common::*;
use lmos_sidecar::auth::credentials::{hash_password, sha256_hex};
use lmos_sidecar::config::{Grants, HttpScheme, PrincipalConfig};
use lmos_sidecar::Config;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::http::HeaderValue;

const AGENT_TOKEN: &str = "agent-token-0123456789";

fn principal(
    name: &str,
    password: &str,
    host: &[&str],
    consume: &[&str],
    operate: &[&str],
) -> PrincipalConfig {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
    PrincipalConfig {
        name: name.into(),
        password_hash: hash_password(password),
        host: v(host),
        consume: v(consume),
        operate: v(operate),
        ..PrincipalConfig::default()
    }
}

/// `agent` hosts urn:a (password or token), `reader` consumes urn:a only,
/// `operator` consumes and operates urn:a; nobody anonymous.
fn secured_config() -> Config {
    let mut c = test_config();
    c.http.authentication = vec![HttpScheme::Basic, HttpScheme::Bearer];
    c.auth.anonymous = Grants::default();
    let mut agent = principal("agent", "agent-pw", &["urn:a"], &[], &[]);
    agent.token_sha256 = sha256_hex(AGENT_TOKEN.as_bytes());
    c.auth.principals = vec![
        agent,
        principal("reader", "reader-pw", &[], &["urn:a"], &[]),
        principal("operator", "operator-pw", &[], &["urn:a"], &["urn:a"]),
    ];
    c
}

fn basic(name: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{name}:{password}"));
    format!("Basic {encoded}")
}

fn request(url: &str, authorization: Option<&str>) -> Request {
    let mut r = ws_request(url, Some("lmosprotocol"));
    if let Some(a) = authorization {
        r.headers_mut()
            .insert("Authorization", HeaderValue::from_str(a).unwrap());
    }
    r
}

async fn connect_as(sidecar: &TestSidecar, name: &str, password: &str) -> WsClient {
    WsClient::connect_request(request(&sidecar.ws_url(), Some(&basic(name, password))))
        .await
        .unwrap_or_else(|status| panic!("{name} refused with {status}"))
}

async fn metrics_text(sidecar: &TestSidecar) -> String {
    http(sidecar.http, "GET", "/metrics", None, b"").await.body
}

fn assert_error(reply: &Value, status: u64, correlation: &str) {
    assert_eq!(reply["messageType"], "error", "{reply}");
    assert_eq!(reply["status"], status.to_string(), "{reply}");
    assert_eq!(reply["correlationID"], correlation, "{reply}");
}

#[tokio::test]
async fn the_websocket_takes_basic_or_bearer_credentials_and_refuses_others() {
    let sidecar = TestSidecar::start_with(secured_config()).await;
    let url = sidecar.ws_url();

    assert_eq!(
        WsClient::connect_request(request(&url, None)).await.err(),
        Some(401)
    );
    let wrong = basic("reader", "guess");
    assert_eq!(
        WsClient::connect_request(request(&url, Some(&wrong)))
            .await
            .err(),
        Some(401)
    );
    let unknown = basic("mallory", "reader-pw");
    assert_eq!(
        WsClient::connect_request(request(&url, Some(&unknown)))
            .await
            .err(),
        Some(401)
    );
    assert_eq!(
        WsClient::connect_request(request(&url, Some("Bearer not-a-token")))
            .await
            .err(),
        Some(401)
    );

    // The directory's own description declares what is in force.
    let reader = basic("reader", "reader-pw");
    let wot = http_with(
        sidecar.http,
        "GET",
        "/.well-known/wot",
        &[("Authorization", reader.as_str())],
        b"",
    )
    .await;
    assert_eq!(wot.status, 200, "{}", wot.body);
    let td = wot.json();
    let security = td["security"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        td["securityDefinitions"][&security]["scheme"], "combo",
        "{td:#}"
    );

    // The challenge names both schemes.
    let refused = http(sidecar.http, "GET", "/things", None, b"").await;
    assert_eq!(refused.status, 401);
    let challenges: Vec<&str> = refused
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("www-authenticate"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert!(
        challenges.iter().any(|c| c.starts_with("Basic realm=")),
        "{challenges:?}"
    );
    assert!(
        challenges.iter().any(|c| c.starts_with("Bearer realm=")),
        "{challenges:?}"
    );

    let mut by_password = connect_as(&sidecar, "reader", "reader-pw").await;
    let bearer = format!("Bearer {AGENT_TOKEN}");
    let mut by_token = WsClient::connect_request(request(&url, Some(&bearer)))
        .await
        .expect("a valid token opens the socket");
    // Both sockets are open and speak for their principal.
    for (client, name) in [(&mut by_password, "reader"), (&mut by_token, "agent")] {
        client.send(json!({"thingID": "urn:b", "messageID": "probe", "messageType": "subscribeEvent", "event": "e"})).await;
        let reply = client.recv().await;
        assert_error(&reply, 403, "probe");
        assert!(
            reply["detail"]
                .as_str()
                .unwrap()
                .starts_with(&format!("`{name}`")),
            "{reply}"
        );
    }

    let text = metrics_text(&sidecar).await;
    assert!(
        text.contains(r#"lmos_sidecar_auth_failures_total{reason="invalid",transport="http"} 3"#),
        "{text}"
    );
    assert!(
        text.contains(r#"lmos_sidecar_auth_failures_total{reason="missing",transport="http"} 2"#),
        "{text}"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn each_principal_does_only_what_it_is_granted_per_thing() {
    let sidecar = TestSidecar::start_with(secured_config()).await;

    // Hosting is checked at the handshake.
    let as_reader = request(
        &format!("{}?host=urn:a", sidecar.ws_url()),
        Some(&basic("reader", "reader-pw")),
    );
    assert_eq!(WsClient::connect_request(as_reader).await.err(), Some(403));
    let as_agent = request(
        &format!("{}?host=urn:b", sidecar.ws_url()),
        Some(&basic("agent", "agent-pw")),
    );
    assert_eq!(WsClient::connect_request(as_agent).await.err(), Some(403));
    let as_agent = request(
        &format!("{}?host=urn:a", sidecar.ws_url()),
        Some(&basic("agent", "agent-pw")),
    );
    let mut agent = WsClient::connect_request(as_agent)
        .await
        .expect("agent hosts urn:a");

    let mut reader = connect_as(&sidecar, "reader", "reader-pw").await;
    // Consuming urn:a is granted, urn:b is not.
    reader.send(json!({"thingID": "urn:b", "messageID": "sub-b", "messageType": "subscribeEvent", "event": "e"})).await;
    let reply = reader.recv().await;
    assert_error(&reply, 403, "sub-b");
    assert_eq!(
        reply["type"],
        "https://eclipse.dev/lmos/protocol/v1/errors#forbidden"
    );
    assert!(
        reply["detail"]
            .as_str()
            .unwrap()
            .contains("`reader` may not send `subscribeEvent` for `urn:b`"),
        "{reply}"
    );
    reader.send(json!({"thingID": "urn:a", "messageID": "sub-a", "messageType": "subscribeEvent", "event": "e"})).await;
    // Operating and speaking for the Thing are not.
    reader.send(json!({"thingID": "urn:a", "messageID": "inv", "messageType": "invokeAction", "action": "go", "input": {}})).await;
    assert_error(&reader.recv().await, 403, "inv");
    reader.send(json!({"thingID": "urn:a", "messageID": "fake", "messageType": "event", "event": "e", "data": 1, "timestamp": "2025-01-01T00:00:00Z"})).await;
    assert_error(&reader.recv().await, 403, "fake");
    // The connection lives on: the agent's real event arrives. (No barrier:
    // the reader may not publish one; the agent repeats until the reader's
    // subscription is live.)
    let delivered = loop {
        agent.send(event("urn:a", "e", json!("real"))).await;
        let wait = std::time::Duration::from_millis(200);
        if let Ok(v) = tokio::time::timeout(wait, reader.recv()).await {
            break v;
        }
    };
    assert_eq!(
        (delivered["messageType"].as_str(), &delivered["data"]),
        (Some("event"), &json!("real")),
        "{delivered}"
    );

    // The agent may speak for urn:a but not consume urn:b.
    agent.send(json!({"thingID": "urn:b", "messageID": "agent-sub", "messageType": "subscribeEvent", "event": "e"})).await;
    assert_error(&agent.recv().await, 403, "agent-sub");

    // The operator's invocation reaches the agent.
    let mut operator = connect_as(&sidecar, "operator", "operator-pw").await;
    operator.send(json!({"thingID": "urn:a", "messageID": "op-inv", "messageType": "invokeAction", "action": "go", "input": {}})).await;
    let forwarded = agent.recv().await;
    assert_eq!(forwarded["messageType"], "invokeAction", "{forwarded}");
    assert_eq!(forwarded["action"], "go");

    let text = metrics_text(&sidecar).await;
    assert!(
        text.contains(r#"lmos_sidecar_denied_total{access="consume",transport="websocket"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"lmos_sidecar_denied_total{access="operate",transport="websocket"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"lmos_sidecar_denied_total{access="host",transport="websocket"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"lmos_sidecar_denied_total{access="host",transport="http"} 2"#),
        "{text}"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn the_directory_needs_host_access_to_write_and_consume_access_to_read() {
    let sidecar = TestSidecar::start_with(secured_config()).await;
    let mut td: Value =
        serde_json::from_str(include_str!("../fixtures/weather-agent-td.json")).unwrap();
    td["id"] = json!("urn:a");
    let body = td.to_string();
    let put = |auth: Option<String>| {
        let body = body.clone();
        let addr = sidecar.http;
        async move {
            let mut headers = vec![("Content-Type", "application/td+json".to_owned())];
            if let Some(a) = auth {
                headers.push(("Authorization", a));
            }
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            http_with(addr, "PUT", "/things/urn:a", &headers, body.as_bytes()).await
        }
    };
    assert_eq!(put(None).await.status, 401);
    let refused = put(Some(basic("reader", "reader-pw"))).await;
    assert_eq!(refused.status, 403);
    assert_eq!(
        refused.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(put(Some(format!("Bearer {AGENT_TOKEN}"))).await.status, 201);

    let reader = basic("reader", "reader-pw");
    let got = http_with(
        sidecar.http,
        "GET",
        "/things/urn:a",
        &[("Authorization", &reader)],
        b"",
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.body);
    let served = got.json();
    // The TD declares what the sidecar requires, not the agent's own basic_sc.
    assert_eq!(served["security"], "lmos_ws_sc");
    assert_eq!(
        served["securityDefinitions"]["lmos_ws_sc"],
        json!({"scheme": "combo", "oneOf": ["basic_sc", "bearer_sc"]})
    );
    assert_eq!(
        served["securityDefinitions"]["bearer_sc"]["scheme"],
        "bearer"
    );
    let forms = served["actions"]["getWeather"]["forms"].as_array().unwrap();
    let ws = forms
        .iter()
        .find(|f| f["subprotocol"] == "lmosprotocol")
        .unwrap();
    assert_eq!(ws["security"], "lmos_ws_sc");
    let mqtt = forms
        .iter()
        .find(|f| f["mqv:controlPacket"] == "publish")
        .unwrap();
    assert_eq!(mqtt["security"], "nosec_sc");

    // A principal sees only the Things it may consume.
    let mut c = secured_config();
    c.auth
        .principals
        .push(principal("stranger", "stranger-pw", &[], &["urn:z"], &[]));
    let other = TestSidecar::start_with(c).await;
    let agent = format!("Bearer {AGENT_TOKEN}");
    let registered = http_with(
        other.http,
        "PUT",
        "/things/urn:a",
        &[
            ("Authorization", &agent),
            ("Content-Type", "application/td+json"),
        ],
        body.as_bytes(),
    )
    .await;
    assert_eq!(registered.status, 201);
    let stranger = basic("stranger", "stranger-pw");
    let listed = http_with(
        other.http,
        "GET",
        "/things",
        &[("Authorization", &stranger)],
        b"",
    )
    .await;
    assert_eq!(listed.json(), json!([]));
    let one = http_with(
        other.http,
        "GET",
        "/things/urn:a",
        &[("Authorization", &stranger)],
        b"",
    )
    .await;
    assert_eq!(one.status, 403);
    other.stop().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn the_default_sidecar_declares_no_security() {
    let sidecar = TestSidecar::start().await;
    let mut td: Value =
        serde_json::from_str(include_str!("../fixtures/weather-agent-td.json")).unwrap();
    td["id"] = json!("urn:open");
    let put = http(
        sidecar.http,
        "PUT",
        "/things/urn:open",
        Some("application/td+json"),
        td.to_string().as_bytes(),
    )
    .await;
    assert_eq!(put.status, 201);
    let served = http(sidecar.http, "GET", "/things/urn:open", None, b"")
        .await
        .json();
    assert_eq!(served["security"], "nosec_sc");
    assert_eq!(
        served["securityDefinitions"]["nosec_sc"],
        json!({"scheme": "nosec"})
    );
    // The agent's own definition stays for the agent's own forms.
    assert_eq!(served["securityDefinitions"]["basic_sc"]["scheme"], "basic");
    sidecar.stop().await;
}

/// PEM files for `localhost`, written for the sidecar to load.
fn certificate() -> (rcgen::CertifiedKey<rcgen::KeyPair>, std::path::PathBuf) {
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let dir = std::env::temp_dir().join(format!("lmos-security-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cert.pem"), generated.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), generated.signing_key.serialize_pem()).unwrap();
    (generated, dir)
}

async fn wss(
    addr: std::net::SocketAddr,
    trusted: &rustls::pki_types::CertificateDer<'static>,
) -> tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("TLS handshake with the generated certificate");
    let url = format!("wss://localhost:{}/lmos", addr.port());
    let (socket, response) =
        tokio_tungstenite::client_async(ws_request(&url, Some("lmosprotocol")), tls)
            .await
            .expect("WebSocket handshake over TLS");
    assert_eq!(response.headers()["sec-websocket-protocol"], "lmosprotocol");
    socket
}

#[tokio::test]
async fn wss_with_a_generated_certificate_and_plain_clients_turned_away() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let (generated, dir) = certificate();
    let mut config = test_config();
    config.http.tls_cert = dir.join("cert.pem").display().to_string();
    config.http.tls_key = dir.join("key.pem").display().to_string();
    let sidecar = TestSidecar::start_with(config).await;
    let mut secure = wss(sidecar.http, generated.cert.der()).await;

    // A plain WebSocket client gets no answer it could take for one.
    let plain = tokio::time::timeout(
        WAIT,
        tokio_tungstenite::connect_async(ws_request(&sidecar.ws_url(), Some("lmosprotocol"))),
    )
    .await
    .expect("the plain attempt ends in time");
    assert!(plain.is_err(), "plain WebSocket on the TLS port must fail");

    // The secure client is unaffected and gets an event from MQTT.
    let subscribe = json!({"thingID": "urn:tls", "messageID": "tls-sub", "messageType": "subscribeEvent", "event": "e"});
    secure
        .send(WsMessage::Text(subscribe.to_string().into()))
        .await
        .unwrap();
    let mut agent = sidecar.mqtt("tls-agent").await;
    let publisher = tokio::spawn(async move {
        loop {
            agent.publish_event("urn:tls", "e", json!("secret")).await;
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    });
    let delivered = loop {
        match tokio::time::timeout(WAIT, secure.next())
            .await
            .expect("an event in time")
        {
            Some(Ok(WsMessage::Text(t))) => break serde_json::from_str::<Value>(&t).unwrap(),
            Some(Ok(_)) => continue,
            other => panic!("{other:?}"),
        }
    };
    publisher.abort();
    assert_eq!(
        (
            delivered["data"].as_str(),
            delivered["correlationID"].as_str()
        ),
        (Some("secret"), Some("tls-sub")),
        "{delivered}"
    );
    sidecar.stop().await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_missing_key_file_stops_start_up_with_its_name() {
    let (_, dir) = certificate();
    let mut config = test_config();
    config.http.tls_cert = dir.join("cert.pem").display().to_string();
    config.http.tls_key = dir.join("absent.pem").display().to_string();
    let error = lmos_sidecar::Application::build(config)
        .await
        .err()
        .expect("start-up fails");
    let text = error.to_string();
    assert!(
        text.contains("cannot read the private key") && text.contains("absent.pem"),
        "{text}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// The command-line client takes its credentials from the environment.
#[tokio::test]
async fn the_client_authenticates_from_the_environment() {
    let sidecar = TestSidecar::start_with(secured_config()).await;
    let url = sidecar.ws_url();
    let run = |env: Vec<(&'static str, &'static str)>| {
        let url = url.clone();
        async move {
            let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_lmos-sidecar"))
                .args([
                    "read",
                    "--url",
                    &url,
                    "--thing",
                    "urn:b",
                    "--timeout",
                    "5",
                    "p",
                ])
                .env_remove("LMOS_TOKEN")
                .env_remove("LMOS_USER")
                .env_remove("LMOS_PASSWORD")
                .envs(env)
                .output()
                .await
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            (out.status.code(), text)
        }
    };
    // No credentials: the handshake is refused (exit 2, no answer).
    let (code, out) = run(vec![]).await;
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("401"), "{out}");
    // A token gets in; the agent principal may not read urn:b (exit 1, an
    // LMOS error).
    let (code, out) = run(vec![("LMOS_TOKEN", AGENT_TOKEN)]).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("403") || out.to_lowercase().contains("forbidden"),
        "{out}"
    );
    let (code, out) = run(vec![
        ("LMOS_USER", "reader"),
        ("LMOS_PASSWORD", "reader-pw"),
    ])
    .await;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("`reader` may not send `readProperty`"),
        "{out}"
    );
    sidecar.stop().await;
}

/// Issue 15: an invocation is its principal's. Another connection of the
/// same principal (here over HTTP) finds it by correlation ID; another
/// principal, allowed to operate the same Thing, cannot query or cancel it.
#[tokio::test]
async fn an_invocation_is_visible_to_its_principal_only() {
    let mut config = secured_config();
    config.auth.principals.push(principal(
        "other-operator",
        "other-pw",
        &[],
        &["urn:a"],
        &["urn:a"],
    ));
    let sidecar = TestSidecar::start_with(config).await;
    let url = format!("{}?host=urn:a", sidecar.ws_url());
    let mut agent =
        WsClient::connect_request(request(&url, Some(&format!("Bearer {AGENT_TOKEN}"))))
            .await
            .unwrap();
    let mut operator = connect_as(&sidecar, "operator", "operator-pw").await;
    operator.send(json!({"thingID": "urn:a", "messageID": "m1", "correlationID": "mine", "messageType": "invokeAction", "action": "go"})).await;
    let forwarded = agent.recv().await;
    assert_eq!(forwarded["messageType"], "invokeAction", "{forwarded}");
    agent.send(json!({"thingID": "urn:a", "messageID": "s1", "correlationID": forwarded["correlationID"], "messageType": "actionStatus", "action": "go", "status": "running"})).await;
    assert_eq!(operator.recv().await["status"], "running");

    let mut other = connect_as(&sidecar, "other-operator", "other-pw").await;
    other.send(json!({"thingID": "urn:a", "messageID": "q1", "correlationID": "mine", "messageType": "queryAction", "action": "go"})).await;
    assert_error(&other.recv().await, 404, "mine");
    other.send(json!({"thingID": "urn:a", "messageID": "c1", "correlationID": "mine", "messageType": "cancelAction", "action": "go"})).await;
    assert_error(&other.recv().await, 404, "mine");
    let as_other = http_with(
        sidecar.http,
        "GET",
        "/things/urn:a/actions/go/mine",
        &[("Authorization", &basic("other-operator", "other-pw"))],
        b"",
    )
    .await;
    assert_eq!(as_other.status, 404, "{}", as_other.body);

    // The same principal over HTTP: the status resource of the invocation.
    let as_owner = http_with(
        sidecar.http,
        "GET",
        "/things/urn:a/actions/go/mine",
        &[("Authorization", &basic("operator", "operator-pw"))],
        b"",
    )
    .await;
    assert_eq!(as_owner.status, 200, "{}", as_owner.body);
    assert_eq!(as_owner.json()["status"], "running");
    // Nothing of the other principal's reached the agent: its next message
    // is the next invocation.
    operator.send(json!({"thingID": "urn:a", "messageID": "m2", "messageType": "invokeAction", "action": "again"})).await;
    assert_eq!(agent.recv().await["action"], "again");
    sidecar.stop().await;
}

/// A principal without rights cannot tell a registered Thing from one that
/// does not exist: `readAllProperties` (HTTP and the Kotlin dialect) and a
/// property read answer alike for both, authorized before the lookup.
#[tokio::test]
async fn a_principal_without_rights_cannot_tell_whether_a_thing_exists() {
    let sidecar = TestSidecar::start_with(secured_config()).await;
    let mut td: Value =
        serde_json::from_str(include_str!("../fixtures/weather-agent-td.json")).unwrap();
    td["id"] = json!("urn:a");
    let token = format!("Bearer {AGENT_TOKEN}");
    let headers = [
        ("Content-Type", "application/td+json"),
        ("Authorization", token.as_str()),
    ];
    let body = td.to_string();
    let put = http_with(
        sidecar.http,
        "PUT",
        "/things/urn:a",
        &headers,
        body.as_bytes(),
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.body);

    // `agent` hosts urn:a but may not consume it, nor urn:unknown.
    let agent = basic("agent", "agent-pw");
    let auth = [("Authorization", agent.as_str())];
    for path in ["properties", "properties/modelConfiguration"] {
        let get = |thing: &'static str| {
            let url = format!("/things/{thing}/{path}");
            async move { http_with(sidecar.http, "GET", &url, &auth, b"").await }
        };
        let (registered, unknown) = (get("urn:a").await, get("urn:unknown").await);
        assert_eq!(registered.status, 403, "{path}: {}", registered.body);
        assert_eq!(unknown.status, 403, "{path}: {}", unknown.body);
        let detail = |r: &HttpResponse| {
            r.json()["detail"]
                .as_str()
                .unwrap()
                .replace("urn:unknown", "urn:a")
        };
        assert_eq!(detail(&registered), detail(&unknown), "{path}");
    }

    // The Kotlin dialect's readAllProperties over WebSocket.
    let mut ws = connect_as(&sidecar, "agent", "agent-pw").await;
    for (thing, id) in [("urn:a", "k1"), ("urn:unknown", "k2")] {
        let read_all =
            json!({"messageType": "readAllProperties", "thingId": thing, "messageId": id});
        ws.send(read_all).await;
        let reply = ws.recv().await;
        assert_eq!(reply["status"], "403", "{thing}: {reply}");
        assert_eq!(reply["correlationId"], id, "{reply}");
    }
    sidecar.stop().await;
}
