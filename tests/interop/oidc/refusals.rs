//! The refusals, each as a user sees it (HTTP 401 with a Bearer
//! challenge, MQTT CONNACK bad user name or password), and the `/mcp`
//! audience rule.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lmos_testkit::oidc::{claims, header, Alg, Forged, Provider};
use lmos_testkit::{self as common, TestSidecar};
use rumqttc::ConnectReturnCode;

use super::{get, mcp_tools, sidecar, AUDIENCE, STATIC_TOKEN};

/// A refusal as an HTTP client sees it: 401 with a Bearer challenge.
async fn assert_refused_over_http(sidecar: &TestSidecar, token: &str, what: &str) {
    let answer = get(sidecar, "/things", token).await;
    assert_eq!(answer.status, 401, "{what}: {}", answer.body);
    let challenge = answer.header("www-authenticate").unwrap_or_default();
    assert!(challenge.starts_with("Bearer"), "{what}: {challenge}");
}

/// `None` when a CONNECT with `token` as its password is accepted, else
/// the CONNACK's code.
async fn mqtt_connect(sidecar: &TestSidecar, token: &str) -> Option<ConnectReturnCode> {
    let token = token.to_owned();
    common::mqtt_refusal(sidecar.mqtt, |o| {
        o.set_credentials("anyone", token);
    })
    .await
}

/// A refusal as an MQTT client sees it: CONNACK bad user name or password.
async fn assert_refused_over_mqtt(sidecar: &TestSidecar, token: &str, what: &str) {
    assert_eq!(
        mqtt_connect(sidecar, token).await,
        Some(ConnectReturnCode::BadUserNamePassword),
        "{what}"
    );
}

async fn assert_refused(sidecar: &TestSidecar, token: &str, what: &str) {
    assert_refused_over_http(sidecar, token, what).await;
    assert_refused_over_mqtt(sidecar, token, what).await;
}

async fn assert_metric(sidecar: &TestSidecar, line: &str) {
    let metrics = common::http(sidecar.http, "GET", "/metrics", None, b"")
        .await
        .body;
    assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
}

#[tokio::test]
async fn bad_tokens_are_refused_and_rotated_keys_are_fetched() {
    let provider = Provider::start().await;
    let sidecar = sidecar(&provider).await;
    let scope = "lmos:consume";

    let other_audience = provider.token("urn:somebody-else", scope, Alg::Rs256).await;
    assert_refused(&sidecar, &other_audience, "wrong audience").await;
    // Same keys, another issuer: only `iss` is wrong.
    let impostor = Provider::start_sharing_keys(&provider).await;
    let other_issuer = impostor.token(AUDIENCE, scope, Alg::Rs256).await;
    assert_ne!(claims(&other_issuer)["iss"], provider.issuer());
    assert_refused(&sidecar, &other_issuer, "wrong issuer").await;
    drop(impostor);
    for (kind, what) in [
        (Forged::AlgNone, "alg none"),
        (
            Forged::HmacWithPublicKey,
            "HS256 keyed with the RSA public key",
        ),
    ] {
        let forged = provider.forge(kind, AUDIENCE, scope).await;
        assert_refused(&sidecar, &forged, what).await;
    }

    // An unknown kid is refused (the sidecar refetched and did not find it);
    // after the provider rotates, its new key's tokens are taken.
    let unknown = provider.forge(Forged::UnknownKid, AUDIENCE, scope).await;
    assert_refused(&sidecar, &unknown, "unknown kid").await;
    assert_metric(&sidecar, "lmos_sidecar_auth_jwks_keys 3").await;
    let before = provider.current_kid(Alg::Rs256).await;
    provider.rotate().await;
    let rotated = provider.token(AUDIENCE, scope, Alg::Rs256).await;
    assert_ne!(header(&rotated)["kid"], before.as_str());
    assert_eq!(get(&sidecar, "/things", &rotated).await.status, 200);
    assert_eq!(mqtt_connect(&sidecar, &rotated).await, None);
    // The refetched set: the three new keys and the three old ones.
    assert_metric(&sidecar, "lmos_sidecar_auth_jwks_keys 6").await;

    // Expired: refused from the second after its exp (leeway 0).
    let short = provider.short_lived_token(AUDIENCE, scope).await;
    let exp = claims(&short)["exp"].as_u64().expect("an exp");
    while SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
        <= exp
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_refused(&sidecar, &short, "expired").await;

    // The static principal still gets in.
    assert_eq!(get(&sidecar, "/things", STATIC_TOKEN).await.status, 200);
    sidecar.stop().await;
}

/// At `/mcp` only the MCP resource is an accepted audience (RFC 8707): a
/// token for the sidecar's other audience is refused there with the
/// Bearer challenge, and taken everywhere else.
#[tokio::test]
async fn at_mcp_only_the_mcp_resource_is_an_accepted_audience() {
    let provider = Provider::start().await;
    let sidecar = sidecar(&provider).await;
    let elsewhere = provider
        .token(AUDIENCE, "lmos:consume lmos:operate", Alg::Rs256)
        .await;
    assert_eq!(get(&sidecar, "/things", &elsewhere).await.status, 200);
    let refused = mcp_tools(&sidecar, &elsewhere).await;
    assert_eq!(refused.status, 401, "{}", refused.body);
    let challenge = refused.header("www-authenticate").unwrap_or_default();
    assert!(challenge.starts_with("Bearer"), "{challenge}");
    assert!(challenge.contains("invalid_token"), "{challenge}");
    let resource = format!("http://{}/mcp", sidecar.http);
    let taken = provider
        .token(&resource, "lmos:consume lmos:operate", Alg::Rs256)
        .await;
    assert_eq!(mcp_tools(&sidecar, &taken).await.status, 200);
    sidecar.stop().await;
}
