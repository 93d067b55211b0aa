//! Shutdown: one signal, fanned out to every part that serves, then the
//! parts drained one stage after the other, each under a grace timeout so
//! that a stuck part cannot hold the process (see `docs/architecture.md`,
//! "Start and stop").

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::warn;

/// How long WebSocket connections wait for the dispatcher to tell their
/// consumers what becomes of their requests before they close anyway.
pub const FAREWELL_GRACE: Duration = Duration::from_secs(1);
/// How long the cluster link has to carry what the connections published
/// while draining, and to flush it.
pub const CLUSTER_GRACE: Duration = Duration::from_secs(2);
/// How long imported upstreams have to be let go (sessions closed,
/// `command` children stopped).
pub const IMPORTS_GRACE: Duration = Duration::from_secs(2);

/// The shutdown signal and the stages that follow it.
#[derive(Debug, Default)]
pub struct Drain {
    signal: CancellationToken,
}

impl Drain {
    pub fn new() -> Drain {
        Drain::default()
    }

    /// Fires with the signal: for every part that stops taking new work
    /// then (the HTTP server, the dispatcher, background samplers).
    pub fn token(&self) -> CancellationToken {
        self.signal.clone()
    }

    /// Gives the signal (once; again is harmless).
    pub fn signal(&self) {
        self.signal.cancel();
    }

    /// Waits for the signal.
    pub async fn signalled(&self) {
        self.signal.cancelled().await
    }

    /// Waits for one stage, `work`, to finish within `grace`; past it,
    /// says so once and goes on. Whether the stage finished.
    pub async fn stage(&self, what: &'static str, grace: Duration, work: impl Future) -> bool {
        if tokio::time::timeout(grace, work).await.is_ok() {
            return true;
        }
        warn!(
            stage = what,
            grace_ms = grace.as_millis() as u64,
            "Still running after the grace period; stopping without it."
        );
        false
    }
}

#[cfg(test)]
mod tests {
    use super::Drain;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_stage_past_its_grace_is_left_behind() {
        let drain = Drain::new();
        let token = drain.token();
        assert!(!token.is_cancelled());
        drain.signal();
        assert!(token.is_cancelled(), "every part sees the one signal");
        let grace = Duration::from_secs(1);
        assert!(drain.stage("quick", grace, async {}).await);
        let stuck = std::future::pending::<()>();
        assert!(!drain.stage("stuck", grace, stuck).await);
    }
}
