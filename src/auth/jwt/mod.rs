//! JWT bearer tokens (`[auth.jwt]`): an OpenID provider's access tokens
//! taken as credentials on every transport. Signatures are checked with
//! ring (the crypto the sidecar's TLS already uses) against the provider's
//! JWK Set; the claims against the configuration. The principal is named
//! by `principal_claim`, its rules are those `[auth.jwt.grants]` gives the
//! values of `grants_claim`.

mod grants;
mod http;
mod jwks;
mod keys;
mod token;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

use super::{Principal, TokenClaims, ANONYMOUS};
use crate::config::JwtConfig;
use crate::telemetry::metrics::Metrics;
use grants::GrantMap;
use jwks::Jwks;
use keys::Alg;
pub(crate) use keys::KeySet;
#[cfg(test)]
use keys::KeysError;

/// Why a token was refused; never shown to the client beyond "invalid" or
/// "expired", and never logged with the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("over auth.jwt.max_token_bytes")]
    TooLarge,
    #[error("not a well-formed JWS")]
    Malformed,
    #[error("an algorithm not accepted, or not the key's")]
    Algorithm,
    #[error("a kid no key has")]
    UnknownKey,
    #[error("a bad signature")]
    Signature,
    #[error("another issuer")]
    Issuer,
    #[error("no accepted audience")]
    Audience,
    #[error("expired")]
    Expired,
    #[error("not valid yet")]
    NotYetValid,
    #[error("no usable principal name")]
    Principal,
}

/// A configuration `[auth.jwt]` cannot start with.
#[derive(Debug, thiserror::Error)]
pub enum JwtSetupError {
    #[error("`auth.jwt`: one of `jwks_url` and `jwks_file` is required (and only one)")]
    KeySource,
    #[error("`auth.jwt.jwks_url` `{0}` {1}")]
    Url(String, String),
    #[error("`auth.jwt.jwks_ca_file` {0}: {1}")]
    CaFile(String, String),
    #[error("`auth.jwt.jwks_file` {0}: {1}")]
    File(String, String),
    #[error("`auth.jwt.algorithms`: `{0}` is not accepted (RS256, ES256, EdDSA)")]
    Algorithm(String),
    #[error("`auth.jwt.audience` is empty and there is no MCP resource to accept instead")]
    NoAudience,
    #[error("`auth.jwt.{0}` is empty")]
    EmptyClaim(&'static str),
    #[error(
        "`auth.jwt.grants.{value}`: `{key}` has a pattern `{pattern}`; `*` may only end a pattern"
    )]
    Pattern {
        value: String,
        key: &'static str,
        pattern: String,
    },
}

/// The JWT check of one [`super::Authority`].
pub(crate) struct Jwt {
    issuer: String,
    audiences: Vec<String>,
    algorithms: Vec<Alg>,
    principal_claim: String,
    grants_claim: String,
    grants: GrantMap,
    leeway: Duration,
    max_bytes: usize,
    /// Static principals' names and `anonymous`: no token may claim them.
    reserved: HashSet<String>,
    keys: Keys,
}

enum Keys {
    File(Arc<KeySet>),
    Url(Arc<Jwks>),
}

impl Jwt {
    /// `None` while `auth.jwt.issuer` is empty. `mcp_resource`: the
    /// canonical MCP URL, accepted as an audience besides the configured.
    pub(crate) fn new(
        config: &JwtConfig,
        mcp_resource: Option<&str>,
        reserved: impl Iterator<Item = String>,
        metrics: &Metrics,
    ) -> Result<Option<Jwt>, JwtSetupError> {
        if !config.enabled() {
            return Ok(None);
        }
        let keys = keys(config, metrics)?;
        Jwt::with_keys(config, mcp_resource, reserved, keys).map(Some)
    }

