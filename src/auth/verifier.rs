//! One way through for every credential, HTTP's and MQTT's alike:
//!
//! 1. an address and name with `auth.lockout_failures` failures behind
//!    them and a refusal period running are refused outright;
//! 2. credentials that passed within `auth.cache_ttl_ms` pass again, for
//!    the price of a keyed hash;
//! 3. an address and name with `auth.max_failures` failures behind them
//!    are refused without a check while their period runs;
//! 4. the rest is checked: bearer tokens and secrets from files at once
//!    (SHA-256), Argon2 hashes on the verifier threads ([`super::pool`]),
//!    or refused at once when those and their queue are taken. A name that
//!    is no principal's costs one Argon2 verification too (against a
//!    stand-in hash), so the time to refuse tells nothing.
//!
//! Every refusal counts as a failure of its address and name, refusals
//! without a check included: a refusal that comes at once still tells a
//! guesser the credentials are not cached, so it must cost him too.

use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::cache::{Cache, Keyed};
use super::credentials::{Argon2Hash, Secret};
use super::jwt::{Jwt, JwtError};
use super::pool::Pool;
use super::scratch::Scratch;
use super::throttle::{Gate, Rules, Source, Throttle};
use super::Principal;
use crate::config::AuthConfig;
use crate::telemetry::metrics::Metrics;

/// What a client presents.
#[derive(Clone, Copy)]
pub enum Credentials<'a> {
    /// HTTP Basic: a principal's name and password.
    Password { name: &'a str, password: &'a [u8] },
    /// HTTP Bearer: one of any principal's tokens.
    Token(&'a [u8]),
    /// MQTT CONNECT: a principal's name, and its password or one of its
    /// tokens (MQTT has no other field for one).
    NameAndSecret { name: &'a str, secret: &'a [u8] },
}

/// Names, never secrets.
impl std::fmt::Debug for Credentials<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Password { name, .. } => write!(f, "Password({name:?}, ..)"),
            Credentials::Token(_) => f.write_str("Token(..)"),
            Credentials::NameAndSecret { name, .. } => write!(f, "NameAndSecret({name:?}, ..)"),
        }
    }
}

impl Credentials<'_> {
    fn cache_key(&self, keyed: &Keyed) -> [u8; 32] {
        match *self {
            Credentials::Password { name, password } => {
                keyed.digest(&[b"basic", name.as_bytes(), password])
            }
            Credentials::Token(token) => keyed.digest(&[b"bearer", token]),
            Credentials::NameAndSecret { name, secret } => {
                keyed.digest(&[b"mqtt", name.as_bytes(), secret])
            }
        }
    }

    /// Whose failures these are counted as: the name's (whichever the
    /// transport), or a token's (all tokens together).
    fn source(&self, keyed: &Keyed, addr: Option<IpAddr>) -> Source {
        let name = match *self {
            Credentials::Password { name, .. } | Credentials::NameAndSecret { name, .. } => {
                keyed.digest(&[b"name", name.as_bytes()])
            }
            Credentials::Token(_) => keyed.digest(&[b"token"]),
        };
        Source::new(addr, &name)
    }
}

/// Why credentials were not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Checked, and wrong (or no principal's).
    Invalid,
    /// A JWT, valid but for its `exp` (past, beyond `auth.jwt.leeway_ms`).
    Expired,
    /// Every verifier thread busy and the queue full: not checked.
    Busy,
    /// Too many failures from this address for this name: not checked;
    /// try again after this long.
    Throttled(Duration),
}

impl Refused {
    /// The `reason` of `lmos_sidecar_auth_failures_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::Invalid => "invalid",
            Refused::Expired => "expired",
            Refused::Busy => "busy",
            Refused::Throttled(_) => "throttled",
        }
    }

    /// When trying again may help (`Retry-After`).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Refused::Invalid | Refused::Expired => None,
            Refused::Busy => Some(Duration::from_secs(1)),
            Refused::Throttled(wait) => Some(*wait),
        }
    }
}

