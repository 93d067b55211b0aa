//! The official MCP clients sign in by themselves against the sidecar and a
//! real OpenID provider (node-oidc-provider, `tests/oidc`), headlessly, then
//! list and call the WeatherAgent: the TypeScript SDK (`tests/mcp/oauth.mjs`)
//! and the Python SDK (`tests/mcp/oauth.py`). Each meets `/mcp`'s 401,
//! follows its `resource_metadata` to the provider, registers, authorizes
//! with PKCE for the MCP URL as the resource (RFC 8707), and comes back with
//! a token whose scopes grant what it calls.

use lmos_sidecar::config::{Grants, HttpScheme};
use lmos_testkit::oidc::{Alg, Provider};
use lmos_testkit::weather_agent::{self, THING_ID};
use lmos_testkit::{self as common, http_with, TestSidecar};
use serde_json::Value;

use crate::mcp::{mcp_url, Run};

/// The agent's audience (it hosts over the WebSocket gateway).
const AUDIENCE: &str = "urn:lmos:sidecar";

fn grant(consume: &[&str], operate: &[&str], host: &[&str]) -> Grants {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
    Grants {
        host: v(host),
        consume: v(consume),
        operate: v(operate),
    }
}

/// Bearer only; `lmos:consume` and `lmos:operate` are what an MCP client is
/// offered (the metadata's scopes), `lmos:host` is the agent's.
async fn sidecar_with_agent(
    provider: &Provider,
    offered: &[&str],
) -> (TestSidecar, tokio::task::JoinHandle<()>) {
    let mut c = common::test_config();
    c.http.authentication = vec![HttpScheme::Bearer];
    c.auth.anonymous = Grants::default();
    c.mcp.oauth.scopes_supported = offered.iter().map(|s| s.to_string()).collect();
    let jwt = &mut c.auth.jwt;
    jwt.issuer = provider.issuer().into();
    jwt.audience = vec![AUDIENCE.into()];
    jwt.jwks_url = provider.jwks_url().into();
    jwt.grants
        .insert("lmos:consume".into(), grant(&[THING_ID], &[], &[]));
    jwt.grants
        .insert("lmos:operate".into(), grant(&[], &[THING_ID], &[]));
    jwt.grants
        .insert("lmos:host".into(), grant(&[], &[], &[THING_ID]));
    let sidecar = TestSidecar::start_with(c).await;
    let token = provider.token(AUDIENCE, "lmos:host", Alg::Rs256).await;
    let url = sidecar.ws_url();
    let agent = tokio::spawn(async move {
        let _ = weather_agent::serve_with_token(&url, Some(&token)).await;
    });
    common::wait_for_stats(&sidecar, |s| s.hosted_things == 1).await;
    // The agent registers its description on its socket; tools come from it.
    let reader = provider.token(AUDIENCE, "lmos:consume", Alg::Es256).await;
    let bearer = format!("Bearer {reader}");
    let path = format!("/things/{THING_ID}");
    for _ in 0..250 {
        let r = http_with(
            sidecar.http,
            "GET",
            &path,
            &[("Authorization", &bearer)],
            b"",
        )
        .await;
        if r.status == 200 {
            return (sidecar, agent);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the WeatherAgent's description was never registered");
}

/// What both SDKs must have done: signed in through the provider, for the
/// MCP URL, with the offered scopes, and got the forecast.
fn assert_signed_in_and_called(report: &Value, mcp: &str) {
    assert_eq!(report["errors"], serde_json::json!([]), "{report:#}");
    let asked = &report["authorization"];
    assert_eq!(asked["resource"], mcp, "RFC 8707 resource: {report:#}");
    assert_eq!(asked["code_challenge_method"], "S256", "{report:#}");
    let scope = asked["scope"].as_str().unwrap_or_default();
    assert!(
        scope.contains("lmos:consume") && scope.contains("lmos:operate"),
        "the metadata's scopes were asked for: {report:#}"
    );
    let tools = report["tools"].as_array().expect("tools listed");
    assert!(
        tools.iter().any(|t| t == "getWeather"),
        "the agent's tool is listed: {report:#}"
    );
    let result = &report["result"];
    assert_eq!(result["isError"], false, "{report:#}");
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("weather"),
        "the forecast came back: {report:#}"
    );
}

#[tokio::test]
async fn the_typescript_sdk_signs_in_through_the_provider_then_lists_and_calls() {
    let provider = Provider::start().await;
    let (sidecar, _agent) = sidecar_with_agent(&provider, &["lmos:consume", "lmos:operate"]).await;
    let mcp = mcp_url(&sidecar);
    let report = Run::start("node", "oauth.mjs", std::slice::from_ref(&mcp))
        .report()
        .await;
    assert_signed_in_and_called(&report, &mcp);
    let steps = report["steps"].as_array().unwrap();
    for step in ["unauthorized", "registered", "authorize", "tokens"] {
        assert!(steps.iter().any(|s| s == step), "{step}: {report:#}");
    }
}

#[tokio::test]
async fn the_python_sdk_signs_in_through_the_provider_then_lists_and_calls() {
    let provider = Provider::start().await;
    let (sidecar, _agent) = sidecar_with_agent(&provider, &["lmos:consume", "lmos:operate"]).await;
    let mcp = mcp_url(&sidecar);
    let report = Run::start("python3", "oauth.py", std::slice::from_ref(&mcp))
        .report()
        .await;
    assert_signed_in_and_called(&report, &mcp);
    assert_eq!(report["registered"], true, "{report:#}");
    assert!(
        report["scope"]
            .as_str()
            .is_some_and(|s| s.contains("lmos:operate")),
        "{report:#}"
    );
}

/// Step-up: offered only `lmos:consume`, the TypeScript client signs in with
/// it; its call needs `operate`, so the sidecar answers 403
/// `insufficient_scope` naming `lmos:operate`, and the SDK goes back to the
/// provider for that scope. node-oidc-provider then refuses it
/// (`invalid_scope`): the SDK registered the client with the first
/// challenge's scope only, and a provider holds a registered client to its
/// scopes. So an operator offers, in `mcp.oauth.scopes_supported`, every
/// scope its MCP clients may need: the first sign-in asks for them all.
#[tokio::test]
async fn the_typescript_sdk_steps_up_to_the_scope_a_call_needs() {
    let provider = Provider::start().await;
    let (sidecar, _agent) = sidecar_with_agent(&provider, &["lmos:consume"]).await;
    let mcp = mcp_url(&sidecar);
    let args = [mcp.clone(), "stepup".into()];
    let report = Run::start("node", "oauth.mjs", &args).report().await;
    assert_eq!(report["errors"], serde_json::json!([]), "{report:#}");
    assert_eq!(report["firstScope"], "lmos:consume", "{report:#}");
    let steps = report["steps"].as_array().unwrap();
    assert!(steps.iter().any(|s| s == "upscoped"), "{report:#}");
    assert_eq!(
        report["authorization"]["scope"], "lmos:operate",
        "{report:#}"
    );
    assert_eq!(report["callback"]["error"], "invalid_scope", "{report:#}");
}
