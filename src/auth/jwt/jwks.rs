//! The provider's signing keys from `auth.jwt.jwks_url`: fetched at start,
//! again once `jwks_ttl_ms` has passed (in the background, the old keys
//! serving meanwhile), and when a token names a `kid` the keys lack (key
//! rotation). Fetches are single-flight (every verifier that needs one
//! waits on the one under way) and at most one per `jwks_min_refresh_ms`
//! starts, so a flood of tokens with made-up `kid`s costs the provider
//! one request per period. A failed fetch keeps the last good keys.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use tokio::time::Instant;
use tracing::{info, warn};

use super::keys::KeySet;
use crate::telemetry::metrics::Metrics;

/// One fetch of the JWK Set document; the error says why, for the log.
pub(crate) type Fetch = Box<dyn Fn() -> BoxFuture<'static, Result<Bytes, String>> + Send + Sync>;

pub(crate) struct Jwks {
    fetch: Fetch,
    /// Where from, for the log.
    url: String,
    ttl: Duration,
    min_refresh: Duration,
    state: Mutex<State>,
    /// Held while a fetch is under way.
    single: tokio::sync::Mutex<()>,
    metrics: Metrics,
}

struct State {
    keys: Arc<KeySet>,
    /// Counts fetches ended, so that a verifier knows whether the keys it
    /// checked are still the newest.
    generation: u64,
    /// Whether the last fetch brought keys.
    good: bool,
    fetched: Option<Instant>,
    attempted: Option<Instant>,
}

/// The keys as a verifier saw them.
#[derive(Clone)]
pub(crate) struct Seen {
    pub(crate) keys: Arc<KeySet>,
    generation: u64,
}

impl Jwks {
    pub(crate) fn new(
        fetch: Fetch,
        url: &str,
        (ttl, min_refresh): (Duration, Duration),
        metrics: Metrics,
    ) -> Arc<Jwks> {
        Arc::new(Jwks {
            fetch,
            url: url.to_owned(),
            ttl,
            min_refresh,
            state: Mutex::new(State {
                keys: Arc::default(),
                generation: 0,
                good: false,
                fetched: None,
                attempted: None,
            }),
            single: tokio::sync::Mutex::new(()),
            metrics,
        })
    }

    /// The first fetch, in the background when there is a runtime to run
    /// it (else the first token asks for it). A provider that is not up
    /// yet is no reason to stop: tokens are refused until it is.
    pub(crate) fn start(self: &Arc<Self>) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let this = Arc::clone(self);
            // Generation 0: unless a token asked for keys first.
            runtime.spawn(async move { this.refresh(0).await });
        }
    }

    /// The keys now; past `jwks_ttl_ms`, a fetch starts in the background.
    pub(crate) fn current(self: &Arc<Self>) -> Seen {
        let now = Instant::now();
        let s = super::super::cache::lock(&self.state);
        let stale = s.fetched.is_none_or(|t| now >= t + self.ttl);
        if stale && self.may_fetch(&s, now) && self.single.try_lock().is_ok() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let (this, generation) = (Arc::clone(self), s.generation);
                runtime.spawn(async move { this.refresh(generation).await });
            }
        }
        Seen {
            keys: Arc::clone(&s.keys),
            generation: s.generation,
        }
    }

    fn may_fetch(&self, s: &State, now: Instant) -> bool {
        s.attempted.is_none_or(|t| now >= t + self.min_refresh)
    }

    /// Newer keys than `seen` (a token's `kid` was not among them): those
    /// another fetch brought meanwhile, else a fetch of its own unless one
    /// started within `jwks_min_refresh_ms`. `None`: no newer keys.
    pub(crate) async fn newer_than(&self, seen: &Seen) -> Option<Arc<KeySet>> {
        self.refresh(seen.generation).await
    }

    /// `after`: the generation of the keys the caller saw; newer ones are
    /// taken as they are, without a fetch.
    async fn refresh(&self, after: u64) -> Option<Arc<KeySet>> {
        let _one = self.single.lock().await;
        let now = Instant::now();
        {
            let s = super::super::cache::lock(&self.state);
            if after != s.generation {
                return s.good.then(|| Arc::clone(&s.keys));
            }
            if !self.may_fetch(&s, now) {
                return None;
            }
        }
        let fetched = (self.fetch)()
            .await
            .and_then(|b| KeySet::parse(&b).map_err(|e| format!("the answer {e}")));
        let mut s = super::super::cache::lock(&self.state);
        s.generation += 1;
        s.attempted = Some(now);
        match fetched {
            Ok(keys) => {
                self.metrics.jwks_fetch("ok");
                self.metrics.set_jwks_keys(keys.len());
                if !s.good {
                    info!(url = %self.url, keys = keys.len(), "Fetched the JWT signing keys (auth.jwt.jwks_url).");
                }
                s.keys = Arc::new(keys);
                s.good = true;
                s.fetched = Some(now);
                Some(Arc::clone(&s.keys))
            }
            Err(error) => {
                self.metrics.jwks_fetch("failed");
                s.good = false;
                warn!(url = %self.url, %error, kept = s.keys.len(), "Could not fetch the JWT signing keys (auth.jwt.jwks_url); the last good ones are kept.");
                None
            }
        }
    }
}

#[cfg(test)]
#[path = "jwks_tests.rs"]
mod tests;
