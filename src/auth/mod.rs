//! Who a client is (authentication) and what it may do with which Thing
//! (authorization), the same rules for WebSocket, HTTP and MQTT clients.
//!
//! Three kinds of access, each granted per Thing pattern:
//! - `host`: act as the Thing's agent;
//! - `consume`: subscribe, observe, read;
//! - `operate`: write, invoke, query, cancel.

mod cache;
pub mod credentials;
mod jwt;
pub mod mqtt;
mod pool;
mod scratch;
mod throttle;
pub mod verifier;

use std::net::IpAddr;
use std::sync::Arc;

use crate::config::{AuthConfig, Grants, PrincipalConfig};
use crate::lmos::MessageType;
use crate::telemetry::metrics::Metrics;
use credentials::{Secret, SecretError};
pub use jwt::{JwtError, JwtSetupError};
pub use verifier::{Credentials, Refused};
use verifier::{Plan, Verifier};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    Host,
    Consume,
    Operate,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Host => "host",
            Access::Consume => "consume",
            Access::Operate => "operate",
        }
    }

    /// What sending a message of this type takes. Messages a Thing sends
    /// (events, readings, statuses, errors) are its agent's to send.
    pub fn to_send(message_type: MessageType) -> Access {
        use MessageType as T;
        match message_type {
            T::ReadProperty
            | T::ObserveProperty
            | T::UnobserveProperty
            | T::SubscribeEvent
            | T::UnsubscribeEvent
            | T::SubscribeAllEvents
            | T::UnsubscribeAllEvents => Access::Consume,
            T::WriteProperty
            | T::WriteMultipleProperties
            | T::InvokeAction
            | T::QueryAction
            | T::CancelAction
            | T::ActionInput => Access::Operate,
            T::PropertyReading | T::PropertyReadings | T::ActionStatus | T::Event | T::Error => {
                Access::Host
            }
        }
    }
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Thing patterns: exact, `*`, or a prefix followed by `*`.
#[derive(Debug, Clone, Default)]
struct Patterns(Vec<String>);

impl Patterns {
    fn matches(&self, thing: &str) -> bool {
        self.0.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => thing.starts_with(prefix),
            None => p == thing,
        })
    }

    fn everything(&self) -> bool {
        self.0.iter().any(|p| p == "*")
    }
}

#[derive(Debug, Default)]
struct Rules {
    host: Patterns,
    consume: Patterns,
    operate: Patterns,
}

impl Rules {
    fn new(host: &[String], consume: &[String], operate: &[String]) -> Rules {
        Rules {
            host: Patterns(host.to_vec()),
            consume: Patterns(consume.to_vec()),
            operate: Patterns(operate.to_vec()),
        }
    }

    fn of(&self, access: Access) -> &Patterns {
        match access {
            Access::Host => &self.host,
            Access::Consume => &self.consume,
            Access::Operate => &self.operate,
        }
    }
}

/// An authenticated client (or the anonymous one). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Principal {
    name: Arc<str>,
    rules: Arc<Rules>,
    /// What its JWT said, when it came with one (`[auth.jwt]`).
    token: Option<Arc<TokenClaims>>,
}

/// The claims of the JWT a principal authenticated with, as far as the
/// faces need them after verification: `/mcp` checks the audience and
/// scopes (RFC 8707, step-up), long-lived connections end at `exp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenClaims {
    pub issuer: String,
    /// `aud`, one or many.
    pub audiences: Vec<String>,
    /// The values of `auth.jwt.grants_claim` (scopes or roles).
    pub scopes: Vec<String>,
    /// `exp`, when the token has one.
    pub expires_at: Option<std::time::SystemTime>,
}

pub const ANONYMOUS: &str = "anonymous";

impl Principal {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The JWT's claims, when the principal came with one.
    pub fn token(&self) -> Option<&TokenClaims> {
        self.token.as_deref()
    }

    /// Time left until its JWT's `exp` (zero when past): a long-lived
    /// connection ends then. `None`: no token, no end.
    pub fn expires_in(&self) -> Option<std::time::Duration> {
        let exp = self.token()?.expires_at?;
        let left = exp.duration_since(std::time::SystemTime::now());
        Some(left.unwrap_or_default())
    }