/// What checking the credentials takes, once the cheap checks are done.
pub(crate) enum Plan {
    Accept(Principal),
    Refuse,
    /// One Argon2 verification; it passes for `principal` only (a
    /// stand-in hash has none).
    Argon2 {
        hash: Secret,
        principal: Option<Principal>,
        password: Vec<u8>,
    },
    /// A JWT (`auth.jwt`): its signature and claims; may wait for the
    /// provider's keys.
    Jwt(Vec<u8>),
}

pub(crate) struct Verifier {
    keyed: Keyed,
    cache: Cache<Principal>,
    throttle: Throttle,
    /// With the stand-in hash, when any principal has an Argon2 password.
    argon2: Option<(Pool, Secret)>,
    metrics: Metrics,
    floods: Floods,
    jwt: Option<Jwt>,
}

/// `auth.max_concurrent_verifications = 0`: a thread per CPU, at most 4
/// (76 MiB of Argon2 memory with the default parameters).
fn threads(configured: usize) -> usize {
    match configured {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
        n => n,
    }
}

impl Verifier {
    /// `argon2_like`: a principal's Argon2 hash, whose parameters the
    /// stand-in takes; `None` when no principal has one (then nothing is
    /// ever verified by Argon2 and no thread is started).
    pub(crate) fn new(
        config: &AuthConfig,
        argon2_like: Option<&Secret>,
        metrics: Metrics,
        jwt: Option<Jwt>,
    ) -> Self {
        let argon2 = argon2_like.map(|like| {
            let pool = Pool::new(
                threads(config.max_concurrent_verifications),
                config.verification_queue,
            );
            (pool, super::credentials::stand_in(Some(like)))
        });
        Verifier {
            keyed: Keyed::random(),
            cache: Cache::new(
                Duration::from_millis(config.cache_ttl_ms),
                config.cache_entries,
            ),
            throttle: Throttle::new(Rules {
                max_failures: config.max_failures,
                backoff: Duration::from_millis(config.failure_backoff_ms),
                max_backoff: Duration::from_millis(config.max_failure_backoff_ms),
                lockout: config.lockout_failures,
            }),
            argon2,
            metrics,
            floods: Floods::default(),
            jwt,
        }
    }

    pub(crate) fn jwt(&self) -> Option<&Jwt> {
        self.jwt.as_ref()
    }

    /// The hash a name that is no principal's (or a principal without an
    /// Argon2 password) is checked against.
    pub(crate) fn stand_in(&self) -> Option<&Secret> {
        self.argon2.as_ref().map(|(_, s)| s)
    }

    /// Argon2 verifications run so far.
    pub(crate) fn argon2_runs(&self) -> u64 {
        self.argon2.as_ref().map_or(0, |(pool, _)| pool.runs())
    }

    pub(crate) async fn verify(
        &self,
        addr: Option<IpAddr>,
        credentials: Credentials<'_>,
        plan: impl FnOnce() -> Plan,
    ) -> Result<Principal, Refused> {
        let now = Instant::now();
        let source = credentials.source(&self.keyed, addr);
        let gate = self.throttle.gate(source, now);
        if let Gate::Locked(wait) = gate {
            return Err(self.refused(source, addr, Refused::Throttled(wait), now));
        }
        let key = credentials.cache_key(&self.keyed);
        if let Some(principal) = self.cache.get(&key, now) {
            self.metrics.auth_cache("hit");
            return Ok(principal);
        }
        self.metrics.auth_cache("miss");
        if let Gate::Blocked(wait) = gate {
            return Err(self.refused(source, addr, Refused::Throttled(wait), now));
        }
        let checked = match plan() {
            Plan::Accept(principal) => Ok(principal),
            Plan::Refuse => Err(Refused::Invalid),
            Plan::Argon2 {
                hash,
                principal,
                password,
            } => self.argon2(hash, principal, password).await,
            Plan::Jwt(token) => self.check_jwt(&token).await,
        };
        match checked {
            Ok(principal) => {
                self.throttle.succeeded(source);
                // Never past the token's `exp`.
                let until = principal.token().and_then(|t| t.expires_at);
                self.cache
                    .put_until(key, principal.clone(), Instant::now(), until);
                Ok(principal)
            }
            Err(refused) => Err(self.refused(source, addr, refused, Instant::now())),
        }
    }

