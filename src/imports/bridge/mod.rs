//! One imported upstream served to the gateway as its Thing's agent.
//!
//! The bridge holds the Thing's [`AgentLink`] for as long as the sidecar
//! runs, whether the upstream answers or not: while it is down the bridge
//! answers requests itself (503 naming the upstream and its last error)
//! and the Thing's retained `agent/status` says `offline`. Its state
//! changes by one method per event: a request from the router, a call's
//! answer, a connection attempt's result, a probe's, the upstream's news.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::OptionFuture;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

mod requests;

use super::calls::{Calls, Outgoing};
use super::replies::{Answering, Speaker};
use super::td;
use super::upstream::{Change, Offer, Upstream, UpstreamError};
use crate::config::ThingType;
use crate::directory::validate::TdValidator;
use crate::gateway::agent_link::{AgentLink, Presence};

/// Answers of running calls waiting for the link.
const OUTGOING: usize = 1024;

type Attempt = Pin<Box<dyn Future<Output = Result<Offer, UpstreamError>> + Send>>;
type Probe = Pin<Box<dyn Future<Output = Result<(), UpstreamError>> + Send>>;

/// How the bridge paces its retries and probes (from the import's
/// configuration).
#[derive(Debug, Clone)]
pub struct Pacing {
    pub probe_interval: Duration,
    pub retry_min: Duration,
    pub retry_max: Duration,
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    /// Not connected yet, or connecting again: the last error, if any.
    Down(String),
    Up,
}

/// A call under way.
struct Running {
    action: String,
    cancel: CancellationToken,
    task: tokio::task::AbortHandle,
    answering: Answering,
}

pub struct Bridge<U: Upstream> {
    upstream: Arc<U>,
    link: AgentLink,
    calls: Arc<Calls>,
    kind: ThingType,
    pacing: Pacing,
    validator: TdValidator,
    state: State,
    offer: Option<Offer>,
    running: HashMap<String, Running>,
    outgoing: mpsc::Receiver<Outgoing>,
    retry_delay: Duration,
    next_retry: Instant,
    next_probe: Instant,
}

impl<U: Upstream> Bridge<U> {
    pub fn new(
        upstream: Arc<U>,
        link: AgentLink,
        parts: (
            Speaker,
            crate::telemetry::MessageTracer,
            crate::telemetry::metrics::Metrics,
        ),
        kind: ThingType,
        pacing: Pacing,
    ) -> Bridge<U> {
        let (speaker, tracer, metrics) = parts;
        let (out, outgoing) = mpsc::channel(OUTGOING);
        let calls = Arc::new(Calls {
            speaker,
            tracer,
            metrics,
            out,
        });
        let now = Instant::now();
        Bridge {
            upstream,
            link,
            calls,
            kind,
            retry_delay: pacing.retry_min,
            pacing,
            validator: TdValidator::new(),
            state: State::Down("not connected yet".into()),
            offer: None,
            running: HashMap::new(),
            outgoing,
            next_retry: now,
            next_probe: now,
        }
    }

    fn speaker(&self) -> &Speaker {
        &self.calls.speaker
    }

    /// Serves until `shutdown` fires, then lets go of the upstream and the
    /// Thing.
    pub async fn run(mut self, shutdown: CancellationToken) {
        // The Thing exists from the start, with what it offers once known;
        // a description kept from before a restart stays until the upstream
        // says what it offers now, so its invocation records stay queryable.
        if !self.link.described() {
            self.publish_td().await;
        }
        let mut attempt: Option<Attempt> = Some(self.connect());
        let mut probe: Option<Probe> = None;
        loop {
            let up = self.state == State::Up;
            let idle = attempt.is_none() && probe.is_none();
            tokio::select! {
                _ = shutdown.cancelled() => break,
                request = self.link.recv() => match request {
                    Some(text) => self.on_request(&text).await,
                    None => break,
                },
                Some(out) = self.outgoing.recv() => self.on_outgoing(out).await,
                Some(result) = OptionFuture::from(attempt.as_mut()) => {
                    attempt = None;
                    self.on_attempt(result).await;
                }
                Some(result) = OptionFuture::from(probe.as_mut()) => {
                    probe = None;
                    if let Err(e) = result {
                        self.on_lost(e.to_string()).await;
                    }
                }
                _ = tokio::time::sleep_until(self.next_retry), if !up && idle => {
                    attempt = Some(self.connect());
                }
                _ = tokio::time::sleep_until(self.next_probe), if up && idle => {
                    let upstream = self.upstream.clone();
                    probe = Some(Box::pin(async move { upstream.probe().await }));
                }
                change = self.upstream.changed(), if up && attempt.is_none() => match change {
                    Change::Lists => attempt = Some(self.reoffer()),
                    Change::Lost(why) => {
                        probe = None;
                        self.on_lost(why).await;
                    }
                },
            }
        }
        self.stop().await;
    }

