//! Byte budgets: what clients can make the gateway hold (messages queued
//! for slow consumers, messages half received, the resume history), each
//! counted in bytes against a configured total. The count lives in the
//! budget's Prometheus gauge, so `/metrics` reads it as it is.
//!
//! Reaching a budget is counted and logged (the first time, then at most
//! once a minute with how many since) and remembered for `/readyz`, which
//! names the budgets reached in the last [`RECENT`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

// tokio's clock: the real one, except in tests that pause time (the stall
// timer's).
use tokio::time::Instant;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tracing::warn;

use crate::config::{GatewayConfig, HistoryConfig};
use crate::telemetry::metrics::Metrics;

/// How long a budget reached counts as "full" for `/readyz`.
pub const RECENT: Duration = Duration::from_secs(10);
/// How often a budget reached again is logged, at most.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// One global byte budget.
#[derive(Debug)]
pub struct Budget {
    /// The metrics label: `outbound`, `inbound`, `history`.
    name: &'static str,
    /// The configuration key that sets it, for logs and `/readyz`.
    key: &'static str,
    /// What reaching it does, for logs and `/readyz`.
    effect: &'static str,
    limit: usize,
    used: Gauge,
    hits: Counter,
    epoch: Instant,
    /// When it was last reached, in ms since `epoch` plus one (0: never).
    last_hit: AtomicU64,
    /// When it was last logged, likewise, and the hits counted then.
    last_log: AtomicU64,
    hits_logged: AtomicU64,
}

impl Budget {
    pub fn new(
        metrics: &Metrics,
        name: &'static str,
        key: &'static str,
        effect: &'static str,
        limit: usize,
    ) -> Budget {
        let (used, hits) = metrics.budget(name, limit);
        used.set(0);
        Budget {
            name,
            key,
            effect,
            limit,
            used,
            hits,
            epoch: Instant::now(),
            last_hit: AtomicU64::new(0),
            last_log: AtomicU64::new(0),
            hits_logged: AtomicU64::new(0),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn used(&self) -> usize {
        usize::try_from(self.used.get()).unwrap_or(0)
    }

    /// Counts `n` more bytes in use; the total after.
    pub fn add(&self, n: usize) -> usize {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        usize::try_from(self.used.inc_by(n).saturating_add(n)).unwrap_or(0)
    }

    pub fn sub(&self, n: usize) {
        self.used.dec_by(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Sets the bytes in use (a budget whose owner keeps the count).
    pub fn set(&self, n: usize) {
        self.used.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Whether `n` more bytes would go past the limit.
    pub fn would_exceed(&self, n: usize) -> bool {
        self.used().saturating_add(n) > self.limit
    }

    /// The budget was reached: counted, remembered, logged now and then.
    pub fn hit(&self) {
        self.hits.inc();
        let now = self.now_ms();
        self.last_hit.store(now, Ordering::Relaxed);
        let last = self.last_log.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= LOG_EVERY.as_millis() as u64;
        if !due
            || self
                .last_log
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let total = self.hits.get();
        let since = total - self.hits_logged.swap(total, Ordering::Relaxed);
        warn!(
            budget = self.name,
            key = self.key,
            limit = self.limit,
            used = self.used(),
            times = since,
            "Memory budget full: {}; further hits are logged at most once a minute (lmos_sidecar_memory_budget_hits_total).",
            self.effect
        );
    }

    /// Whether it was reached within the last [`RECENT`].
    pub fn recently_full(&self) -> bool {
        let last = self.last_hit.load(Ordering::Relaxed);
        last != 0 && self.now_ms().saturating_sub(last) < RECENT.as_millis() as u64
    }

    /// A line for `/readyz` when it was recently reached.
    pub fn status(&self) -> Option<String> {
        self.recently_full().then(|| {
            format!(
                "{} budget full ({} = {} bytes): {}",
                self.name, self.key, self.limit, self.effect
            )
        })
    }

    /// Milliseconds on the budget's own clock (never 0).
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }
}

/// The gateway's global budgets.
#[derive(Debug, Clone)]
pub struct Budgets {
    pub outbound: Arc<Budget>,
    pub inbound: Arc<Budget>,
    pub history: Arc<Budget>,
}

impl Budgets {
    pub fn new(metrics: &Metrics, gateway: &GatewayConfig, history: &HistoryConfig) -> Budgets {
        Budgets {
            outbound: Arc::new(Budget::new(
                metrics,
                "outbound",
                "gateway.max_outbound_bytes",
                "the WebSocket connection with the most bytes queued is closed (1013)",
                gateway.max_outbound_bytes,
            )),
            inbound: Arc::new(Budget::new(
                metrics,
                "inbound",
                "gateway.max_inbound_bytes",
                "the WebSocket connection holding the most bytes of messages being received is closed (1013)",
                gateway.max_inbound_bytes,
            )),
            history: Arc::new(Budget::new(
                metrics,
                "history",
                "history.max_bytes",
                "the oldest events of the resume history are evicted",
                history.max_bytes,
            )),
        }
    }

    /// One line per budget reached in the last [`RECENT`].
    pub fn report(&self) -> Vec<String> {
        [&self.outbound, &self.inbound, &self.history]
            .into_iter()
            .filter_map(|b| b.status())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_in_its_gauge_and_says_when_it_was_reached() {
        let metrics = Metrics::new();
        let b = Budget::new(&metrics, "outbound", "k", "effect", 100);
        assert_eq!(b.add(60), 60);
        assert!(b.would_exceed(41) && !b.would_exceed(40));
        b.sub(10);
        assert_eq!(b.used(), 50);
        assert!(b.status().is_none());
        b.hit();
        b.hit();
        assert!(b.status().unwrap().contains("outbound budget full"));
        let text = metrics.render();
        assert!(
            text.contains(r#"lmos_sidecar_memory_budget_bytes{budget="outbound",of="used"} 50"#)
        );
        assert!(
            text.contains(r#"lmos_sidecar_memory_budget_bytes{budget="outbound",of="limit"} 100"#)
        );
        assert!(text.contains(r#"lmos_sidecar_memory_budget_hits_total{budget="outbound"} 2"#));
    }
}
