//! Per-principal quotas: what one principal may hold of what the sidecar
//! holds for everyone (running invocations, requests waiting for an agent,
//! subscriptions, registered Thing Descriptions and their bytes), below the
//! global caps, so one principal filling its share leaves the others theirs.
//!
//! No I/O, no counting here: whoever keeps the state counts (the request
//! router, the subscription table, the directory, each with a [`Tally`]) and
//! asks [`Quotas::check`] before it takes more. With no `[[auth.principals]]`
//! everyone is `anonymous`, one bucket for all: a quota would only be a
//! second, lower global cap, so `anonymous` is then exempt unless
//! `[quotas.principals.anonymous]` says otherwise.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use tracing::warn;

use crate::auth::ANONYMOUS;
use crate::config::{QuotaOverrides, QuotasConfig};

/// What a quota counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quota {
    RunningInvocations,
    PendingRequests,
    Subscriptions,
    Things,
    TdBytes,
    Retained,
    RetainedBytes,
    WillBytes,
    QueuedBytes,
    FinishedInvocations,
}

impl Quota {
    pub const ALL: [Quota; 10] = [
        Quota::RunningInvocations,
        Quota::PendingRequests,
        Quota::Subscriptions,
        Quota::Things,
        Quota::TdBytes,
        Quota::Retained,
        Quota::RetainedBytes,
        Quota::WillBytes,
        Quota::QueuedBytes,
        Quota::FinishedInvocations,
    ];

    /// The key in `[quotas]` (and in `[quotas.principals.<name>]`).
    pub fn key(self) -> &'static str {
        match self {
            Quota::RunningInvocations => "running_invocations",
            Quota::PendingRequests => "pending_requests",
            Quota::Subscriptions => "subscriptions",
            Quota::Things => "things",
            Quota::TdBytes => "td_bytes",
            Quota::Retained => "retained",
            Quota::RetainedBytes => "retained_bytes",
            Quota::WillBytes => "will_bytes",
            Quota::QueuedBytes => "queued_bytes",
            Quota::FinishedInvocations => "finished_invocations",
        }
    }

    /// The `limit` label of `lmos_sidecar_limit_hits_total`.
    pub fn label(self) -> &'static str {
        match self {
            Quota::RunningInvocations => "quotas.running_invocations",
            Quota::PendingRequests => "quotas.pending_requests",
            Quota::Subscriptions => "quotas.subscriptions",
            Quota::Things => "quotas.things",
            Quota::TdBytes => "quotas.td_bytes",
            Quota::Retained => "quotas.retained",
            Quota::RetainedBytes => "quotas.retained_bytes",
            Quota::WillBytes => "quotas.will_bytes",
            Quota::QueuedBytes => "quotas.queued_bytes",
            Quota::FinishedInvocations => "quotas.finished_invocations",
        }
    }

    fn of(self, limits: &QuotaOverrides) -> Option<u64> {
        match self {
            Quota::RunningInvocations => limits.running_invocations,
            Quota::PendingRequests => limits.pending_requests,
            Quota::Subscriptions => limits.subscriptions,
            Quota::Things => limits.things,
            Quota::TdBytes => limits.td_bytes,
            Quota::Retained => limits.retained,
            Quota::RetainedBytes => limits.retained_bytes,
            Quota::WillBytes => limits.will_bytes,
            Quota::QueuedBytes => limits.queued_bytes,
            Quota::FinishedInvocations => limits.finished_invocations,
        }
    }

    fn default_of(self, config: &QuotasConfig) -> u64 {
        match self {
            Quota::RunningInvocations => config.running_invocations,
            Quota::PendingRequests => config.pending_requests,
            Quota::Subscriptions => config.subscriptions,
            Quota::Things => config.things,
            Quota::TdBytes => config.td_bytes,
            Quota::Retained => config.retained,
            Quota::RetainedBytes => config.retained_bytes,
            Quota::WillBytes => config.will_bytes,
            Quota::QueuedBytes => config.queued_bytes,
            Quota::FinishedInvocations => config.finished_invocations,
        }
    }
}

/// A principal's quota is full: the refusal's detail names whose and which
/// key (e.g. "`bob` has 1000 invocations running
/// (quotas.running_invocations) ...").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeded {
    pub principal: String,
    pub quota: Quota,
    pub limit: u64,
    /// Set in `[quotas.principals.<name>]` rather than the default.
    pub own: bool,
}

