//! One call driven to its end: the message sent (streaming, or blocking
//! for an agent without streaming), the answers mapped by [`Tracker`] and
//! passed on, the task cancelled when the consumer cancels or the call
//! fails half-way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::card::Endpoint;
use super::link::Link;
use super::message::{rpc_result, send_params, task_params, Method};
use super::task::{Step, Tracker};
use crate::imports::http::{Response, SseReader};
use crate::imports::upstream::{Call, Outcome, Update, UpstreamError};

/// How long a cancelled call waits for the agent to name its task (to
/// cancel it) when no answer named it yet.
const LEARN_TASK_WITHIN: Duration = Duration::from_secs(2);
/// Polling a task that a blocking send or a broken stream left running.
const POLL_FIRST: Duration = Duration::from_millis(200);
const POLL_MAX: Duration = Duration::from_secs(2);

pub(super) struct Run {
    link: Arc<Link>,
    endpoint: Endpoint,
    call: Call,
    updates: mpsc::Sender<Update>,
    cancel: CancellationToken,
    tracker: Tracker,
    limiter: Limiter,
}

/// What waiting for the next answer gave.
enum Next {
    Result(Value),
    End,
    Cancelled,
}

impl Run {
    pub fn new(
        link: Arc<Link>,
        endpoint: Endpoint,
        call: Call,
        updates: mpsc::Sender<Update>,
        cancel: CancellationToken,
    ) -> Run {
        let tracker = Tracker::new(link.max_bytes);
        let limiter = Limiter::new(link.max_updates_per_second);
        Run {
            link,
            endpoint,
            call,
            updates,
            cancel,
            tracker,
            limiter,
        }
    }

    /// Runs the call; on an error once the agent named its task, the task
    /// is cancelled (in the background) so that it does not run on unseen.
    pub async fn run(mut self) -> Result<Outcome, UpstreamError> {
        let result = self.drive().await;
        if result.is_err() {
            if let Some(task) = self.tracker.task_id() {
                let (link, endpoint, task) =
                    (self.link.clone(), self.endpoint.clone(), task.to_owned());
                tokio::spawn(async move { cancel_task(&link, &endpoint, &task).await });
            }
        }
        result
    }

    async fn drive(&mut self) -> Result<Outcome, UpstreamError> {
        let message_id = uuid::Uuid::new_v4().to_string();
        let (action, input) = (&self.call.action, self.call.input.as_ref());
        let params = send_params(&self.endpoint, action, input, &message_id);
        if !self.endpoint.streaming {
            return self.blocking(params).await;
        }
        let (link, endpoint, trace) = (
            self.link.clone(),
            self.endpoint.clone(),
            self.call.trace.clone(),
        );
        let post = link.post(&endpoint, Method::Stream, params, trace.as_ref(), true);
        tokio::pin!(post);
        let response = tokio::select! {
            response = &mut post => response?,
            () = self.cancel.cancelled() => {
                // The agent may have started the task already: its stream
                // names it, if it comes soon.
                let within = LEARN_TASK_WITHIN.min(self.link.timeout);
                return Ok(match tokio::time::timeout(within, post).await {
                    Ok(Ok(response)) => {
                        let mut events = response.events(self.link.max_bytes);
                        self.cancelled(Some(&mut events)).await
                    }
                    _ => Outcome::Cancelled,
                });
            }
        };
        if response.content_type().as_deref() == Some("text/event-stream") {
            self.stream(response.events(self.link.max_bytes)).await
        } else {
            self.plain(response).await
        }
    }

    /// The events of a streamed answer, to the end of the task.
    async fn stream(&mut self, mut events: SseReader) -> Result<Outcome, UpstreamError> {
        loop {
            match self.next_event(&mut events).await? {
                Next::Result(result) => {
                    if let Some(outcome) = self.step(&result).await? {
                        return Ok(outcome);
                    }
                }
                Next::Cancelled => return Ok(self.cancelled(Some(&mut events)).await),
                // In 1.0 the stream ends after a final or interrupted
                // state: one that ends before either is asked how it is.
                Next::End if self.tracker.task_id().is_some() => return self.poll().await,
                Next::End => {
                    let ended = "the agent's stream ended without an answer";
                    return Err(UpstreamError::Malformed(ended.into()));
                }
            }
        }
    }

    /// A plain JSON answer to a streaming request: an error (a refused
    /// version, a bad request) or an agent that answers at once.
    async fn plain(&mut self, response: Response) -> Result<Outcome, UpstreamError> {
        let read = response.json_capped(self.link.max_bytes);
        let answer = tokio::time::timeout(self.link.timeout, read)
            .await
            .map_err(|_| UpstreamError::Timeout(self.link.timeout_ms()))??;
        match self.step(&rpc_result(answer)?).await? {
            Some(outcome) => Ok(outcome),
            None => self.poll().await,
        }
    }

    /// The next stream event's JSON-RPC result, within `timeout_ms` of the
    /// last one.
    async fn next_event(&self, events: &mut SseReader) -> Result<Next, UpstreamError> {
        let timeout = self.link.timeout;
        tokio::select! {
            next = tokio::time::timeout(timeout, events.next()) => match next {
                Err(_) => Err(UpstreamError::Timeout(self.link.timeout_ms())),
                Ok(None) => Ok(Next::End),
                Ok(Some(event)) => {
                    let data = event?.data;
                    let response = serde_json::from_str(&data).map_err(|e| {
                        UpstreamError::Malformed(format!("a stream event that is no JSON: {e}"))
                    })?;
                    Ok(Next::Result(rpc_result(response)?))
                }
            },
            () = self.cancel.cancelled() => Ok(Next::Cancelled),
        }
    }