    fn connect(&self) -> Attempt {
        let upstream = self.upstream.clone();
        Box::pin(async move { upstream.connect().await })
    }

    fn reoffer(&self) -> Attempt {
        let upstream = self.upstream.clone();
        Box::pin(async move { upstream.offer().await })
    }

    /// A connection attempt (or a re-read of the offer) ended.
    async fn on_attempt(&mut self, result: Result<Offer, UpstreamError>) {
        let name = &self.calls.speaker.name;
        match result {
            Ok(offer) => {
                self.calls.metrics.import_connect(name, "ok");
                if self.state != State::Up {
                    info!(upstream = %name, "Imported upstream connected.");
                }
                self.state = State::Up;
                self.retry_delay = self.pacing.retry_min;
                self.next_probe = Instant::now() + self.pacing.probe_interval;
                let changed = self.offer.as_ref() != Some(&offer);
                self.offer = Some(offer);
                if changed {
                    self.publish_td().await;
                }
                self.presence().await;
            }
            Err(e) => {
                self.calls.metrics.import_connect(name, "failed");
                let why = e.to_string();
                if self.state == State::Up {
                    return self.on_lost(why).await;
                }
                let first = self.state != State::Down(why.clone());
                if first {
                    warn!(upstream = %name, error = %why, retry_ms = self.retry_delay.as_millis() as u64, "Cannot reach an imported upstream; retrying.");
                } else {
                    debug!(upstream = %name, error = %why, "Still cannot reach an imported upstream.");
                }
                self.state = State::Down(why);
                self.schedule_retry();
                if first {
                    self.presence().await;
                }
            }
        }
    }

    /// The upstream went away: what runs on it fails, and the bridge
    /// connects again after a back-off.
    async fn on_lost(&mut self, why: String) {
        warn!(upstream = %self.speaker().name, error = %why, "An imported upstream went away.");
        self.state = State::Down(why.clone());
        self.retry_delay = self.pacing.retry_min;
        self.schedule_retry();
        let speaker = self.calls.speaker.clone();
        for (route, running) in std::mem::take(&mut self.running) {
            running.task.abort();
            let output =
                serde_json::json!({"error": format!("{} went away: {why}.", speaker.who())});
            let text = speaker.status(
                &running.answering,
                &running.action,
                "failed",
                Some(output),
                None,
            );
            self.link.send(text).await;
            debug!(route, "Failed an invocation whose upstream went away.");
        }
        self.upstream.close().await;
        self.presence().await;
    }

    fn schedule_retry(&mut self) {
        self.next_retry = Instant::now() + self.retry_delay;
        self.retry_delay = (self.retry_delay * 2).min(self.pacing.retry_max);
    }

    async fn on_outgoing(&mut self, out: Outgoing) {
        match out {
            Outgoing::Message(text) => self.link.send(text).await,
            Outgoing::Done(route) => {
                self.running.remove(&route);
            }
        }
    }

    /// Registers the Thing's TD (as a WebSocket agent sends its own); an
    /// upstream not reached yet gets a TD without affordances.
    async fn publish_td(&mut self) {
        let offer = self.offer.clone().unwrap_or_default();
        let thing = self.speaker().thing.clone();
        let described = td::describe(&thing, self.kind, &offer);
        match td::repair(described, &self.validator) {
            Ok(td) => self.link.send(td.to_string()).await,
            Err(e) => {
                warn!(upstream = %self.speaker().name, error = %e, "An imported upstream's offer makes no valid Thing Description; the previous one stays.");
            }
        }
    }

    async fn presence(&self) {
        let up = self.state == State::Up;
        let speaker = self.speaker();
        self.calls
            .metrics
            .import_up(&speaker.name, speaker.protocol, up);
        let presence = match &self.state {
            State::Up => Presence::Online,
            State::Down(why) => Presence::Offline(format!("{}: {why}", speaker.name)),
        };
        self.link.presence(speaker.protocol, &presence).await;
    }

    /// At shutdown: running calls are left to the records (a restart
    /// finds them as the router kept them), the upstream let go.
    async fn stop(self) {
        for running in self.running.values() {
            running.task.abort();
        }
        self.upstream.close().await;
        self.link.close().await;
    }
}
