//! When a WebSocket consumer counts as too slow (pure: no clock, no I/O).
//!
//! A consumer is acted on for what its queue costs and for not moving, not
//! for a count of messages: a burst of small messages behind a consumer that
//! reads a moment late is what an MQTT subscriber rides out, and a count of
//! 1 024 closed WebSocket consumers for it (issue 48). So the queue is
//! bounded by bytes (`gateway.outbound_queue_bytes`, every message counted
//! with [`PER_MESSAGE`] on top of its own bytes) and by time
//! (`gateway.outbound_stall_ms`: nothing taken off a non-empty queue for
//! that long). `gateway.outbound_queue` stays as a large count cap, a
//! safety net only: at its default the byte budget is always reached first.

/// What a queued message costs beyond its own bytes: its slot in the queue
/// (a [`super::outbound::Queued`], 56 bytes on 64-bit targets) and a share
/// of the batch's allocation. Counted in bytes so that a flood of 1-byte
/// messages still meets the byte budget: `outbound_queue_bytes` /
/// `PER_MESSAGE` messages at most.
pub const PER_MESSAGE: usize = 64;

/// Why a connection was found too slow, for its close frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TooSlow {
    /// `outbound_queue` messages waiting (the safety cap).
    Messages,
    /// `outbound_queue_bytes` bytes waiting.
    Bytes,
    /// Nothing taken off its queue for `outbound_stall_ms`.
    Stalled,
    /// The gateway's `max_outbound_bytes` was reached and this connection
    /// had taken nothing off its queue for the longest.
    Budget,
}

impl TooSlow {
    /// As kept in an atomic: never 0 (0 is "not too slow").
    pub fn code(self) -> u8 {
        match self {
            TooSlow::Messages => 1,
            TooSlow::Bytes => 2,
            TooSlow::Budget => 3,
            TooSlow::Stalled => 4,
        }
    }

    pub fn from_code(code: u8) -> Option<TooSlow> {
        match code {
            1 => Some(TooSlow::Messages),
            2 => Some(TooSlow::Bytes),
            3 => Some(TooSlow::Budget),
            4 => Some(TooSlow::Stalled),
            _ => None,
        }
    }
}

/// A connection queue's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// `gateway.outbound_queue`: the safety cap on the count.
    pub messages: usize,
    /// `gateway.outbound_queue_bytes`.
    pub bytes: usize,
    /// `gateway.outbound_stall_ms`; 0: never stalled.
    pub stall_ms: u64,
}

impl Bounds {
    /// Twice the bounds: how far a `drop_oldest` queue may grow before the
    /// newest are dropped.
    pub fn doubled(&self) -> Bounds {
        Bounds {
            messages: self.messages.saturating_mul(2),
            bytes: self.bytes.saturating_mul(2),
            stall_ms: self.stall_ms,
        }
    }

    /// Whether a queue holding `queued` bytes, last moved at `last_moved`
    /// (ms on the budget's clock: a message taken off it, or the queue
    /// found empty), has stalled by `now`. An empty queue never has: a
    /// consumer with nothing to read is not slow.
    pub fn stalled(&self, queued: usize, last_moved: u64, now: u64) -> bool {
        self.stall_ms > 0 && queued > 0 && now.saturating_sub(last_moved) >= self.stall_ms
    }

    /// Why a message of `bytes` does not fit a queue holding `queued` bytes
    /// in `messages` messages; `None` when it fits. A message larger than
    /// the whole budget still goes to an empty queue: the message size
    /// limits bound it.
    pub fn full(&self, queued: usize, messages: usize, bytes: usize) -> Option<TooSlow> {
        if queued > 0 && queued.saturating_add(bytes) > self.bytes {
            Some(TooSlow::Bytes)
        } else if messages >= self.messages {
            Some(TooSlow::Messages)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Bounds = Bounds {
        messages: 1_000_000,
        bytes: 1000,
        stall_ms: 30_000,
    };

    #[test]
    fn bytes_bound_the_queue_not_a_small_count() {
        // 5 000 small messages fit, as their bytes do.
        let small = 10 + PER_MESSAGE;
        assert_eq!(B.full(0, 0, small), None);
        let big = Bounds {
            bytes: 5_000 * small,
            ..B
        };
        assert_eq!(big.full(4_999 * small, 4_999, small), None);
        assert_eq!(big.full(5_000 * small, 5_000, small), Some(TooSlow::Bytes));
        // Larger than the budget: only an empty queue takes it.
        assert_eq!(B.full(0, 0, 5_000), None);
        assert_eq!(B.full(1, 1, 5_000), Some(TooSlow::Bytes));
        // The count cap is a safety net behind the bytes.
        let capped = Bounds { messages: 3, ..big };
        assert_eq!(capped.full(3 * small, 3, small), Some(TooSlow::Messages));
    }

    #[test]
    fn only_a_queue_that_holds_something_and_has_not_moved_is_stalled() {
        assert!(!B.stalled(0, 0, 1_000_000), "empty: nothing to read");
        assert!(!B.stalled(10, 1_000, 30_999));
        assert!(B.stalled(10, 1_000, 31_000));
        assert!(!B.stalled(10, 40_000, 31_000), "a clock read before a move");
        let off = Bounds { stall_ms: 0, ..B };
        assert!(!off.stalled(10, 0, u64::MAX));
    }

    #[test]
    fn codes_round_trip() {
        for why in [
            TooSlow::Messages,
            TooSlow::Bytes,
            TooSlow::Stalled,
            TooSlow::Budget,
        ] {
            assert_ne!(why.code(), 0);
            assert_eq!(TooSlow::from_code(why.code()), Some(why));
        }
        assert_eq!(TooSlow::from_code(0), None);
    }
}
