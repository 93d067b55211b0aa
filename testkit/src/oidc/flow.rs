//! The authorization-code flow as an MCP SDK runs it against the provider,
//! with plain HTTP that keeps no cookies: open registration (RFC 7591) of a
//! public client, the authorization URL followed to the redirect_uri, the
//! code exchanged with PKCE (S256), the RFC 8707 `resource` on both
//! requests.

use base64::Engine;
use serde_json::{json, Value};

use super::Provider;
use crate::{http, urlencode};

/// Never listened on: the flow stops at the redirect to it.
const REDIRECT: &str = "http://127.0.0.1:9/callback";
const VERIFIER: &str = "a-code-verifier-long-enough-for-rfc-7636-of-43-chars-at-least";

/// The path of an absolute URL (raw HTTP takes paths).
fn path_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.find('/').map_or("/", |i| &rest[i..])
}

fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", urlencode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// BASE64URL(SHA-256(verifier)), from the sidecar's own SHA-256.
fn s256(verifier: &str) -> String {
    let hex = lmos_sidecar::auth::credentials::sha256_hex(verifier.as_bytes());
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl Provider {
    /// A metadata document at `path` (a well-known form), 200 asserted.
    pub async fn metadata(&self, path: &str) -> Value {
        let answer = http(self.addr(), "GET", path, None, b"").await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        answer.json()
    }

    /// A public client registered openly, as the MCP SDKs do; its id.
    pub async fn register_public_client(&self) -> String {
        let registration = json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"]});
        let body = registration.to_string();
        let path = path_of(self.registration_endpoint());
        let registered = http(
            self.addr(),
            "POST",
            path,
            Some("application/json"),
            body.as_bytes(),
        )
        .await;
        assert_eq!(registered.status, 201, "{}", registered.body);
        registered.json()["client_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The whole flow for `resource` and `scopes`: `alice` logs in and
    /// consents by herself; the access token (a JWT, `aud` = `resource`).
    pub async fn authorization_code_token(&self, resource: &str, scopes: &str) -> String {
        let client = self.register_public_client().await;
        let code = self.authorize(&client, resource, scopes).await;
        let body = form(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("client_id", &client),
            ("redirect_uri", REDIRECT),
            ("code_verifier", VERIFIER),
            ("resource", resource),
        ]);
        let path = path_of(self.token_endpoint());
        let content = Some("application/x-www-form-urlencoded");
        let issued = http(self.addr(), "POST", path, content, body.as_bytes()).await;
        assert_eq!(issued.status, 200, "{}", issued.body);
        issued.json()["access_token"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The authorization URL followed, redirect by redirect, to the code.
    async fn authorize(&self, client: &str, resource: &str, scopes: &str) -> String {
        let query = form(&[
            ("response_type", "code"),
            ("client_id", client),
            ("redirect_uri", REDIRECT),
            ("code_challenge", &s256(VERIFIER)),
            ("code_challenge_method", "S256"),
            ("scope", scopes),
            ("resource", resource),
            ("state", "s"),
        ]);
        let mut location = format!("{}?{query}", self.authorization_endpoint());
        for _ in 0..8 {
            if location.starts_with(REDIRECT) {
                let code = location
                    .split(['?', '&'])
                    .find_map(|p| p.strip_prefix("code="));
                return code.expect("a code").to_owned();
            }
            let answer = http(self.addr(), "GET", path_of(&location), None, b"").await;
            let status = answer.status;
            assert!(
                matches!(status, 302 | 303),
                "{location}: {status} {}",
                answer.body
            );
            location = match answer.header("location").unwrap_or_default() {
                next if next.starts_with('/') => format!("http://{}{next}", self.addr()),
                next => next.to_owned(),
            };
        }
        panic!("no end to the redirects: {location}")
    }
}
