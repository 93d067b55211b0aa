//! JWTs from a real OpenID provider (npm `oidc-provider`, pinned in
//! `tests/oidc/`, started by [`Provider`]) against a sidecar with
//! `[auth.jwt]` on its JWKS URL: accepted with their scopes' grants on every
//! transport (directory, WebSocket, `/mcp`, `/a2a`, MQTT), each algorithm;
//! refused as a user sees it (HTTP 401 with a Bearer challenge, MQTT CONNACK
//! bad user name or password) for a wrong audience, a wrong issuer, an
//! expired token, an unknown `kid` (accepted once the provider rotated to
//! it), `alg: none` and HMAC keyed with the public key. Static principals
//! keep working beside. The refusals are in [`refusals`].
//!
//! Needs Node.js with `npm ci --prefix tests/oidc` (.ci/run does this).

use std::time::Duration;

use lmos_sidecar::auth::credentials::sha256_hex;
use lmos_sidecar::config::{Grants, HttpScheme, PrincipalConfig};
use lmos_testkit::oidc::{claims, Alg, Provider};
use lmos_testkit::weather_agent::{self, THING_ID};
use lmos_testkit::{self as common, ws_request, MqttClient, TestSidecar, WsClient};
use rumqttc::SubscribeReasonCode;
use serde_json::{json, Value};

mod refusals;

/// The directory's, the gateway's, `/a2a`'s and MQTT's audience.
const AUDIENCE: &str = "urn:lmos:sidecar";
const STATIC_TOKEN: &str = "operator-static-token";

fn grants(consume: &[&str], operate: &[&str], host: &[&str]) -> Grants {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
    Grants {
        host: v(host),
        consume: v(consume),
        operate: v(operate),
    }
}

/// Bearer only, nothing for anonymous; `lmos:host`, `lmos:consume` and
/// `lmos:operate` grant those rights on the WeatherAgent, `lmos:admin`
/// nothing (no entry); a static principal `operator` with a bearer token.
async fn sidecar(provider: &Provider) -> TestSidecar {
    let mut c = common::test_config();
    c.http.authentication = vec![HttpScheme::Bearer];
    c.mqtt.authentication = true;
    c.auth.anonymous = Grants::default();
    // The refusal test presents a dozen bad tokens from one address: each
    // must be checked, not throttled (the throttle has tests of its own).
    c.auth.max_failures = 0;
    c.auth.principals = vec![PrincipalConfig {
        name: "operator".into(),
        token_sha256: sha256_hex(STATIC_TOKEN.as_bytes()),
        consume: vec![THING_ID.into()],
        operate: vec![THING_ID.into()],
        ..PrincipalConfig::default()
    }];
    let jwt = &mut c.auth.jwt;
    jwt.issuer = provider.issuer().into();
    jwt.audience = vec![AUDIENCE.into()];
    jwt.jwks_url = provider.jwks_url().into();
    // The rotation test's second fetch follows the first at once; the
    // expiry test's token is refused the second its exp passes.
    jwt.jwks_min_refresh_ms = 0;
    jwt.leeway_ms = 0;
    jwt.grants = [
        ("lmos:host", grants(&[], &[], &[THING_ID])),
        ("lmos:consume", grants(&[THING_ID], &[], &[])),
        ("lmos:operate", grants(&[], &[THING_ID], &[])),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    TestSidecar::start_with(c).await
}

/// The WeatherAgent, hosting with a provider token (`lmos:host`).
async fn with_agent(provider: &Provider, sidecar: &TestSidecar) {
    let token = provider.token(AUDIENCE, "lmos:host", Alg::Rs256).await;
    let url = sidecar.ws_url();
    tokio::spawn(async move {
        weather_agent::serve_with_token(&url, Some(&token))
            .await
            .map_err(|e| e.to_string())
    });
    let deadline = tokio::time::Instant::now() + common::WAIT;
    while directory(sidecar, STATIC_TOKEN).await.status != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent's TD never came"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The WeatherAgent's TD from the directory.
async fn directory(sidecar: &TestSidecar, token: &str) -> common::HttpResponse {
    let path = format!("/things/{}", common::urlencode(THING_ID));
    get(sidecar, &path, token).await
}

async fn get(sidecar: &TestSidecar, path: &str, token: &str) -> common::HttpResponse {
    let bearer = format!("Bearer {token}");
    common::http_with(
        sidecar.http,
        "GET",
        path,
        &[("Authorization", &bearer)],
        b"",
    )
    .await
}

async fn post(
    sidecar: &TestSidecar,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> common::HttpResponse {
    let bearer = format!("Bearer {token}");
    let mut all = vec![
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
    ];
    all.extend_from_slice(headers);
    common::http_with(
        sidecar.http,
        "POST",
        path,
        &all,
        body.to_string().as_bytes(),
    )
    .await
}

async fn ws(sidecar: &TestSidecar, query: &str, token: &str) -> Result<WsClient, u16> {
    let mut request = ws_request(
        &format!("{}{query}", sidecar.ws_url()),
        Some("lmosprotocol"),
    );
    let bearer = format!("Bearer {token}").parse().expect("a header value");
    request.headers_mut().insert("Authorization", bearer);
    WsClient::connect_request(request).await
}

/// The gateway's first answer to an invokeAction of getWeather.
async fn invoke_over_ws(sidecar: &TestSidecar, token: &str) -> Value {
    let mut client = ws(sidecar, "", token)
        .await
        .expect("the handshake takes the token");
    client
        .send(
            json!({"thingID": THING_ID, "messageID": "ask", "messageType": "invokeAction",
            "action": "getWeather", "input": {"question": "in Oslo", "interactionMode": "text"}}),
        )
        .await;
    client.recv().await
}

/// `/mcp` (2026-07-28, stateless): the tools the token's principal sees.
async fn mcp_tools(sidecar: &TestSidecar, token: &str) -> common::HttpResponse {
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "oidc", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}});
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}});
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/list"),
        ("Accept", "application/json, text/event-stream"),
    ];
    post(sidecar, "/mcp", token, &headers, &body).await
}

