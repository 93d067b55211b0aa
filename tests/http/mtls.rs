//! Client certificates as identities on the HTTP port (issue 46): with
//! `http.tls_client_ca`, a certificate's SPIFFE ID (or, without one, its
//! subject CN) names the `[[auth.principals]]` entry whose grants it gets,
//! on the directory, the WebSocket gateway (`/lmos`) and `/mcp`. Without a
//! certificate where one is required, or with one from another CA, the
//! TLS handshake fails; a certificate naming no entry gets 401; an
//! `Authorization` header wins over a certificate. Certificates are
//! generated per test ([`lmos_testkit::mtls`]).

use futures_util::{SinkExt, StreamExt};
use lmos_sidecar::auth::credentials::sha256_hex;
use lmos_sidecar::config::{ClientAuth, Grants, HttpScheme, PrincipalConfig};
use lmos_testkit::mtls::{ClientCert, Pki, Refused, Tls};
use lmos_testkit::weather_agent::{THING_DESCRIPTION, THING_ID};
use lmos_testkit::{self as common, HttpResponse, TestSidecar, WAIT};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

const WEATHER: &str = "spiffe://example.org/ns/agents/sa/weather";
const PLANNER: &str = "spiffe://example.org/ns/agents/sa/planner";
const STRANGER: &str = "spiffe://example.org/ns/agents/sa/stranger";
/// A principal named by a certificate's CN (no URI SAN).
const BILLING: &str = "billing";
const OPERATOR_TOKEN: &str = "operator-token-0123456789";

fn principal(name: &str, host: &[&str], consume: &[&str], operate: &[&str]) -> PrincipalConfig {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
    PrincipalConfig {
        name: name.into(),
        host: v(host),
        consume: v(consume),
        operate: v(operate),
        ..PrincipalConfig::default()
    }
}

/// TLS with client certificates from `pki`'s mesh CA (`auth`), the
/// schemes given; entries without secrets for the certificates' names, and
/// `operator` with a bearer token. Anonymous may do nothing.
fn config(pki: &Pki, auth: ClientAuth, schemes: Vec<HttpScheme>) -> lmos_sidecar::Config {
    let mut c = common::test_config();
    pki.configure(&mut c, auth);
    c.http.authentication = schemes;
    c.auth.anonymous = Grants::default();
    c.auth.principals = vec![
        principal(WEATHER, &[THING_ID], &[THING_ID], &[]),
        principal(PLANNER, &[], &[THING_ID], &[THING_ID]),
        principal(BILLING, &[], &["urn:billing:*"], &[]),
        PrincipalConfig {
            token_sha256: sha256_hex(OPERATOR_TOKEN.as_bytes()),
            ..principal("operator", &[], &[THING_ID], &[THING_ID])
        },
    ];
    c
}

fn host_query() -> String {
    format!("?host={}", common::urlencode(THING_ID))
}

/// The WeatherAgent's TD from the directory, as `cert` (and `headers`).
async fn directory(
    pki: &Pki,
    sidecar: &TestSidecar,
    cert: Option<&ClientCert>,
    headers: &[(&str, &str)],
) -> Result<HttpResponse, Refused> {
    let path = format!("/things/{}", common::urlencode(THING_ID));
    pki.https(sidecar.http, cert, ("GET", &path), headers, b"")
        .await
}

fn status(r: Result<HttpResponse, Refused>) -> u16 {
    r.expect("an HTTP answer").status
}