    async fn check_jwt(&self, token: &[u8]) -> Result<Principal, Refused> {
        let Some(jwt) = &self.jwt else {
            return Err(Refused::Invalid);
        };
        match jwt.verify(token).await {
            Ok(principal) => Ok(principal),
            Err(JwtError::Expired) => Err(Refused::Expired),
            Err(error) => {
                debug!(%error, "Refused a JWT.");
                Err(Refused::Invalid)
            }
        }
    }

    async fn argon2(
        &self,
        hash: Secret,
        principal: Option<Principal>,
        password: Vec<u8>,
    ) -> Result<Principal, Refused> {
        let Some((pool, _)) = &self.argon2 else {
            return Err(Refused::Invalid);
        };
        let answer = pool
            .submit(move |scratch| verify_argon2(&hash, &password, scratch))
            .map_err(|_| Refused::Busy)?;
        self.metrics.auth_verification("queued");
        // No answer (the pool is gone): the check did not pass.
        let passed = answer.await.unwrap_or(false);
        principal.filter(|_| passed).ok_or(Refused::Invalid)
    }

    /// Counts the failure, and says so in the log once per flood.
    fn refused(&self, source: Source, addr: Option<IpAddr>, why: Refused, now: Instant) -> Refused {
        let blocked = self.throttle.failed(source, now);
        let addr = Shown(addr);
        match why {
            Refused::Invalid | Refused::Expired => {
                if let Some(more) = self.floods.invalid.due(now) {
                    info!(source = %addr, more, "Refused invalid credentials; more within a minute are counted, not logged (lmos_sidecar_auth_failures_total).");
                }
            }
            Refused::Busy => {
                self.metrics.auth_verification("busy");
                if let Some(more) = self.floods.busy.due(now) {
                    warn!(source = %addr, more, "Refused credentials unchecked: every password check is taken (auth.max_concurrent_verifications, auth.verification_queue).");
                }
            }
            Refused::Throttled(_) => self.metrics.auth_verification("throttled"),
        }
        // A refused attempt prolongs the period: say how long it is now.
        let why = match (why, blocked) {
            (Refused::Throttled(_), Some(period)) => Refused::Throttled(period),
            _ => why,
        };
        if let Some(period) = blocked {
            if let Some(more) = self.floods.throttled.due(now) {
                warn!(source = %addr, period_ms = period.as_millis() as u64, more, "Refusing credentials unchecked from an address after repeated failures for one name (auth.max_failures).");
            }
        }
        why
    }
}

/// An address in a log line, without a string made per refusal.
struct Shown(Option<IpAddr>);

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(addr) => addr.fmt(f),
            None => f.write_str("unknown"),
        }
    }
}

/// On a verifier thread, in its working memory.
fn verify_argon2(hash: &Secret, password: &[u8], scratch: &mut Scratch) -> bool {
    let Secret::Argon2(phc) = hash else {
        return hash.verify(password);
    };
    let Some(parsed) = Argon2Hash::parse(phc) else {
        return false;
    };
    match scratch.blocks(parsed.block_count()) {
        Some(blocks) => parsed.verify(password, blocks),
        // No memory to map: the allocator's, as a last resort.
        None => hash.verify(password),
    }
}

/// One log line per kind of refusal a minute, with how many others it
/// stands for.
#[derive(Default)]
struct Floods {
    invalid: Quiet,
    busy: Quiet,
    throttled: Quiet,
}

const QUIET: Duration = Duration::from_secs(60);

/// A log line at most once a minute.
#[derive(Default)]
pub(crate) struct Quiet(std::sync::Mutex<(Option<Instant>, u64)>);

impl Quiet {
    /// `Some(others since the last line)` when a line is due.
    pub(crate) fn due(&self, now: Instant) -> Option<u64> {
        let mut state = super::cache::lock(&self.0);
        let (last, others) = &mut *state;
        match last {
            Some(t) if now < *t + QUIET => {
                *others += 1;
                None
            }
            _ => {
                *last = Some(now);
                Some(std::mem::take(others))
            }
        }
    }
}

#[cfg(test)]
#[path = "verifier_tests.rs"]
mod tests;