impl Exceeded {
    /// The configuration key that sets this principal's limit.
    pub fn key(&self) -> String {
        match self.own {
            true => format!("quotas.principals.{}.{}", self.principal, self.quota.key()),
            false => self.quota.label().to_owned(),
        }
    }
}

impl std::fmt::Display for Exceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (who, n, key) = (&self.principal, self.limit, self.key());
        match self.quota {
            Quota::RunningInvocations => write!(f, "`{who}` has {n} invocations running ({key}), as many as one principal may; invoke again when some have ended."),
            Quota::PendingRequests => write!(f, "`{who}` has {n} property requests waiting for an agent ({key}), as many as one principal may; send more when some are answered."),
            Quota::Subscriptions => write!(f, "`{who}` holds {n} subscriptions over all its connections ({key}), as many as one principal may; unsubscribe from some first."),
            Quota::Things => write!(f, "`{who}` has {n} Thing Descriptions registered ({key}), as many as one principal may; delete some first."),
            Quota::TdBytes => write!(f, "`{who}`'s Thing Descriptions would take more than {n} bytes as served ({key}), as much as one principal may; delete or shrink some first."),
            Quota::Retained => write!(f, "`{who}` has {n} retained messages kept ({key}), as many as one principal may; delete some first (an empty retained payload)."),
            Quota::RetainedBytes => write!(f, "`{who}`'s retained messages would take more than {n} bytes ({key}), as much as one principal may; delete or shrink some first."),
            Quota::WillBytes => write!(f, "`{who}`'s last wills would take more than {n} bytes over its connections ({key}), as much as one principal may; connect with a smaller will or none."),
            Quota::QueuedBytes => write!(f, "`{who}`'s kept MQTT sessions hold {n} bytes of queued publications on disk ({key}), as much as one principal may; their newest publications are not kept."),
            Quota::FinishedInvocations => write!(f, "`{who}` has {n} finished invocations remembered ({key}), as many as one principal may; its oldest is forgotten."),
        }
    }
}

impl std::error::Error for Exceeded {}

/// The quotas of every principal.
#[derive(Debug, Default)]
pub struct Quotas {
    /// `None`: no quotas at all (tests, tools).
    config: Option<QuotasConfig>,
    /// With no principals configured, `anonymous` is everyone.
    anonymous_exempt: bool,
    /// When each (principal, quota) was last logged as full: once a minute
    /// at most, not once per refusal of a flood.
    logged: Mutex<HashMap<(String, Quota), Instant>>,
}

const LOG_EVERY: Duration = Duration::from_secs(60);

impl Quotas {
    /// No per-principal limits.
    pub fn none() -> Arc<Quotas> {
        Arc::new(Quotas::default())
    }

    /// `principals`: whether `[[auth.principals]]` names anyone.
    pub fn new(config: &QuotasConfig, principals: bool) -> Arc<Quotas> {
        let anonymous_exempt = !principals && !config.principals.contains_key(ANONYMOUS);
        Arc::new(Quotas {
            config: Some(config.clone()),
            anonymous_exempt,
            logged: Mutex::default(),
        })
    }

    /// The principal's limit, and whether it is its own; `None`: unlimited.
    pub fn limit(&self, principal: &str, quota: Quota) -> Option<(u64, bool)> {
        let config = self.config.as_ref()?;
        let own = config.principals.get(principal).and_then(|o| quota.of(o));
        if own.is_none() && principal == ANONYMOUS && self.anonymous_exempt {
            return None;
        }
        let (limit, own) = match own {
            Some(l) => (l, true),
            None => (quota.default_of(config), false),
        };
        (limit > 0).then_some((limit, own))
    }

    /// Whether `principal`, holding `usage`, may take `adding` more.
    pub fn check(
        &self,
        principal: &str,
        quota: Quota,
        usage: u64,
        adding: u64,
    ) -> Result<(), Exceeded> {
        let Some((limit, own)) = self.limit(principal, quota) else {
            return Ok(());
        };
        if usage.saturating_add(adding) <= limit {
            return Ok(());
        }
        let exceeded = Exceeded {
            principal: principal.to_owned(),
            quota,
            limit,
            own,
        };
        self.log(&exceeded);
        Err(exceeded)
    }

    fn log(&self, e: &Exceeded) {
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let at = logged.entry((e.principal.clone(), e.quota)).or_insert(now);
        if *at == now || now.duration_since(*at) >= LOG_EVERY {
            *at = now;
            warn!(principal = %e.principal.escape_debug(), quota = %e.key(), limit = e.limit, "A principal's quota is full; further refusals are counted in lmos_sidecar_limit_hits_total, logged at most once a minute.");
        }
    }
}

