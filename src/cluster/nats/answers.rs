//! Answers to other sidecars' requests, delivered with acknowledgement.
//!
//! Core NATS delivers at most once: an answer in flight when a node dies
//! (the asker's, or the agent's sidecar's) is gone, and the asker's router
//! times the request out. So each answer ([`super::relay::ToNats::Answer`])
//! goes as a NATS request to the asker's reply subject, numbered in the
//! [`HEADER`] header; the asker's link replies (empty) once its broker has
//! the answer. An answer not acknowledged within [`ATTEMPT`] (lost, or no
//! responders while the asker's link moves to another node) goes again
//! after a doubling wait, for up to [`GIVE_UP`]. The asker drops a repeat
//! by its number ([`super::relay::Relay::answer_from_inbox`]).
//!
//! Answers are not held back until the one before them is acknowledged:
//! that wait, one round trip per status, cost a quarter of the throughput
//! of 32 invocations in flight. So an answer repeated after a loss can
//! arrive after a later one of its route; the asker's router then drops a
//! status that comes after the terminal one, and the terminal result
//! itself is never lost.

use std::time::Duration;

use async_nats::{Client, HeaderMap, Request};
use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Header with an answer's number within its route (from 1).
pub const HEADER: &str = "Lmos-Answer";
/// How long one attempt waits for the asker's acknowledgement.
pub const ATTEMPT: Duration = Duration::from_secs(1);
/// How long an answer is tried before it is given up (longer than a NATS
/// node's failover takes the asker: reconnecting and subscribing again).
pub const GIVE_UP: Duration = Duration::from_secs(60);
const FIRST_WAIT: Duration = Duration::from_millis(50);
const MAX_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct Answer {
    pub subject: String,
    pub route: String,
    pub seq: u64,
    pub payload: Bytes,
}

/// Starts the sender; answers go in through the returned channel until
/// `stop`.
pub fn start(client: Client, stop: CancellationToken) -> mpsc::UnboundedSender<Answer> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(tracing::Instrument::in_current_span(async move {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = run(client, rx) => {}
        }
    }));
    tx
}

async fn run(client: Client, mut rx: mpsc::UnboundedReceiver<Answer>) {
    let mut in_flight = FuturesUnordered::new();
    loop {
        tokio::select! {
            answer = rx.recv() => match answer {
                Some(answer) => in_flight.push(deliver(client.clone(), answer)),
                None => return,
            },
            Some(()) = in_flight.next() => {}
        }
    }
}

/// Sends one answer until it is acknowledged or [`GIVE_UP`] has passed.
async fn deliver(client: Client, answer: Answer) {
    let deadline = Instant::now() + GIVE_UP;
    let mut wait = FIRST_WAIT;
    let mut attempts = 0u32;
    loop {
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, answer.seq.to_string().as_str());
        let request = Request::new()
            .headers(headers)
            .payload(answer.payload.clone())
            .timeout(Some(ATTEMPT));
        attempts += 1;
        match client.send_request(answer.subject.clone(), request).await {
            Ok(_) => {
                if attempts > 1 {
                    debug!(
                        attempts,
                        route = answer.route,
                        "An answer was acknowledged after repeating it."
                    );
                }
                return;
            }
            Err(e) if Instant::now() + wait >= deadline => {
                warn!(error = %e, attempts, route = answer.route, "Gave up an answer the asking sidecar never acknowledged.");
                return;
            }
            Err(e) => {
                debug!(error = %e, attempts, "An answer was not acknowledged; repeating it.");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_WAIT);
            }
        }
    }
}