/// The WeatherAgent's socket over WSS with its certificate: its TD
/// registered (seen by the directory) when this returns.
async fn host_weather(pki: &Pki, sidecar: &TestSidecar) -> WebSocketStream<Tls> {
    let weather = pki.spiffe(WEATHER);
    let mut agent = pki
        .wss(sidecar.http, Some(&weather), &host_query())
        .await
        .expect("the weather agent's certificate lets it host its Thing");
    agent
        .send(Message::Text(THING_DESCRIPTION.into()))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while status(directory(pki, sidecar, Some(&weather), &[]).await) != 200 {
        assert!(tokio::time::Instant::now() < deadline, "the TD never came");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    agent
}

/// The next LMOS message on a WebSocket.
async fn recv(socket: &mut WebSocketStream<Tls>) -> Value {
    loop {
        let frame = tokio::time::timeout(WAIT, socket.next())
            .await
            .expect("a message in time")
            .expect("the socket is open")
            .expect("no protocol error");
        if let Message::Text(text) = frame {
            return serde_json::from_str(&text).unwrap();
        }
    }
}

fn invoke(id: &str) -> Message {
    let invoke = json!({"thingID": THING_ID, "messageID": id, "messageType": "invokeAction",
        "action": "getWeather", "input": {"question": "in Oslo", "interactionMode": "text"}});
    Message::Text(invoke.to_string().into())
}

/// `/mcp` (2026-07-28, stateless): the tools `cert`'s principal sees, or
/// the refusal's status.
async fn mcp_tools(pki: &Pki, sidecar: &TestSidecar, cert: &ClientCert) -> Result<usize, u16> {
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "mtls", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}});
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}});
    let headers = [
        ("Content-Type", "application/json"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/list"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let request = ("POST", "/mcp");
    let body = body.to_string();
    let r = pki
        .https(sidecar.http, Some(cert), request, &headers, body.as_bytes())
        .await
        .expect("an HTTP answer");
    match r.status {
        200 => Ok(r.json()["result"]["tools"].as_array().map_or(0, Vec::len)),
        other => Err(other),
    }
}

/// `lmos_sidecar_auth_failures_total` of the HTTP port for `reason`.
async fn failures(pki: &Pki, sidecar: &TestSidecar, reason: &str) -> u64 {
    let weather = pki.spiffe(WEATHER);
    let r = pki.https(sidecar.http, Some(&weather), ("GET", "/metrics"), &[], b"");
    let text = r.await.expect("metrics").body;
    let prefix =
        format!(r#"lmos_sidecar_auth_failures_total{{reason="{reason}",transport="http"}} "#);
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.parse().unwrap())
}

#[tokio::test]
async fn a_spiffe_id_gets_its_grants_on_the_directory_the_gateway_and_mcp() {
    let pki = Pki::new();
    // Mesh only: no HTTP scheme, the certificate is the credential.
    let sidecar = TestSidecar::start_with(config(&pki, ClientAuth::Required, vec![])).await;
    let (planner, billing) = (pki.spiffe(PLANNER), pki.cn(BILLING));

    // Hosting is checked at the WebSocket handshake.
    for other in [&planner, &billing] {
        let refused = pki.wss(sidecar.http, Some(other), &host_query()).await;
        assert!(matches!(refused, Err(Refused::Http(403))), "{refused:?}");
    }
    let mut agent = host_weather(&pki, &sidecar).await;

    // The directory: the TD is the planner's to read, not billing's (CN).
    assert_eq!(
        status(directory(&pki, &sidecar, Some(&planner), &[]).await),
        200
    );
    let denied = directory(&pki, &sidecar, Some(&billing), &[])
        .await
        .unwrap();
    assert_eq!(denied.status, 403, "{}", denied.body);
    assert!(
        denied.body.contains("`billing` needs `consume` access"),
        "{}",
        denied.body
    );

    // The gateway: the planner's invocation reaches the agent; the
    // weather agent itself may not operate its Thing.
    let mut as_planner = pki.wss(sidecar.http, Some(&planner), "").await.unwrap();
    as_planner.send(invoke("by-planner")).await.unwrap();
    let mut as_weather = pki
        .wss(sidecar.http, Some(&pki.spiffe(WEATHER)), "")
        .await
        .unwrap();
    as_weather.send(invoke("by-weather")).await.unwrap();
    let refused = recv(&mut as_weather).await;
    assert_eq!(
        (
            refused["status"].as_str(),
            refused["correlationID"].as_str()
        ),
        (Some("403"), Some("by-weather")),
        "{refused}"
    );
    let detail = refused["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(WEATHER), "{refused}");
    let request = loop {
        let m = recv(&mut agent).await;
        if m["messageType"] == "invokeAction" {
            break m;
        }
    };
    assert_eq!(request["action"], "getWeather", "{request}");

    // `/mcp`: tools per grants.
    assert!(mcp_tools(&pki, &sidecar, &planner).await.unwrap() > 0);
    assert_eq!(mcp_tools(&pki, &sidecar, &billing).await, Ok(0));

    // A certificate naming no entry: 401 on every face.
    let stranger = pki.spiffe(STRANGER);
    let r = directory(&pki, &sidecar, Some(&stranger), &[])
        .await
        .unwrap();
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.body.contains("names no principal"), "{}", r.body);
    let ws = pki.wss(sidecar.http, Some(&stranger), "").await;
    assert!(matches!(ws, Err(Refused::Http(401))), "{ws:?}");
    assert_eq!(mcp_tools(&pki, &sidecar, &stranger).await, Err(401));

    // No certificate, or one from another CA: no handshake.
    let foreign = pki.foreign(WEATHER);
    for cert in [None, Some(&foreign)] {
        let r = directory(&pki, &sidecar, cert, &[]).await;
        assert!(matches!(r, Err(Refused::Tls(_))), "{r:?}");
    }
    // Counted: three names refused, two handshakes.
    let deadline = tokio::time::Instant::now() + WAIT;
    while failures(&pki, &sidecar, "certificate").await < 5 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "refusals not counted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(failures(&pki, &sidecar, "certificate").await, 5);
    sidecar.stop().await;
}

#[tokio::test]
async fn optional_certificates_fall_back_to_the_header_which_wins() {
    let pki = Pki::new();
    let config = config(&pki, ClientAuth::Optional, vec![HttpScheme::Bearer]);
    let sidecar = TestSidecar::start_with(config).await;
    let _agent = host_weather(&pki, &sidecar).await;
    let operator = format!("Bearer {OPERATOR_TOKEN}");
    let operator = [("Authorization", operator.as_str())];
    let bad = [("Authorization", "Bearer not-a-token")];
    let billing = pki.cn(BILLING);
    let weather = pki.spiffe(WEATHER);

    // Without a certificate, as without client certificates at all.
    assert_eq!(status(directory(&pki, &sidecar, None, &[]).await), 401);
    assert_eq!(
        status(directory(&pki, &sidecar, None, &operator).await),
        200
    );
    // With one, its principal; a header wins over it, for better or worse.
    assert_eq!(
        status(directory(&pki, &sidecar, Some(&billing), &[]).await),
        403
    );
    assert_eq!(
        status(directory(&pki, &sidecar, Some(&billing), &operator).await),
        200
    );
    assert_eq!(
        status(directory(&pki, &sidecar, Some(&weather), &bad).await),
        401
    );
    // A certificate is checked even where it is optional.
    let r = directory(&pki, &sidecar, Some(&pki.foreign(WEATHER)), &[]).await;
    assert!(matches!(r, Err(Refused::Tls(_))), "{r:?}");
    let r = directory(&pki, &sidecar, Some(&pki.spiffe(STRANGER)), &[]).await;
    assert_eq!(status(r), 401);
    sidecar.stop().await;
}