    fn with_keys(
        config: &JwtConfig,
        mcp_resource: Option<&str>,
        reserved: impl Iterator<Item = String>,
        keys: Keys,
    ) -> Result<Jwt, JwtSetupError> {
        let mut audiences = config.audience.clone();
        audiences.extend(mcp_resource.map(str::to_owned));
        if audiences.is_empty() {
            return Err(JwtSetupError::NoAudience);
        }
        let algorithms = config
            .algorithms
            .iter()
            .map(|a| Alg::from_name(a).ok_or_else(|| JwtSetupError::Algorithm(a.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        for (key, claim) in [
            ("principal_claim", &config.principal_claim),
            ("grants_claim", &config.grants_claim),
        ] {
            if claim.is_empty() {
                return Err(JwtSetupError::EmptyClaim(key));
            }
        }
        Ok(Jwt {
            issuer: config.issuer.clone(),
            audiences,
            algorithms,
            principal_claim: config.principal_claim.clone(),
            grants_claim: config.grants_claim.clone(),
            grants: GrantMap::new(&config.grants)?,
            leeway: Duration::from_millis(config.leeway_ms),
            max_bytes: config.max_token_bytes,
            reserved: reserved.chain([ANONYMOUS.to_owned()]).collect(),
            keys,
        })
    }

    /// Whether a bearer token or MQTT password is to be checked as a JWT.
    pub(crate) fn looks_like(&self, token: &[u8]) -> bool {
        token::looks_like_jwt(token, self.max_bytes)
    }

    /// The token's principal, or why not. May wait for a fetch of the keys
    /// (a `kid` not among them).
    pub(crate) async fn verify(&self, token: &[u8]) -> Result<Principal, JwtError> {
        if token.len() > self.max_bytes {
            return Err(JwtError::TooLarge);
        }
        let parsed = token::parse(token, &self.algorithms)?;
        let claims = match &self.keys {
            Keys::File(keys) => parsed.verify(keys)?,
            Keys::Url(jwks) => {
                let seen = jwks.current();
                match parsed.verify(&seen.keys) {
                    Err(JwtError::UnknownKey) => {
                        // A token that would be refused anyway asks for no
                        // fetch: made-up kids cost the provider nothing.
                        self.claims(&parsed.unverified_claims()?)?;
                        let newer = jwks.newer_than(&seen).await;
                        parsed.verify(&*newer.ok_or(JwtError::UnknownKey)?)?
                    }
                    other => other?,
                }
            }
        };
        self.principal(&claims)
    }

    fn expect(&self) -> token::Expect<'_> {
        token::Expect {
            issuer: &self.issuer,
            audiences: &self.audiences,
            leeway: self.leeway,
            now: SystemTime::now(),
        }
    }

    fn claims(&self, claims: &Map<String, Value>) -> Result<(Vec<String>, SystemTime), JwtError> {
        token::check_claims(claims, &self.expect())
    }

    fn principal(&self, claims: &Map<String, Value>) -> Result<Principal, JwtError> {
        let (audiences, exp) = self.claims(claims)?;
        let name = token::claim(claims, &self.principal_claim)
            .and_then(Value::as_str)
            .filter(|n| usable_name(n) && !self.reserved.contains(*n))
            .ok_or(JwtError::Principal)?;
        let scopes = grants::values(token::claim(claims, &self.grants_claim));
        Ok(Principal {
            name: name.into(),
            rules: Arc::new(self.grants.rules(&scopes, name)),
            token: Some(Arc::new(TokenClaims {
                issuer: self.issuer.clone(),
                audiences,
                scopes,
                expires_at: Some(exp),
            })),
        })
    }
}

/// Non-empty, and no `*`: a name is put into grant patterns
/// (`{principal}`), where a `*` would widen them; no control characters
/// (names go into logs and topics).
fn usable_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('*') && !name.chars().any(char::is_control)
}

fn keys(config: &JwtConfig, metrics: &Metrics) -> Result<Keys, JwtSetupError> {
    match (config.jwks_url.is_empty(), config.jwks_file.is_empty()) {
        (false, true) => {
            let timeout = Duration::from_millis(config.jwks_timeout_ms);
            let fetch = http::fetcher(&config.jwks_url, &config.jwks_ca_file, timeout)?;
            let periods = (
                Duration::from_millis(config.jwks_ttl_ms),
                Duration::from_millis(config.jwks_min_refresh_ms),
            );
            let jwks = Jwks::new(fetch, &config.jwks_url, periods, metrics.clone());
            jwks.start();
            Ok(Keys::Url(jwks))
        }
        (true, false) => {
            let file = &config.jwks_file;
            let bad = |e: String| JwtSetupError::File(file.clone(), e);
            let text = std::fs::read(file).map_err(|e| bad(e.to_string()))?;
            let keys = KeySet::parse(&text).map_err(|e| bad(e.to_string()))?;
            metrics.set_jwks_keys(keys.len());
            Ok(Keys::File(Arc::new(keys)))
        }
        _ => Err(JwtSetupError::KeySource),
    }
}

#[cfg(test)]
mod authority_tests;
#[cfg(test)]
pub(crate) mod signer;
#[cfg(test)]
mod tests;
