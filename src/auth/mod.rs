//! Who a client is (authentication) and what it may do with which Thing
//! (authorization), the same rules for WebSocket, HTTP and MQTT clients.
//!
//! Three kinds of access, each granted per Thing pattern:
//! - `host`: act as the Thing's agent;
//! - `consume`: subscribe, observe, read;
//! - `operate`: write, invoke, query, cancel.

pub mod credentials;
pub mod mqtt;

use std::sync::Arc;

use crate::config::{AuthConfig, Grants, PrincipalConfig};
use crate::lmos::MessageType;
use credentials::{Secret, SecretError};

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
}

pub const ANONYMOUS: &str = "anonymous";

impl Principal {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn may(&self, access: Access, thing: &str) -> bool {
        self.rules.of(access).matches(thing)
    }

    /// May do this with every Thing, as a wildcard subscription needs.
    pub fn may_all(&self, access: Access) -> bool {
        self.rules.of(access).everything()
    }

    /// Everything allowed, for tests and tools.
    pub fn unrestricted(name: &str) -> Principal {
        let g = Grants::everything();
        Principal {
            name: name.into(),
            rules: Arc::new(Rules::new(&g.host, &g.consume, &g.operate)),
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
    #[error("`{0}` is on but `auth.principals` is empty, so no one could connect")]
    NoOne(&'static str),
}

/// The principals of the configuration, their secrets loaded once at
/// start-up. Cheap to clone.
#[derive(Clone)]
pub struct Authority(Arc<Inner>);

struct Inner {
    known: Vec<Known>,
    anonymous: Principal,
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
    pub fn from_config(config: &AuthConfig) -> Result<Authority, AuthError> {
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
                },
                passwords: secrets(entry, Kind::Password)?,
                tokens: secrets(entry, Kind::Token)?,
            });
        }
        let a = &config.anonymous;
        check_patterns(ANONYMOUS, "host", &a.host)?;
        check_patterns(ANONYMOUS, "consume", &a.consume)?;
        check_patterns(ANONYMOUS, "operate", &a.operate)?;
        Ok(Authority(Arc::new(Inner {
            known,
            anonymous: Principal {
                name: ANONYMOUS.into(),
                rules: Arc::new(Rules::new(&a.host, &a.consume, &a.operate)),
            },
        })))
    }

    pub fn is_empty(&self) -> bool {
        self.0.known.is_empty()
    }

    /// The client of a listener without authentication.
    pub fn anonymous(&self) -> Principal {
        self.0.anonymous.clone()
    }

    /// A name and password (HTTP Basic). Slow on purpose (Argon2): call it
    /// off the async threads.
    pub fn password(&self, name: &str, password: &[u8]) -> Option<Principal> {
        let known = self.0.known.iter().find(|k| *k.principal.name == *name)?;
        known
            .passwords
            .iter()
            .any(|s| s.verify(password))
            .then(|| known.principal.clone())
    }

    /// A bearer token: whoever it belongs to.
    pub fn token(&self, token: &[u8]) -> Option<Principal> {
        self.0
            .known
            .iter()
            .find(|k| k.tokens.iter().any(|s| s.verify(token)))
            .map(|k| k.principal.clone())
    }

    /// MQTT's username and password: the password may also be one of the
    /// principal's tokens, since MQTT has no other field for one.
    pub fn username_password(&self, name: &str, secret: &[u8]) -> Option<Principal> {
        let known = self.0.known.iter().find(|k| *k.principal.name == *name)?;
        let token = known.tokens.iter().any(|s| s.verify(secret));
        (token || known.passwords.iter().any(|s| s.verify(secret))).then(|| known.principal.clone())
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
        principals: Vec::new(),
    };
    Authority::from_config(&config).unwrap().anonymous()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authority() -> Authority {
        let config = AuthConfig {
            anonymous: Grants {
                consume: vec!["urn:public:*".into()],
                ..Grants::default()
            },
            principals: vec![PrincipalConfig {
                name: "agent".into(),
                password_hash: credentials::hash_password("pw"),
                token_sha256: credentials::sha256_hex(b"tok"),
                host: vec!["urn:weather".into()],
                consume: vec!["*".into()],
                ..PrincipalConfig::default()
            }],
        };
        Authority::from_config(&config).unwrap()
    }

    #[test]
    fn credentials_identify_their_principal() {
        let a = authority();
        assert_eq!(a.password("agent", b"pw").unwrap().name(), "agent");
        assert!(a.password("agent", b"tok").is_none());
        assert!(a.password("nobody", b"pw").is_none());
        assert_eq!(a.token(b"tok").unwrap().name(), "agent");
        assert!(a.token(b"pw").is_none());
        assert!(a.username_password("agent", b"tok").is_some());
        assert!(a.username_password("agent", b"pw").is_some());
        assert!(a.username_password("agent", b"x").is_none());
    }

    #[test]
    fn grants_apply_per_thing_and_access() {
        let a = authority();
        let agent = a.password("agent", b"pw").unwrap();
        assert!(agent.may(Access::Host, "urn:weather"));
        assert!(!agent.may(Access::Host, "urn:weather2"));
        assert!(agent.may(Access::Consume, "urn:anything"));
        assert!(agent.may_all(Access::Consume));
        assert!(!agent.may(Access::Operate, "urn:weather"));
        let anonymous = a.anonymous();
        assert!(anonymous.may(Access::Consume, "urn:public:x"));
        assert!(!anonymous.may(Access::Consume, "urn:private"));
        assert!(!anonymous.may_all(Access::Consume));
    }

    #[test]
    fn configuration_mistakes_are_named() {
        let bad = |p: PrincipalConfig| {
            Authority::from_config(&AuthConfig {
                principals: vec![p],
                ..AuthConfig::default()
            })
            .unwrap_err()
            .to_string()
        };
        let e = bad(PrincipalConfig {
            name: "a".into(),
            password_hash: "hunter2".into(),
            ..Default::default()
        });
        assert!(e.contains("`password_hash` is not an Argon2 hash"), "{e}");
        let e = bad(PrincipalConfig {
            name: "a".into(),
            token_env: "LMOS_TEST_SURELY_UNSET".into(),
            ..Default::default()
        });
        assert!(
            e.contains("LMOS_TEST_SURELY_UNSET, which is not set"),
            "{e}"
        );
        let e = bad(PrincipalConfig {
            name: "a".into(),
            host: vec!["urn:*:x".into()],
            ..Default::default()
        });
        assert!(e.contains("`*` may only end a pattern"), "{e}");
    }
}
