//! MCP as an OAuth 2.1 resource server: the RFC 9728 metadata an MCP
//! client fetches after a 401 at `/mcp`, the `WWW-Authenticate`
//! challenges pointing at it, and the audience and scope checks a JWT
//! principal passes at `/mcp` (RFC 8707: a token for another resource is
//! never accepted here, so no token is ever good for two services).
//!
//! Pure but for the handler: the settings are computed once at start-up.

use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;

use crate::auth::{Access, Principal};
use crate::config::Config;

/// Where the metadata is served. The path-inserted form (RFC 9728 §3.1)
/// is what the MCP SDKs try first for a resource at `/mcp`.
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";
pub const METADATA_MCP_PATH: &str = "/.well-known/oauth-protected-resource/mcp";

/// The resource server's settings, when `auth.jwt.issuer` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthResource {
    /// The canonical MCP URL, the `aud` a token must carry at `/mcp`.
    pub resource: String,
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Vec<String>,
    pub required_scopes: Vec<String>,
    /// Absolute URL of the path-inserted metadata, named in challenges.
    pub metadata_url: String,
    /// Every `auth.jwt.grants` key, for step-up (which one would grant).
    pub grant_scopes: Vec<String>,
    grants: std::collections::BTreeMap<String, crate::config::Grants>,
}

/// Why a JWT principal is refused at `/mcp`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the token's audience is not this MCP server ({0})")]
    Audience(String),
    #[error("the token lacks the scopes {0:?}")]
    Scope(Vec<String>),
}

impl OAuthResource {
    /// `None` while `auth.jwt.issuer` is empty: no metadata, no challenge
    /// beyond today's.
    pub fn new(config: &Config, resource: String) -> Option<Arc<OAuthResource>> {
        let jwt = &config.auth.jwt;
        if jwt.issuer.is_empty() {
            return None;
        }
        let oauth = &config.mcp.oauth;
        let grant_scopes: Vec<String> = jwt.grants.keys().cloned().collect();
        let authorization_servers = match oauth.authorization_servers.is_empty() {
            true => vec![jwt.issuer.clone()],
            false => oauth.authorization_servers.clone(),
        };
        let scopes_supported = match oauth.scopes_supported.is_empty() {
            true => grant_scopes.clone(),
            false => oauth.scopes_supported.clone(),
        };
        Some(Arc::new(OAuthResource {
            metadata_url: metadata_url(&resource),
            resource,
            authorization_servers,
            scopes_supported,
            required_scopes: oauth.required_scopes.clone(),
            grant_scopes,
            grants: jwt.grants.clone(),
        }))
    }

    /// The RFC 9728 document.
    pub fn metadata(&self) -> serde_json::Value {
        serde_json::json!({
            "resource": self.resource,
            "authorization_servers": self.authorization_servers,
            "scopes_supported": self.scopes_supported,
            "bearer_methods_supported": ["header"],
            "resource_name": "lmos-sidecar MCP",
        })
    }

    /// The scopes a challenge asks for: the required ones when set (the
    /// least a client needs), else every supported one.
    fn challenge_scopes(&self) -> String {
        match self.required_scopes.is_empty() {
            true => self.scopes_supported.join(" "),
            false => self.required_scopes.join(" "),
        }
    }

    /// The `Bearer` challenge of a 401 (`error` when a token was refused).
    pub fn challenge(&self, error: Option<&str>) -> String {
        let mut c = format!("Bearer resource_metadata=\"{}\"", self.metadata_url);
        let scope = self.challenge_scopes();
        if !scope.is_empty() {
            c.push_str(&format!(", scope=\"{scope}\""));
        }
        if let Some(error) = error {
            c.push_str(&format!(", error=\"{error}\""));
        }
        c
    }

    /// Whether the `auth.jwt.grants` entry `scope` allows `access` to
    /// `thing` for `principal` (patterns as in `[auth]`: exact, or a
    /// prefix and `*`; `{principal}` substituted).
    pub fn scope_grants(&self, scope: &str, principal: &str, access: Access, thing: &str) -> bool {
        let Some(g) = self.grants.get(scope) else {
            return false;
        };
        let patterns = match access {
            Access::Host => &g.host,
            Access::Consume => &g.consume,
            Access::Operate => &g.operate,
        };
        patterns.iter().any(|p| {
            let p = p.replace("{principal}", principal);
            match p.strip_suffix('*') {
                Some(prefix) => thing.starts_with(prefix),
                None => p == thing,
            }
        })
    }