async fn a2a_send(sidecar: &TestSidecar, token: &str) -> Value {
    let send = json!({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"question": "in Oslo", "interactionMode": "text"}}]},
        "configuration": {"blocking": true}}});
    let path = format!("/a2a/{}", common::urlencode(THING_ID));
    post(sidecar, &path, token, &[("A2A-Version", "1.0")], &send)
        .await
        .json()
}

/// The SUBACK codes for the Thing's events, a client whose password is `token`.
async fn mqtt_subscribe(
    sidecar: &TestSidecar,
    client_id: &str,
    token: &str,
) -> Vec<SubscribeReasonCode> {
    let mut client = MqttClient::connect_as(sidecar.mqtt, client_id, "anyone", token, None).await;
    client
        .subscribe_codes(&[&format!("lmos/{THING_ID}/events/+")])
        .await
}

async fn mqtt_publishes_per_grants(sidecar: &TestSidecar, reader: &str, operator: &str) {
    let invoke = |id: &str| {
        common::lmos(
            THING_ID,
            "invokeAction",
            json!({"action": "getWeather", "correlationID": id,
                "input": {"question": "in Oslo", "interactionMode": "text"}}),
        )
    };
    let requests = format!("lmos/{THING_ID}/requests/invokeAction");
    let mut allowed =
        MqttClient::connect_as(sidecar.mqtt, "oidc-operator", "anyone", operator, None).await;
    allowed
        .subscribe(&format!("lmos/{THING_ID}/actions/getWeather/status/+"))
        .await;
    let mut denied =
        MqttClient::connect_as(sidecar.mqtt, "oidc-reader", "anyone", reader, None).await;
    denied.publish(&requests, &invoke("denied"), false).await;
    allowed.publish(&requests, &invoke("allowed"), false).await;
    let (_, status, _) = allowed.recv_json().await;
    assert_eq!(status["correlationID"], "allowed", "{status}");
    let series = r#"lmos_sidecar_denied_total{access="operate",transport="mqtt"} 1"#;
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        let metrics = common::http(sidecar.http, "GET", "/metrics", None, b"")
            .await
            .body;
        if metrics.contains(series) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} in {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn provider_tokens_get_their_scopes_grants_on_every_transport() {
    let provider = Provider::start().await;
    let sidecar = sidecar(&provider).await;
    with_agent(&provider, &sidecar).await;

    for alg in Alg::ALL {
        // Directory: consume reads the TD; a scope without grants does not.
        let reader = provider.token(AUDIENCE, "lmos:consume", alg).await;
        assert_eq!(
            directory(&sidecar, &reader).await.status,
            200,
            "{}",
            alg.name()
        );
        let nobody = provider.token(AUDIENCE, "lmos:admin", alg).await;
        assert_eq!(
            directory(&sidecar, &nobody).await.status,
            403,
            "{}",
            alg.name()
        );
        // MQTT, the token as password: consume subscribes to the events.
        let id = format!("oidc-{}", alg.name());
        assert_eq!(
            mqtt_subscribe(&sidecar, &id, &reader).await,
            vec![SubscribeReasonCode::Success(rumqttc::QoS::AtLeastOnce)],
            "{}",
            alg.name()
        );
        let id = format!("oidc-nobody-{}", alg.name());
        assert_eq!(
            mqtt_subscribe(&sidecar, &id, &nobody).await,
            vec![SubscribeReasonCode::Failure],
            "{}",
            alg.name()
        );
    }

    // The gateway: hosting is checked at the handshake, operating per message.
    let reader = provider.token(AUDIENCE, "lmos:consume", Alg::Es256).await;
    let operator = provider
        .token(AUDIENCE, "lmos:consume lmos:operate", Alg::EdDsa)
        .await;
    let host = format!("?host={}", common::urlencode(THING_ID));
    assert_eq!(ws(&sidecar, &host, &reader).await.err(), Some(403));
    let denied = invoke_over_ws(&sidecar, &reader).await;
    let detail = denied["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("`lmos-es256` may not send `invokeAction`"),
        "{denied}"
    );
    assert_eq!(
        denied["type"], "https://eclipse.dev/lmos/protocol/v1/errors#forbidden",
        "{denied}"
    );
    let answered = invoke_over_ws(&sidecar, &operator).await;
    assert_eq!(answered["messageType"], "actionStatus", "{answered}");

    // /mcp with the MCP resource as audience: the tools follow the grants.
    let resource = format!("http://{}/mcp", sidecar.http);
    let tools = |token: String| {
        let sidecar = &sidecar;
        async move {
            let listed = mcp_tools(sidecar, &token).await;
            assert_eq!(listed.status, 200, "{}", listed.body);
            listed.json()["result"]["tools"]
                .as_array()
                .map(Vec::len)
                .unwrap_or_default()
        }
    };
    let mcp_operator = provider
        .token(&resource, "lmos:consume lmos:operate", Alg::Rs256)
        .await;
    assert!(tools(mcp_operator).await > 0);
    let mcp_nobody = provider.token(&resource, "lmos:admin", Alg::Rs256).await;
    assert_eq!(tools(mcp_nobody).await, 0);

    // /a2a: operate sends, consume alone may not.
    let sent = a2a_send(&sidecar, &operator).await;
    assert_eq!(
        sent["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{sent}"
    );
    let refused = a2a_send(&sidecar, &reader).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("needs `operate` access"), "{refused}");

    // MQTT publishing: operate's invokeAction reaches the agent (its
    // statuses come back), consume's is denied (MQTT 3.1.1 acknowledges
    // it all the same; the sidecar counts the denial).
    mqtt_publishes_per_grants(&sidecar, &reader, &operator).await;

    // The static principal beside the JWTs.
    assert_eq!(directory(&sidecar, STATIC_TOKEN).await.status, 200);
    sidecar.stop().await;
}

/// What an MCP SDK does against the provider ([`Provider::authorization_code_token`]):
/// metadata at each well-known form it may try for an issuer with a path,
/// then the cookie-free authorization-code flow with PKCE and the RFC 8707
/// resource, for a JWT whose `aud` is that resource.
#[tokio::test]
async fn an_sdk_like_client_gets_a_code_and_a_token_for_its_resource() {
    let provider = Provider::start_at_path("/realms/lmos").await;
    for form in [
        "/.well-known/oauth-authorization-server/realms/lmos",
        "/.well-known/openid-configuration/realms/lmos",
        "/realms/lmos/.well-known/openid-configuration",
    ] {
        let metadata = provider.metadata(form).await;
        assert_eq!(metadata["issuer"], provider.issuer(), "{form}");
        assert_eq!(
            metadata["code_challenge_methods_supported"],
            json!(["S256"])
        );
        assert_eq!(
            metadata["registration_endpoint"],
            provider.registration_endpoint()
        );
    }
    let resource = "http://127.0.0.1:9/mcp";
    let token = provider
        .authorization_code_token(resource, "lmos:consume lmos:operate")
        .await;
    let claims = claims(&token);
    assert_eq!(claims["aud"], resource, "{claims}");
    assert_eq!(claims["sub"], "alice", "{claims}");
    assert_eq!(claims["scope"], "lmos:consume lmos:operate", "{claims}");
    assert_eq!(claims["iss"], provider.issuer(), "{claims}");
}
