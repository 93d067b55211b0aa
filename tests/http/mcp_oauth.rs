//! `/mcp` as an OAuth 2.1 resource server (issue 46): the RFC 9728
//! metadata and the `WWW-Authenticate` challenge an MCP client follows,
//! against a real sidecar. Tokens from a real provider: tests/interop.

use lmos_testkit as common;

use common::*;
use lmos_sidecar::auth::credentials::sha256_hex;
use lmos_sidecar::config::{Grants, HttpScheme, PrincipalConfig};
use lmos_sidecar::Config;

const ISSUER: &str = "https://id.example";

fn oauth_config() -> Config {
    let mut c = test_config();
    c.http.authentication = vec![HttpScheme::Bearer];
    c.auth.anonymous = Grants::default();
    // A static principal beside the JWTs (they keep working).
    c.auth.principals = vec![PrincipalConfig {
        name: "agent".into(),
        token_sha256: sha256_hex(b"agent-token-0123456789"),
        ..PrincipalConfig::default()
    }];
    c.auth.jwt.issuer = ISSUER.to_owned();
    c.auth.jwt.jwks_url = format!("{ISSUER}/jwks");
    c.auth
        .jwt
        .grants
        .insert("weather".to_owned(), Grants::default());
    c
}

const INIT: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

#[tokio::test]
async fn the_metadata_names_the_resource_provider_and_scopes() {
    let sidecar = TestSidecar::start_with(oauth_config()).await;
    let resource = format!("http://{}/mcp", sidecar.http);
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let r = http(sidecar.http, "GET", path, None, b"").await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert_eq!(r.header("access-control-allow-origin"), Some("*"));
        let m = r.json();
        assert_eq!(m["resource"], resource.as_str());
        assert_eq!(m["authorization_servers"][0], ISSUER);
        assert_eq!(m["scopes_supported"], serde_json::json!(["weather"]));
        assert_eq!(m["bearer_methods_supported"][0], "header");
    }
}

#[tokio::test]
async fn without_an_issuer_there_is_no_metadata() {
    let sidecar = TestSidecar::start().await;
    let r = http(
        sidecar.http,
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        None,
        b"",
    )
    .await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn a_401_at_mcp_points_at_the_metadata() {
    let sidecar = TestSidecar::start_with(oauth_config()).await;
    let metadata = format!(
        "http://{}/.well-known/oauth-protected-resource/mcp",
        sidecar.http
    );
    let json = ("Content-Type", "application/json");
    let accept = ("Accept", "application/json, text/event-stream");
    let r = http_with(sidecar.http, "POST", "/mcp", &[json, accept], INIT).await;
    assert_eq!(r.status, 401);
    let challenges: Vec<&str> = r
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("www-authenticate"))
        .map(|(_, v)| v.as_str())
        .collect();
    let expected = format!("Bearer resource_metadata=\"{metadata}\", scope=\"weather\"");
    assert!(challenges.contains(&expected.as_str()), "{challenges:?}");

    let bad = ("Authorization", "Bearer not-a-token");
    let r = http_with(sidecar.http, "POST", "/mcp", &[json, accept, bad], INIT).await;
    assert_eq!(r.status, 401);
    let expected = format!("{expected}, error=\"invalid_token\"");
    assert!(
        r.headers.iter().any(|(_, v)| v == &expected),
        "{:?}",
        r.headers
    );

    let agent = ("Authorization", "Bearer agent-token-0123456789");
    let r = http_with(sidecar.http, "POST", "/mcp", &[json, accept, agent], INIT).await;
    assert_eq!(r.status, 200, "a static token keeps working: {}", r.body);
}
