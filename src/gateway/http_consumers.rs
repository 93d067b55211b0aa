//! Consumers that reach the router without a WebSocket of their own: the
//! HTTP binding (`crate::http::things`). Each principal gets one lasting
//! gateway connection, registered like a WebSocket's, so its requests take
//! the same checks and the same router, and its invocations outlive the HTTP
//! exchange that started them (a later `GET` on the status resource is the
//! same consumer asking). Replies are handed to the exchange waiting for
//! their correlation ID; what nobody waits for any more is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::mpsc;
use tracing::debug;

use super::outbound::Inbox;
use super::subscriptions::ConnId;

type Waiters = HashMap<String, Vec<mpsc::UnboundedSender<Value>>>;

/// One principal's connection to the router.
#[derive(Clone)]
pub(crate) struct HttpConsumer {
    pub conn: ConnId,
    waiters: Arc<Mutex<Waiters>>,
}

impl HttpConsumer {
    /// Starts handing `inbox`'s replies to their waiters.
    pub fn start(conn: ConnId, mut inbox: Inbox) -> HttpConsumer {
        let consumer = HttpConsumer {
            conn,
            waiters: Arc::default(),
        };
        let waiters = consumer.waiters.clone();
        tokio::spawn(async move {
            while let Some(frame) = inbox.recv().await {
                let frame = frame.into_text();
                let Ok(reply) = serde_json::from_str::<Value>(&frame) else {
                    continue;
                };
                let correlation = reply
                    .get("correlationID")
                    .or_else(|| reply.get("correlationId"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let mut waiters = lock(&waiters);
                match waiters.get_mut(correlation) {
                    Some(senders) => {
                        senders.retain(|s| s.send(reply.clone()).is_ok());
                        if senders.is_empty() {
                            waiters.remove(correlation);
                        }
                    }
                    None => debug!(correlation, "No HTTP exchange waits for this reply."),
                }
            }
        });
        consumer
    }

    /// Replies with this correlation ID, from now until the [`Replies`] is
    /// dropped.
    pub fn wait_for(&self, correlation: &str) -> Replies {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.waiters)
            .entry(correlation.to_owned())
            .or_default()
            .push(tx);
        Replies {
            rx,
            correlation: correlation.to_owned(),
            waiters: self.waiters.clone(),
        }
    }
}

fn lock(waiters: &Mutex<Waiters>) -> MutexGuard<'_, Waiters> {
    // The map stays consistent whatever a panicking holder did to it.
    waiters.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The replies to one request, as they arrive, until it is dropped.
pub struct Replies {
    rx: mpsc::UnboundedReceiver<Value>,
    correlation: String,
    waiters: Arc<Mutex<Waiters>>,
}

impl Drop for Replies {
    fn drop(&mut self) {
        self.rx.close();
        let mut waiters = lock(&self.waiters);
        if let Some(senders) = waiters.get_mut(&self.correlation) {
            senders.retain(|s| !s.is_closed());
            if senders.is_empty() {
                waiters.remove(&self.correlation);
            }
        }
    }
}

impl Replies {
    /// The next reply; `None` once the sidecar is shutting down.
    pub async fn next(&mut self) -> Option<Value> {
        self.rx.recv().await
    }
}