    /// Waits until [`Principal::expires_in`] has passed; forever without one.
    pub async fn expired(&self) {
        match self.expires_in() {
            Some(left) => tokio::time::sleep(left).await,
            None => std::future::pending().await,
        }
    }

    pub fn may(&self, access: Access, thing: &str) -> bool {
        self.rules.of(access).matches(thing)
    }

    /// May do this with every Thing, as a wildcard subscription needs.
    pub fn may_all(&self, access: Access) -> bool {
        self.rules.of(access).everything()
    }

    /// The agent of `thing` and nothing else: an imported upstream's own
    /// principal (`crate::imports`).
    pub fn hosting(name: &str, thing: &str) -> Principal {
        let thing = [thing.to_owned()];
        Principal {
            name: name.into(),
            rules: Arc::new(Rules::new(&thing, &[], &[])),
            token: None,
        }
    }

    /// Everything allowed, for tests and tools.
    pub fn unrestricted(name: &str) -> Principal {
        let g = Grants::everything();
        Principal {
            name: name.into(),
            rules: Arc::new(Rules::new(&g.host, &g.consume, &g.operate)),
            token: None,
        }
    }
}

struct Known {
    principal: Principal,
    passwords: Vec<Secret>,
    tokens: Vec<Secret>,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("`auth.principals`: an entry has no `name`")]
    NoName,
    #[error("`auth.principals`: the name `{0}` appears twice")]
    Duplicate(String),
    #[error("`auth.principals` `{name}`: `{key}` {error}")]
    Secret {
        name: String,
        key: &'static str,
        error: SecretError,
    },
    #[error("`auth.principals` `{name}`: cannot read `{key}` {path}: {error}")]
    File {
        name: String,
        key: &'static str,
        path: String,
        error: std::io::Error,
    },
    #[error("`auth.principals` `{name}`: `{key}` names the variable {var}, which is not set")]
    Env {
        name: String,
        key: &'static str,
        var: String,
    },
    #[error(
        "`auth.principals` `{name}`: `{key}` has a pattern `{pattern}`; `*` may only end a pattern"
    )]
    Pattern {
        name: String,
        key: &'static str,
        pattern: String,
    },
    #[error(
        "`{0}` is on but `auth.principals` is empty and `auth.jwt` off, so no one could connect"
    )]
    NoOne(&'static str),
    #[error(transparent)]
    Jwt(#[from] JwtSetupError),
}

/// The principals of the configuration, their secrets loaded once at
/// start-up, and the checks of credentials against them (with their cache,
/// which a new configuration therefore starts without). Cheap to clone.
#[derive(Clone)]
pub struct Authority(Arc<Inner>);

struct Inner {
    known: Vec<Known>,
    anonymous: Principal,
    verifier: Verifier,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("principals", &self.0.known.len())
            .finish()
    }
}

impl Default for Authority {
    /// No principals; anonymous clients may do everything.
    fn default() -> Self {
        Authority::from_config(&AuthConfig::default()).expect("the defaults are valid")
    }
}

impl Authority {
    /// With metrics of its own (tests and tools).
    pub fn from_config(config: &AuthConfig) -> Result<Authority, AuthError> {
        Authority::with_metrics(config, Metrics::default())
    }

    /// Counting cache hits, verifications and refusals in `metrics`; JWTs
    /// (`auth.jwt`) must then name one of `auth.jwt.audience`.
    pub fn with_metrics(config: &AuthConfig, metrics: Metrics) -> Result<Authority, AuthError> {
        Authority::new(config, metrics, None)
    }

    /// As [`Authority::with_metrics`], JWTs issued for the sidecar's MCP
    /// endpoint (`mcp_resource`, its canonical URL) accepted too.
    pub fn with_mcp_resource(
        config: &AuthConfig,
        metrics: Metrics,
        mcp_resource: &str,
    ) -> Result<Authority, AuthError> {
        Authority::new(config, metrics, Some(mcp_resource))
    }