    /// The 403 challenge naming `scope` (RFC 6750 §3.1).
    pub fn insufficient_scope(&self, scope: &str) -> String {
        format!(
            "Bearer error=\"insufficient_scope\", scope=\"{scope}\", resource_metadata=\"{}\"",
            self.metadata_url
        )
    }

    /// Whether a principal may use `/mcp` at all. Static tokens, Basic
    /// and anonymous carry no claims and pass as before.
    pub fn admit(&self, principal: &Principal) -> Result<(), Refusal> {
        let Some(token) = principal.token() else {
            return Ok(());
        };
        if !token.audiences.iter().any(|a| a == &self.resource) {
            return Err(Refusal::Audience(self.resource.clone()));
        }
        let missing: Vec<String> = self
            .required_scopes
            .iter()
            .filter(|s| !token.scopes.contains(s))
            .cloned()
            .collect();
        match missing.is_empty() {
            true => Ok(()),
            false => Err(Refusal::Scope(missing)),
        }
    }

    /// The answer to a refusal from [`OAuthResource::admit`].
    pub fn refuse(&self, refusal: &Refusal) -> Response {
        let (status, challenge) = match refusal {
            Refusal::Audience(_) => (
                StatusCode::UNAUTHORIZED,
                self.challenge(Some("invalid_token")),
            ),
            Refusal::Scope(_) => (
                StatusCode::FORBIDDEN,
                self.insufficient_scope(&self.challenge_scopes()),
            ),
        };
        with_challenge(status, &challenge, format!("{refusal}.\n"))
    }

    /// Step-up for a `tools/call` the principal may not make: the
    /// `auth.jwt.grants` key `grants_it` says would allow it, if any, as
    /// a 403 insufficient_scope naming it (so an SDK re-authorizes).
    pub fn step_up(
        &self,
        principal: &Principal,
        grants_it: impl Fn(&str) -> bool,
    ) -> Option<Response> {
        principal.token()?;
        let scope = self.grant_scopes.iter().find(|s| grants_it(s))?;
        let challenge = self.insufficient_scope(scope);
        let text = format!("This tool needs the scope `{scope}`.\n");
        Some(with_challenge(StatusCode::FORBIDDEN, &challenge, text))
    }

    /// Adds the challenge to a 401 from the credential check at `/mcp`,
    /// so an MCP client finds the metadata.
    /// `given`: the request carried an `Authorization` header.
    pub fn on_unauthorized(&self, mut response: Response, given: bool) -> Response {
        if response.status() != StatusCode::UNAUTHORIZED {
            return response;
        }
        let error = given.then_some("invalid_token");
        if let Ok(v) = HeaderValue::from_str(&self.challenge(error)) {
            response.headers_mut().append(header::WWW_AUTHENTICATE, v);
        }
        response
    }
}

/// The principal allowed at `/mcp`, or the answer: the credential
/// check's refusal with the OAuth challenge added, or the audience and
/// scope refusals of a JWT.
#[allow(clippy::result_large_err)]
pub fn gate(
    oauth: Option<&OAuthResource>,
    caller: Result<super::auth::Caller, Response>,
    headers: &axum::http::HeaderMap,
) -> Result<Principal, Response> {
    let Some(oauth) = oauth else {
        return caller.map(|c| c.principal);
    };
    let given = headers.contains_key(header::AUTHORIZATION);
    let principal = caller
        .map_err(|r| oauth.on_unauthorized(r, given))?
        .principal;
    oauth
        .admit(&principal)
        .map_err(|refusal| oauth.refuse(&refusal))?;
    Ok(principal)
}

fn with_challenge(status: StatusCode, challenge: &str, text: String) -> Response {
    let mut response = (status, text).into_response();
    if let Ok(v) = HeaderValue::from_str(challenge) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    response
}

/// The path-inserted metadata URL of `resource` (RFC 9728 §3.1): the
/// well-known path between the origin and the resource's path.
pub fn metadata_url(resource: &str) -> String {
    let after_scheme = resource.find("://").map_or(0, |i| i + 3);
    let (origin, path) = match resource[after_scheme..].find('/') {
        Some(i) => resource.split_at(after_scheme + i),
        None => (resource, ""),
    };
    format!("{origin}{METADATA_PATH}{}", path.trim_end_matches('/'))
}

/// `GET` of either metadata path. Public and the same for everyone, so
/// cacheable and readable by a browser's MCP client on any origin.
pub async fn metadata(Extension(oauth): Extension<Arc<OAuthResource>>) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        ],
        oauth.metadata().to_string(),
    )
        .into_response()
}

#[cfg(test)]
#[path = "oauth_tests.rs"]
mod tests;
