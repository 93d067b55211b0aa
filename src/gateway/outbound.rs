//! The bounded queue between the dispatcher and one WebSocket connection.
//!
//! The dispatcher never waits on a consumer: it offers each message and, when
//! the queue is full, applies the slow-consumer policy to that consumer only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::lmos::splice::Prepared;

use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tokio_util::sync::CancellationToken;

use crate::config::SlowConsumerPolicy;

/// What the dispatcher queues for a connection.
#[derive(Debug)]
pub enum Frame {
    /// A message as it goes out.
    Text(Utf8Bytes),
    /// One recipient's copy of a fanned-out event or reading, written out
    /// by the connection. The dispatcher, one task for every consumer,
    /// hands over shared parts only; each copy's text is allocated and freed
    /// on the connection's thread. Written by the dispatcher, each copy was
    /// freed on another thread than the one that allocated it, and the
    /// allocator's locks were a tenth of a WebSocket fan-out's CPU (issue 16).
    Copy(RecipientCopy),
}

/// See [`Frame::Copy`].
#[derive(Debug)]
pub struct RecipientCopy {
    pub prepared: Arc<Prepared>,
    /// The recipient's correlation ID, already JSON-encoded.
    pub correlation: Arc<str>,
    /// The fan-out's own `traceparent`, when tracing gave it one.
    pub traceparent: Option<Arc<str>>,
}

impl RecipientCopy {
    pub fn text(&self) -> String {
        self.prepared
            .with(&self.correlation, self.traceparent.as_deref())
    }
}

impl Frame {
    pub fn into_text(self) -> Utf8Bytes {
        match self {
            Frame::Text(text) => text,
            Frame::Copy(copy) => copy.text().into(),
        }
    }
}

impl From<String> for Frame {
    fn from(text: String) -> Frame {
        Frame::Text(text.into())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    Queued,
    /// The queue was full and the policy is to drop.
    Dropped,
    /// The queue was full and the connection is now being closed.
    Disconnected,
    /// The connection is gone.
    Closed,
}

/// The dispatcher's side of a connection's queue.
#[derive(Debug, Clone)]
pub struct Outbound {
    tx: mpsc::Sender<Frame>,
    policy: SlowConsumerPolicy,
    /// Cancelled when the consumer is too slow under the disconnect policy.
    too_slow: CancellationToken,
    dropped: Arc<AtomicU64>,
}

/// The connection's side.
pub struct Inbox {
    pub rx: mpsc::Receiver<Frame>,
    pub too_slow: CancellationToken,
    pub dropped: Arc<AtomicU64>,
}

pub fn channel(capacity: usize, policy: SlowConsumerPolicy) -> (Outbound, Inbox) {
    let (tx, rx) = mpsc::channel(capacity);
    let too_slow = CancellationToken::new();
    let dropped = Arc::new(AtomicU64::new(0));
    (
        Outbound {
            tx,
            policy,
            too_slow: too_slow.clone(),
            dropped: dropped.clone(),
        },
        Inbox {
            rx,
            too_slow,
            dropped,
        },
    )
}

impl Outbound {
    pub fn offer(&self, frame: Frame) -> Offer {
        match self.tx.try_send(frame) {
            Ok(()) => Offer::Queued,
            Err(mpsc::error::TrySendError::Closed(_)) => Offer::Closed,
            Err(mpsc::error::TrySendError::Full(_)) => match self.policy {
                SlowConsumerPolicy::Drop => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    Offer::Dropped
                }
                SlowConsumerPolicy::Disconnect => {
                    self.too_slow.cancel();
                    Offer::Disconnected
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_applies_the_policy() {
        let (out, inbox) = channel(1, SlowConsumerPolicy::Drop);
        assert_eq!(out.offer(String::from("a").into()), Offer::Queued);
        assert_eq!(out.offer(String::from("b").into()), Offer::Dropped);
        assert_eq!(inbox.dropped.load(Ordering::Relaxed), 1);
        assert!(!inbox.too_slow.is_cancelled());

        let (out, inbox) = channel(1, SlowConsumerPolicy::Disconnect);
        out.offer(String::from("a").into());
        assert_eq!(out.offer(String::from("b").into()), Offer::Disconnected);
        assert!(inbox.too_slow.is_cancelled());
        drop(inbox);
        assert_eq!(out.offer(String::from("c").into()), Offer::Closed);
    }
}
