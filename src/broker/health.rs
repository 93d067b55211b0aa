//! Whether the embedded broker still serves, and what happens when not.
//!
//! rumqttd runs its listeners and router on threads of its own and catches
//! nothing: a panic in a connection task kills that task only, and may
//! leave a lock poisoned so that every later CONNECT of the listener is
//! dropped while the process looks alive. The guard keeps every known
//! cause away from it; should another appear, the sidecar must not stay
//! half alive. So:
//!
//! - a panic hook notes every panic raised in rumqttd's code;
//! - a watchdog connects to the broker every [`PROBE_EVERY`], the way the
//!   guard's clients do, and expects a CONNACK (which the router sends), publishing nothing
//!   that a subscriber of `#` would see;
//!
//! and either marks the broker failed: `/healthz` and `/readyz` answer 503
//! with the reason, the log says why, and the sidecar stops with an error
//! so that its supervisor restarts it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::error;

use super::engine::Engine;
use super::probe::alive;

/// How often the watchdog checks.
pub const PROBE_EVERY: Duration = Duration::from_secs(2);
/// How long one probe may take before it counts as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Failed probes in a row that mean the broker is gone (one may fail on a
/// machine too busy to answer in time).
const FAILED_PROBES: u32 = 3;
/// How long `/healthz` and `/readyz` say why before the sidecar stops, so
/// that a supervisor's probes (and a person with curl) see the reason.
pub const LINGER: Duration = Duration::from_secs(2);

static BROKER_PANICS: AtomicU64 = AtomicU64::new(0);
static LAST_PANIC: Mutex<String> = Mutex::new(String::new());
static HOOK: Once = Once::new();

/// Installs, once per process, a panic hook that counts panics raised in
/// rumqttd's code (and then runs the hook that was there before).
pub fn watch_broker_panics() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info
                .location()
                .is_some_and(|l| l.file().contains("rumqttd"))
            {
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let location = info.location().map(|l| l.to_string()).unwrap_or_default();
                if let Ok(mut last) = LAST_PANIC.lock() {
                    *last = format!("{message} at {location}");
                }
                BROKER_PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
}

/// The broker's state, shared by the watchdog and the HTTP port.
#[derive(Debug, Clone, Default)]
pub struct Health {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    failure: OnceLock<String>,
    failed: CancellationToken,
}

impl Health {
    /// Why the broker failed, once it has.
    pub fn failure(&self) -> Option<&str> {
        self.inner.failure.get().map(String::as_str)
    }

    /// Resolves when the broker fails.
    pub async fn failed(&self) {
        self.inner.failed.cancelled().await
    }

    fn fail(&self, why: String) {
        if self.inner.failure.set(why.clone()).is_ok() {
            error!(reason = %why, "The embedded MQTT broker failed; the sidecar stops so that it can be restarted.");
            self.inner.failed.cancel();
        }
    }

    /// Watches the broker until it fails or `stop` fires.
    pub(super) async fn watch(self, engine: Engine, stop: CancellationToken) {
        let client_id = format!("lmos-sidecar-watchdog-{}", uuid::Uuid::new_v4().simple());
        let panics_before = BROKER_PANICS.load(Ordering::SeqCst);
        let mut failed_probes = 0;
        let mut every = tokio::time::interval(PROBE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = every.tick() => {}
            }
            if BROKER_PANICS.load(Ordering::SeqCst) != panics_before {
                let last = LAST_PANIC.lock().map(|l| l.clone()).unwrap_or_default();
                return self.fail(format!("a broker thread panicked: {last}"));
            }
            let answered = tokio::select! {
                _ = stop.cancelled() => return,
                ok = tokio::time::timeout(PROBE_TIMEOUT, alive(&engine, &client_id)) => {
                    matches!(ok, Ok(Ok(true)))
                }
            };
            failed_probes = if answered { 0 } else { failed_probes + 1 };
            if failed_probes >= FAILED_PROBES {
                return self.fail(format!(
                    "it did not accept a connection {FAILED_PROBES} times in a row"
                ));
            }
        }
    }
}