    /// Maps one result and passes its updates on; the outcome if it ended.
    async fn step(&mut self, result: &Value) -> Result<Option<Outcome>, UpstreamError> {
        match self.tracker.on_result(result)? {
            Step::Done(outcome) => Ok(Some(outcome)),
            Step::Updates(updates) => {
                for update in updates {
                    self.pass_on(update).await;
                }
                Ok(None)
            }
        }
    }

    /// Progress may be dropped (over the rate, or the channel full); a
    /// chunk is output and waits for room (or the cancellation).
    async fn pass_on(&mut self, update: Update) {
        match update {
            Update::Progress(_) => {
                if self.limiter.allow(Instant::now()) {
                    let _ = self.updates.try_send(update);
                }
            }
            Update::Chunk { .. } => {
                tokio::select! {
                    _ = self.updates.send(update) => {}
                    () = self.cancel.cancelled() => {}
                }
            }
        }
    }

    /// A blocking send (agents without streaming): answered when the task
    /// ends or asks for input; a task still running then is polled.
    async fn blocking(&mut self, params: Value) -> Result<Outcome, UpstreamError> {
        let trace = self.call.trace.clone();
        let send = self
            .link
            .call_once(&self.endpoint, Method::Send, params, trace.as_ref());
        let answer = tokio::select! {
            answer = send => answer?,
            () = self.cancel.cancelled() => return Ok(Outcome::Cancelled),
        };
        match self.step(&answer).await? {
            Some(outcome) => Ok(outcome),
            None => self.poll().await,
        }
    }

    /// `GetTask` until the task ends (each answer within `timeout_ms`).
    async fn poll(&mut self) -> Result<Outcome, UpstreamError> {
        let Some(task) = self.tracker.task_id().map(str::to_owned) else {
            return Err(UpstreamError::Malformed(
                "the agent named no task to follow".into(),
            ));
        };
        let mut pause = POLL_FIRST;
        loop {
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = self.cancel.cancelled() => return Ok(self.cancelled(None).await),
            }
            pause = (pause * 2).min(POLL_MAX);
            let params = task_params(&self.endpoint, &task);
            let trace = self.call.trace.clone();
            let get = self
                .link
                .call_once(&self.endpoint, Method::Get, params, trace.as_ref());
            let answer = tokio::select! {
                answer = get => answer?,
                () = self.cancel.cancelled() => return Ok(self.cancelled(None).await),
            };
            if let Some(outcome) = self.step(&answer).await? {
                return Ok(outcome);
            }
        }
    }

    /// The consumer cancelled: cancels the agent's task (learning its ID
    /// from the stream first, briefly, if no answer named it yet).
    async fn cancelled(&mut self, events: Option<&mut SseReader>) -> Outcome {
        if let (None, Some(events)) = (self.tracker.task_id(), events) {
            let within = LEARN_TASK_WITHIN.min(self.link.timeout);
            let tracker = &mut self.tracker;
            let learn = async {
                while tracker.task_id().is_none() {
                    match events.next().await {
                        Some(Ok(event)) => {
                            let response = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                            if let Ok(result) = rpc_result(response) {
                                let _ = tracker.on_result(&result);
                            }
                        }
                        _ => break,
                    }
                }
            };
            let _ = tokio::time::timeout(within, learn).await;
        }
        if let Some(task) = self.tracker.task_id() {
            cancel_task(&self.link, &self.endpoint, task).await;
        }
        Outcome::Cancelled
    }
}

/// `CancelTask`, best effort: the call ends cancelled whatever the agent
/// says (a task that just ended cannot be cancelled, and need not be).
async fn cancel_task(link: &Link, endpoint: &Endpoint, task: &str) {
    let params = task_params(endpoint, task);
    let cancel = link.call_once(endpoint, Method::Cancel, params, None);
    match tokio::time::timeout(link.connect_timeout.max(Duration::from_secs(1)), cancel).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => tracing::debug!(%error, task, "imports: a2a CancelTask was refused"),
        Err(_) => tracing::debug!(task, "imports: a2a CancelTask got no answer in time"),
    }
}

/// At most `per_second` progress updates in any one-second window (a
/// fixed window: cheap, and bursts of twice the rate are harmless here).
#[derive(Debug)]
struct Limiter {
    per_second: u32,
    window: Option<Instant>,
    used: u32,
}

impl Limiter {
    fn new(per_second: u32) -> Limiter {
        Limiter {
            per_second,
            window: None,
            used: 0,
        }
    }

    fn allow(&mut self, now: Instant) -> bool {
        match self.window {
            Some(start) if now.duration_since(start) < Duration::from_secs(1) => {}
            _ => {
                self.window = Some(now);
                self.used = 0;
            }
        }
        if self.used < self.per_second {
            self.used += 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limiter_lets_the_rate_through_per_second() {
        let start = Instant::now();
        let mut limiter = Limiter::new(3);
        let allowed = (0..10).filter(|_| limiter.allow(start)).count();
        assert_eq!(allowed, 3);
        assert!(!limiter.allow(start + Duration::from_millis(999)));
        assert!(limiter.allow(start + Duration::from_millis(1000)));
        let mut none = Limiter::new(0);
        assert!(!none.allow(start));
    }
}
