//! `/mcp` as an OAuth resource server with tokens from the real provider
//! (tests/oidc): only a token for the MCP URL is accepted there (RFC 8707);
//! one for the sidecar's other audience gets 401 invalid_token with the
//! challenge naming the metadata.

use lmos_sidecar::config::{Grants, HttpScheme};
use lmos_testkit::oidc::{Alg, Provider};
use lmos_testkit::{self as common, http_with, TestSidecar};

const AUDIENCE: &str = "urn:lmos:sidecar";
const INIT: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

async fn sidecar(provider: &Provider) -> TestSidecar {
    let mut c = common::test_config();
    c.http.authentication = vec![HttpScheme::Bearer];
    c.auth.anonymous = Grants::default();
    c.auth.max_failures = 0;
    let jwt = &mut c.auth.jwt;
    jwt.issuer = provider.issuer().into();
    jwt.audience = vec![AUDIENCE.into()];
    jwt.jwks_url = provider.jwks_url().into();
    jwt.grants.insert("lmos:consume".into(), Grants::default());
    TestSidecar::start_with(c).await
}

#[tokio::test]
async fn only_a_token_for_the_mcp_url_is_accepted_at_mcp() {
    let provider = Provider::start().await;
    let sidecar = sidecar(&provider).await;
    let mcp = format!("http://{}/mcp", sidecar.http);
    let post = |token: String| async move {
        let bearer = format!("Bearer {token}");
        let headers = [
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", bearer.as_str()),
        ];
        http_with(sidecar.http, "POST", "/mcp", &headers, INIT).await
    };
    let other = provider.token(AUDIENCE, "lmos:consume", Alg::Rs256).await;
    let r = post(other).await;
    assert_eq!(r.status, 401, "{}", r.body);
    let challenge = r
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("www-authenticate"))
        .map(|(_, v)| v.as_str())
        .find(|v| v.contains("resource_metadata"))
        .unwrap_or_default();
    assert!(
        challenge.contains("error=\"invalid_token\""),
        "{:?}",
        r.headers
    );
    let right = provider.token(&mcp, "lmos:consume", Alg::Rs256).await;
    let r = post(right).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn a_token_without_the_required_scopes_gets_insufficient_scope() {
    let provider = Provider::start().await;
    let mut c = common::test_config();
    c.http.authentication = vec![HttpScheme::Bearer];
    c.auth.anonymous = Grants::default();
    c.mcp.oauth.required_scopes = vec!["mcp:tools".into()];
    let jwt = &mut c.auth.jwt;
    jwt.issuer = provider.issuer().into();
    jwt.jwks_url = provider.jwks_url().into();
    jwt.grants.insert("lmos:consume".into(), Grants::default());
    let sidecar = TestSidecar::start_with(c).await;
    let mcp = format!("http://{}/mcp", sidecar.http);
    let token = provider.token(&mcp, "lmos:consume", Alg::Es256).await;
    let bearer = format!("Bearer {token}");
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Authorization", bearer.as_str()),
    ];
    let r = http_with(sidecar.http, "POST", "/mcp", &headers, INIT).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let challenge = r.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"mcp:tools\""),
        "{challenge}"
    );
    let token = provider
        .token(&mcp, "lmos:consume mcp:tools", Alg::Es256)
        .await;
    let bearer = format!("Bearer {token}");
    let headers = [headers[0], headers[1], ("Authorization", bearer.as_str())];
    let r = http_with(sidecar.http, "POST", "/mcp", &headers, INIT).await;
    assert_eq!(r.status, 200, "{}", r.body);
}