    fn new(
        config: &AuthConfig,
        metrics: Metrics,
        mcp_resource: Option<&str>,
    ) -> Result<Authority, AuthError> {
        let mut known: Vec<Known> = Vec::new();
        for entry in &config.principals {
            if entry.name.is_empty() {
                return Err(AuthError::NoName);
            }
            if entry.name == ANONYMOUS || known.iter().any(|k| *k.principal.name == *entry.name) {
                return Err(AuthError::Duplicate(entry.name.clone()));
            }
            for (key, patterns) in [
                ("host", &entry.host),
                ("consume", &entry.consume),
                ("operate", &entry.operate),
            ] {
                check_patterns(&entry.name, key, patterns)?;
            }
            known.push(Known {
                principal: Principal {
                    name: entry.name.as_str().into(),
                    rules: Arc::new(Rules::new(&entry.host, &entry.consume, &entry.operate)),
                    token: None,
                },
                passwords: secrets(entry, Kind::Password)?,
                tokens: secrets(entry, Kind::Token)?,
            });
        }
        let a = &config.anonymous;
        check_patterns(ANONYMOUS, "host", &a.host)?;
        check_patterns(ANONYMOUS, "consume", &a.consume)?;
        check_patterns(ANONYMOUS, "operate", &a.operate)?;
        let argon2_like = known
            .iter()
            .flat_map(|k| &k.passwords)
            .find(|s| s.is_argon2());
        let names = known.iter().map(|k| k.principal.name.to_string());
        let jwt = jwt::Jwt::new(&config.jwt, mcp_resource, names, &metrics)?;
        let verifier = Verifier::new(config, argon2_like, metrics, jwt);
        Ok(Authority(Arc::new(Inner {
            verifier,
            known,
            anonymous: Principal {
                name: ANONYMOUS.into(),
                rules: Arc::new(Rules::new(&a.host, &a.consume, &a.operate)),
                token: None,
            },
        })))
    }

    /// No principal configured and no JWT accepted: no one can log in.
    pub fn is_empty(&self) -> bool {
        self.0.known.is_empty() && self.0.verifier.jwt().is_none()
    }

    /// The client of a listener without authentication.
    pub fn anonymous(&self) -> Principal {
        self.0.anonymous.clone()
    }

    /// Checks credentials from `addr` (the client's address; `None` when
    /// unknown, then all such clients count as one). See [`verifier`].
    pub async fn verify(
        &self,
        addr: Option<IpAddr>,
        credentials: Credentials<'_>,
    ) -> Result<Principal, Refused> {
        let inner = &self.0;
        inner
            .verifier
            .verify(addr, credentials, || self.plan(credentials))
            .await
    }

    /// The principal a verified client certificate names (its SPIFFE ID or
    /// CN, [`crate::tls::identity`]): the `[[auth.principals]]` entry of
    /// exactly that name, secrets or not. The TLS handshake did the
    /// checking; `None`: no entry has the name (nor can `anonymous`, or a
    /// JWT's principal, be named so).
    pub fn certificate(&self, identity: &str) -> Option<Principal> {
        self.0
            .known
            .iter()
            .find(|k| *k.principal.name == *identity)
            .map(|k| k.principal.clone())
    }

    /// Argon2 verifications run so far (stand-ins included).
    pub fn argon2_runs(&self) -> u64 {
        self.0.verifier.argon2_runs()
    }