/// Usage per principal, and the largest, for the
/// `lmos_sidecar_quota_largest_usage` gauge (kept up to date as usage
/// changes: a scan of the principals only when the largest one shrinks).
#[derive(Debug, Default)]
pub struct Tally {
    by: HashMap<Arc<str>, u64>,
    largest: u64,
    gauge: Gauge,
}

impl Tally {
    pub fn new(gauge: Gauge) -> Tally {
        Tally {
            gauge,
            ..Tally::default()
        }
    }

    pub fn get(&self, principal: &str) -> u64 {
        self.by.get(principal).copied().unwrap_or(0)
    }

    pub fn add(&mut self, principal: &Arc<str>, n: u64) {
        let usage = self.by.entry(principal.clone()).or_insert(0);
        *usage += n;
        if *usage > self.largest {
            self.largest = *usage;
            self.gauge
                .set(i64::try_from(self.largest).unwrap_or(i64::MAX));
        }
    }

    pub fn sub(&mut self, principal: &str, n: u64) {
        let Some(usage) = self.by.get_mut(principal) else {
            return;
        };
        let was_largest = *usage == self.largest;
        *usage = usage.saturating_sub(n);
        if *usage == 0 {
            self.by.remove(principal);
        }
        if was_largest && n > 0 {
            self.largest = self.by.values().copied().max().unwrap_or(0);
            self.gauge
                .set(i64::try_from(self.largest).unwrap_or(i64::MAX));
        }
    }

    /// The largest usage of any principal.
    pub fn largest(&self) -> u64 {
        self.largest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> QuotasConfig {
        let mut c = QuotasConfig {
            running_invocations: 2,
            ..QuotasConfig::default()
        };
        c.principals.insert(
            "alice".into(),
            QuotaOverrides {
                running_invocations: Some(5),
                things: Some(0),
                ..QuotaOverrides::default()
            },
        );
        c
    }

    #[test]
    fn a_full_quota_names_whose_and_which_key() {
        let q = Quotas::new(&config(), true);
        assert!(q.check("bob", Quota::RunningInvocations, 1, 1).is_ok());
        let e = q.check("bob", Quota::RunningInvocations, 2, 1).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("`bob` has 2 invocations running (quotas.running_invocations)"),
            "{e}"
        );
        let e = q
            .check("alice", Quota::RunningInvocations, 5, 1)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("(quotas.principals.alice.running_invocations)"),
            "{e}"
        );
    }

    #[test]
    fn zero_is_no_limit_and_overrides_win() {
        let q = Quotas::new(&config(), true);
        assert_eq!(q.limit("alice", Quota::Things), None);
        assert_eq!(q.limit("bob", Quota::Things), Some((1_000, false)));
        assert_eq!(q.limit("alice", Quota::RunningInvocations), Some((5, true)));
        assert!(Quotas::none()
            .check("bob", Quota::TdBytes, u64::MAX, 1)
            .is_ok());
    }

    #[test]
    fn anonymous_is_exempt_only_when_it_is_everyone() {
        let alone = Quotas::new(&config(), false);
        assert_eq!(alone.limit(ANONYMOUS, Quota::RunningInvocations), None);
        let among = Quotas::new(&config(), true);
        assert_eq!(
            among.limit(ANONYMOUS, Quota::RunningInvocations),
            Some((2, false))
        );
        let mut c = config();
        c.principals.insert(
            ANONYMOUS.into(),
            QuotaOverrides {
                subscriptions: Some(3),
                ..QuotaOverrides::default()
            },
        );
        let chosen = Quotas::new(&c, false);
        assert_eq!(
            chosen.limit(ANONYMOUS, Quota::Subscriptions),
            Some((3, true))
        );
        assert!(chosen.limit(ANONYMOUS, Quota::Things).is_some());
    }

    #[test]
    fn a_tally_keeps_the_largest_usage() {
        let gauge = Gauge::default();
        let mut t = Tally::new(gauge.clone());
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        t.add(&a, 3);
        t.add(&b, 2);
        assert_eq!((t.largest(), gauge.get()), (3, 3));
        t.sub("a", 2);
        assert_eq!((t.get("a"), t.largest(), gauge.get()), (1, 2, 2));
        t.sub("b", 2);
        t.sub("a", 1);
        t.sub("nobody", 1);
        assert_eq!((t.largest(), gauge.get()), (0, 0));
        assert!(t.by.is_empty(), "no principal is kept at zero");
    }
}
