//! Several events in one stream message, decided without I/O.
//!
//! Every stream message costs the NATS cluster the same whatever it
//! carries: a replicated store (R3), a delivery to every sidecar's
//! consumer and an acknowledgement from each. Measured on the 3-node
//! loopback cluster, that per-message work, not the bytes, is what made
//! events queue at 5 000/s (docs/clustering-jetstream.md). So the
//! publisher takes every event already waiting when it sends and packs
//! consecutive events of the same subject into one message: under light
//! load a message carries one event, sent as it comes (a plain message,
//! no [`BATCH`] header); under load, the events that queued meanwhile
//! travel together and the cluster's work per event falls.
//!
//! Body of a message with [`BATCH`]` = n`: `n` entries, each a 4-byte
//! big-endian length and that many bytes of one event's payload, in
//! publication order.

use bytes::{BufMut, Bytes, BytesMut};

/// Header of a stream message that carries several events: how many.
pub const BATCH: &str = "Lmos-Batch";

/// Events in one message, at most.
pub const MAX_EVENTS: usize = 256;

/// A message's body, at most (unless one event alone is larger): well
/// under NATS's default `max_payload` (1 MiB).
pub const MAX_BYTES: usize = 256 * 1024;

const LEN: usize = 4;

/// Events of one subject that go to the stream as one message.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub subject: String,
    pub payloads: Vec<Bytes>,
}

impl Batch {
    /// The message's body, and its [`BATCH`] header value when it carries
    /// more than one event (one event is sent as it is).
    pub fn body(&self) -> (Bytes, Option<usize>) {
        if let [one] = self.payloads.as_slice() {
            return (one.clone(), None);
        }
        let size = self.payloads.iter().map(|p| LEN + p.len()).sum();
        let mut body = BytesMut::with_capacity(size);
        for p in &self.payloads {
            // Bounded by MAX_BYTES (or NATS's max_payload for one event).
            body.put_u32(p.len() as u32);
            body.put_slice(p);
        }
        (body.freeze(), Some(self.payloads.len()))
    }

    fn bytes(&self) -> usize {
        self.payloads.iter().map(|p| LEN + p.len()).sum()
    }
}

/// `events` (in publication order) as messages: consecutive events of the
/// same subject together, within [`MAX_EVENTS`] and [`MAX_BYTES`].
pub fn group(events: Vec<(String, Bytes)>) -> Vec<Batch> {
    let mut batches: Vec<Batch> = Vec::new();
    for (subject, payload) in events {
        match batches.last_mut() {
            Some(b)
                if b.subject == subject
                    && b.payloads.len() < MAX_EVENTS
                    && b.bytes() + LEN + payload.len() <= MAX_BYTES =>
            {
                b.payloads.push(payload)
            }
            _ => batches.push(Batch {
                subject,
                payloads: vec![payload],
            }),
        }
    }
    batches
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum UnpackError {
    #[error("the batch header `{0}` is no count")]
    Count(String),
    #[error("the batch body ends inside entry {entry} of {count}")]
    Truncated { entry: usize, count: usize },
    #[error("the batch body has {0} bytes after its last entry")]
    Trailing(usize),
}

/// The events of a message whose [`BATCH`] header is `count`.
pub fn unpack(count: &str, body: &Bytes) -> Result<Vec<Bytes>, UnpackError> {
    let count: usize = count
        .trim()
        .parse()
        .map_err(|_| UnpackError::Count(count.to_owned()))?;
    let mut events = Vec::with_capacity(count.min(MAX_EVENTS));
    let mut at = 0;
    for entry in 0..count {
        let truncated = UnpackError::Truncated { entry, count };
        let len = body.get(at..at + LEN).ok_or(truncated.clone())?;
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        at += LEN;
        let end = at.checked_add(len).filter(|&e| e <= body.len());
        let end = end.ok_or(truncated)?;
        events.push(body.slice(at..end));
        at = end;
    }
    match body.len() - at {
        0 => Ok(events),
        rest => Err(UnpackError::Trailing(rest)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ev(subject: &str, payload: &str) -> (String, Bytes) {
        (subject.into(), Bytes::from(payload.to_owned()))
    }

    #[test]
    fn consecutive_events_of_a_subject_travel_together_in_order() {
        let b = group(vec![ev("a", "1"), ev("a", "2"), ev("b", "3"), ev("a", "4")]);
        let shape: Vec<(&str, usize)> = b
            .iter()
            .map(|b| (b.subject.as_str(), b.payloads.len()))
            .collect();
        assert_eq!(shape, [("a", 2), ("b", 1), ("a", 1)]);
        assert_eq!(b[1].body(), (Bytes::from("3"), None), "one event: as it is");
        let (body, count) = b[0].body();
        assert_eq!(count, Some(2));
        assert_eq!(unpack("2", &body).unwrap(), [Bytes::from("1"), "2".into()]);
    }

    #[test]
    fn a_batch_stays_within_its_limits() {
        let many = (0..MAX_EVENTS + 1).map(|_| ev("a", "x")).collect();
        let b = group(many);
        assert_eq!((b[0].payloads.len(), b[1].payloads.len()), (MAX_EVENTS, 1));
        let big = "y".repeat(MAX_BYTES / 2);
        let b = group(vec![ev("a", &big), ev("a", &big), ev("a", "z")]);
        assert_eq!(b.len(), 2, "two halves and their lengths exceed the limit");
        assert!(b.iter().all(|b| b.bytes() <= MAX_BYTES));
    }

    #[test]
    fn a_damaged_batch_is_refused() {
        let (body, _) = group(vec![ev("a", "12"), ev("a", "345")])[0].body();
        assert_eq!(
            unpack("3", &body),
            Err(UnpackError::Truncated { entry: 2, count: 3 })
        );
        assert_eq!(unpack("1", &body), Err(UnpackError::Trailing(7)));
        assert!(matches!(unpack("x", &body), Err(UnpackError::Count(_))));
        let cut = body.slice(..body.len() - 1);
        assert!(unpack("2", &cut).is_err());
    }

    proptest! {
        #[test]
        fn what_is_packed_unpacks_as_it_was(
            events in prop::collection::vec((0u8..3, prop::collection::vec(any::<u8>(), 0..40)), 1..600)
        ) {
            let events: Vec<(String, Bytes)> = events
                .into_iter()
                .map(|(s, p)| (format!("s{s}"), Bytes::from(p)))
                .collect();
            let mut back = Vec::new();
            for b in group(events.clone()) {
                let (body, count) = b.body();
                let payloads = match count {
                    Some(n) => unpack(&n.to_string(), &body).unwrap(),
                    None => vec![body],
                };
                back.extend(payloads.into_iter().map(|p| (b.subject.clone(), p)));
            }
            prop_assert_eq!(back, events);
        }
    }
}