    /// The cheap checks (tokens, secrets from files), then the one Argon2
    /// verification left: the principal's hash, or a stand-in for a name
    /// that is no principal's or has no Argon2 password, so that refusing
    /// any name takes alike.
    fn plan(&self, credentials: Credentials<'_>) -> Plan {
        let (name, secret, tokens_too) = match credentials {
            Credentials::Token(token) => {
                return match self.token(token) {
                    Some(principal) => Plan::Accept(principal),
                    None if self.is_jwt(token) => Plan::Jwt(token.to_vec()),
                    None => Plan::Refuse,
                };
            }
            Credentials::Password { name, password } => (name, password, false),
            Credentials::NameAndSecret { name, secret } => (name, secret, true),
        };
        let known = self.0.known.iter().find(|k| *k.principal.name == *name);
        if let Some(k) = known {
            let tokens = k.tokens.iter().filter(|_| tokens_too);
            let mut cheap = k.passwords.iter().filter(|s| !s.is_argon2()).chain(tokens);
            if cheap.any(|s| s.verify(secret)) {
                return Plan::Accept(k.principal.clone());
            }
        }
        // MQTT's password field is the only place for a token there; the
        // user name is then free (the token names the principal).
        if tokens_too && self.is_jwt(secret) {
            return Plan::Jwt(secret.to_vec());
        }
        let real = known.and_then(|k| Some((k.passwords.iter().find(|s| s.is_argon2())?, k)));
        let Some(hash) = real.map(|(s, _)| s).or(self.0.verifier.stand_in()) else {
            return Plan::Refuse;
        };
        Plan::Argon2 {
            hash: hash.clone(),
            principal: real.map(|(_, k)| k.principal.clone()),
            password: secret.to_vec(),
        }
    }

    /// Whether an MQTT password is a JWT to check (`auth.jwt` on).
    pub fn takes_jwt(&self, secret: &[u8]) -> bool {
        self.is_jwt(secret)
    }

    /// Whether `token` goes to the JWT check (`auth.jwt` on, JWT-shaped).
    fn is_jwt(&self, token: &[u8]) -> bool {
        self.0.verifier.jwt().is_some_and(|j| j.looks_like(token))
    }

    /// A bearer token: whoever it belongs to.
    fn token(&self, token: &[u8]) -> Option<Principal> {
        self.0
            .known
            .iter()
            .find(|k| k.tokens.iter().any(|s| s.verify(token)))
            .map(|k| k.principal.clone())
    }
}

fn check_patterns(name: &str, key: &'static str, patterns: &[String]) -> Result<(), AuthError> {
    for p in patterns {
        if p.is_empty() || p.trim_end_matches('*').contains('*') || p.ends_with("**") {
            return Err(AuthError::Pattern {
                name: name.to_owned(),
                key,
                pattern: p.clone(),
            });
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Kind {
    Password,
    Token,
}

fn secrets(entry: &PrincipalConfig, kind: Kind) -> Result<Vec<Secret>, AuthError> {
    let (hashed_key, hashed, file_key, file, env_key, env) = match kind {
        Kind::Password => (
            "password_hash",
            &entry.password_hash,
            "password_file",
            &entry.password_file,
            "password_env",
            &entry.password_env,
        ),
        Kind::Token => (
            "token_sha256",
            &entry.token_sha256,
            "token_file",
            &entry.token_file,
            "token_env",
            &entry.token_env,
        ),
    };
    let name = || entry.name.clone();
    let secret_error = |key| {
        move |error| AuthError::Secret {
            name: entry.name.clone(),
            key,
            error,
        }
    };
    let mut out = Vec::new();
    if !hashed.is_empty() {
        let secret = match kind {
            Kind::Password => Secret::argon2(hashed),
            Kind::Token => Secret::sha256_hex(hashed),
        };
        out.push(secret.map_err(secret_error(hashed_key))?);
    }
    if !file.is_empty() {
        let text = std::fs::read_to_string(file).map_err(|error| AuthError::File {
            name: name(),
            key: file_key,
            path: file.clone(),
            error,
        })?;
        out.push(Secret::clear(&text).map_err(secret_error(file_key))?);
    }
    if !env.is_empty() {
        let value = std::env::var(env).map_err(|_| AuthError::Env {
            name: name(),
            key: env_key,
            var: env.clone(),
        })?;
        out.push(Secret::clear(&value).map_err(secret_error(env_key))?);
    }
    Ok(out)
}

/// For tests: the anonymous principal of an authority that grants it these
/// Things to host, consume and operate.
#[cfg(test)]
pub(crate) fn granted(host: &[&str], consume: &[&str], operate: &[&str]) -> Principal {
    use crate::config::{AuthConfig, Grants};
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
    let config = AuthConfig {
        anonymous: Grants {
            host: v(host),
            consume: v(consume),
            operate: v(operate),
        },
        ..AuthConfig::default()
    };
    Authority::from_config(&config).unwrap().anonymous()
}

#[cfg(test)]
mod tests;
