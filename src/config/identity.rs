//! Identities a production cluster already has: `[auth.jwt]` (OIDC / OAuth
//! access tokens as JWTs), client certificates on the TLS ports
//! (`tls_client_ca`, `tls_client_auth`), and `[mcp.oauth]` (MCP as an
//! OAuth 2.1 resource server, RFC 9728).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Grants;

/// JWT bearer tokens from an OpenID provider, on every transport (HTTP
/// `Authorization: Bearer`, the WebSocket handshake, `/mcp`, `/a2a`, and
/// the MQTT CONNECT password). Off while `issuer` is empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JwtConfig {
    /// The `iss` every token must carry (the provider's issuer URL).
    /// Empty: JWTs are not accepted.
    pub issuer: String,
    /// `aud` values accepted (a token must name one of them); the MCP
    /// resource (`mcp.oauth.resource`) is accepted besides, and is the only
    /// one accepted at `/mcp`.
    pub audience: Vec<String>,
    /// Where the provider's signing keys are (a JWK Set): `https://`, or
    /// `http://` to a loopback address. One of this and `jwks_file`.
    pub jwks_url: String,
    /// A JWK Set in a file, read at start-up.
    pub jwks_file: String,
    /// PEM CA certificates trusted for `jwks_url`, besides the system's.
    pub jwks_ca_file: String,
    /// Signature algorithms accepted (`RS256`, `ES256`, `EdDSA`); `none` and
    /// the HMAC ones never are.
    pub algorithms: Vec<String>,
    /// The claim whose string value is the principal's name.
    pub principal_claim: String,
    /// The claim whose values select grants: a space-separated string
    /// (`scope`) or an array of strings (`roles`); dots reach into objects
    /// (`realm_access.roles`).
    pub grants_claim: String,
    /// `[auth.jwt.grants.<value>]`: what a token carrying that value in
    /// `grants_claim` may do (`host`, `consume`, `operate` patterns, where
    /// `{principal}` stands for the token's principal name). Values with no
    /// entry grant nothing.
    pub grants: BTreeMap<String, Grants>,
    /// Clock skew allowed on `exp` and `nbf`, in milliseconds.
    pub leeway_ms: u64,
    /// How long fetched keys are used before they are fetched again, in ms.
    pub jwks_ttl_ms: u64,
    /// The shortest time between two fetches of `jwks_url` (a token with an
    /// unknown `kid` asks for one), in milliseconds.
    pub jwks_min_refresh_ms: u64,
    /// Time a fetch of `jwks_url` may take, in milliseconds.
    pub jwks_timeout_ms: u64,
    /// Longest token accepted, in bytes.
    pub max_token_bytes: usize,
}

impl Default for JwtConfig {
    fn default() -> Self {
        JwtConfig {
            issuer: String::new(),
            audience: Vec::new(),
            jwks_url: String::new(),
            jwks_file: String::new(),
            jwks_ca_file: String::new(),
            algorithms: vec!["RS256".into(), "ES256".into(), "EdDSA".into()],
            principal_claim: "sub".into(),
            grants_claim: "scope".into(),
            grants: BTreeMap::new(),
            leeway_ms: 30_000,
            jwks_ttl_ms: 600_000,
            jwks_min_refresh_ms: 10_000,
            jwks_timeout_ms: 5_000,
            max_token_bytes: 8_192,
        }
    }
}

impl JwtConfig {
    pub fn enabled(&self) -> bool {
        !self.issuer.is_empty()
    }
}

/// Whether a TLS port asks clients for certificates (with `tls_client_ca`
/// set; without it, never).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    /// A client without a certificate from `tls_client_ca` is refused in
    /// the TLS handshake.
    Required,
    /// A certificate is asked for; a client without one authenticates as
    /// it would without client certificates.
    Optional,
}

/// MCP as an OAuth 2.1 resource server: protected-resource metadata at
/// `/.well-known/oauth-protected-resource` (and `.../mcp`), challenges
/// naming it, and tokens taken at `/mcp` only when issued for it. Served
/// while `auth.jwt.issuer` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct McpOAuthConfig {
    /// The canonical URL of the MCP endpoint (RFC 8707 resource, the `aud`
    /// a token for `/mcp` must carry). Empty: `http(s)://` +
    /// `discovery.public_host` (or the listen address) + port + `/mcp`.
    pub resource: String,
    /// Authorization servers named in the metadata. Empty: `auth.jwt.issuer`.
    pub authorization_servers: Vec<String>,
    /// Scopes named in the metadata and in challenges. Empty: the values of
    /// `[auth.jwt.grants]`.
    pub scopes_supported: Vec<String>,
    /// Scopes a token must carry at `/mcp`; one without gets `403` with
    /// `error="insufficient_scope"`.
    pub required_scopes: Vec<String>,
}
