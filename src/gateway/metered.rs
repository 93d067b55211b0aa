//! What WebSocket messages being received hold, counted where tungstenite
//! reads them: a connection's transport is wrapped in [`Metered`], which
//! reads the frame headers going by (not the payloads) and counts the bytes
//! read against `gateway.max_inbound_bytes` until the message they belong
//! to has been received and handled.
//!
//! tungstenite buffers a message until its last byte (a frame, or the
//! fragments of a fragmented one), so forty connections each trickling an
//! unfinished 15 MiB message held 800 MiB (issue 30). Now:
//! - a fragmented message is cut as soon as its fragments announce more
//!   than `max_message_size`: the connection is closed with 1009 and the
//!   rest is never read. (A message in one frame up to tungstenite's own
//!   limit is still read whole, so that it gets an LMOS error and the
//!   connection lives on; the frame's header says its size, but the
//!   payload must be read to stay in step, and tungstenite keeps it.)
//! - when all connections together hold more than `max_inbound_bytes`,
//!   the one holding the most is closed with 1013.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};

use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

use super::budget::Budget;

/// Why a connection's reading was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `max_inbound_bytes` was reached and it held the most.
    Budget,
    /// A fragmented message over `max_message_size`.
    Fragmented,
}

/// One connection's count.
#[derive(Debug, Default)]
pub struct Meter {
    /// Bytes counted in the budget for this connection.
    charged: AtomicUsize,
    /// 0, or a [`Refusal`] + 1.
    refused: AtomicU8,
    /// Cancelled when another connection's reading found the budget full
    /// and this one held the most: it may be waiting for bytes that never
    /// come.
    pub evicted: CancellationToken,
}

impl Meter {
    pub fn refusal(&self) -> Option<Refusal> {
        match self.refused.load(Ordering::Relaxed) {
            1 => Some(Refusal::Budget),
            2 => Some(Refusal::Fragmented),
            _ => None,
        }
    }

    fn refuse(&self, why: Refusal) {
        let code = if why == Refusal::Budget { 1 } else { 2 };
        let _ = self
            .refused
            .compare_exchange(0, code, Ordering::Relaxed, Ordering::Relaxed);
        self.evicted.cancel();
    }
}

/// `gateway.max_inbound_bytes` and the connections it counts.
#[derive(Debug)]
pub struct InboundBudget {
    budget: Arc<Budget>,
    max_message_size: usize,
    fragmented_hits: Counter,
    meters: Mutex<HashMap<u64, Arc<Meter>>>,
    next: AtomicU64,
}

impl InboundBudget {
    pub fn new(budget: Arc<Budget>, max_message_size: usize, fragmented_hits: Counter) -> Self {
        InboundBudget {
            budget,
            max_message_size,
            fragmented_hits,
            meters: Mutex::default(),
            next: AtomicU64::new(0),
        }
    }

    /// Counts `n` bytes read by `meter`'s connection; past the budget,
    /// closes the connections holding the most until it fits again.
    fn charge(&self, meter: &Meter, n: usize) -> Result<(), Refusal> {
        meter.charged.fetch_add(n, Ordering::Relaxed);
        if self.budget.add(n) > self.budget.limit() {
            let meters = self.meters.lock().unwrap_or_else(PoisonError::into_inner);
            while self.budget.used() > self.budget.limit() {
                let largest = meters
                    .values()
                    .filter(|m| m.refusal().is_none())
                    .max_by_key(|m| m.charged.load(Ordering::Relaxed));
                let Some(victim) = largest else { break };
                victim.refuse(Refusal::Budget);
                self.budget.sub(victim.charged.swap(0, Ordering::Relaxed));
                self.budget.hit();
            }
        }
        meter.refusal().map_or(Ok(()), Err)
    }

    /// Makes the count of `meter` `keep` bytes.
    fn set(&self, meter: &Meter, keep: usize) {
        let before = meter.charged.swap(keep, Ordering::Relaxed);
        if before > keep {
            self.budget.sub(before - keep);
        } else {
            self.budget.add(keep - before);
        }
    }
}

/// A connection's transport, metered.
#[derive(Debug)]
pub struct Metered<S> {
    io: S,
    id: u64,
    meter: Arc<Meter>,
    budget: Arc<InboundBudget>,
    scan: Scan,
}

impl<S> Metered<S> {
    pub fn new(io: S, budget: &Arc<InboundBudget>) -> Self {
        let id = budget.next.fetch_add(1, Ordering::Relaxed);
        let meter = Arc::new(Meter::default());
        budget
            .meters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, meter.clone());
        Metered {
            io,
            id,
            meter,
            budget: budget.clone(),
            scan: Scan::default(),
        }
    }

    pub fn meter(&self) -> &Arc<Meter> {
        &self.meter
    }

    /// A message was received and handled: only the bytes of one still
    /// coming count now.
    pub fn settle(&self) {
        if self.meter.refusal().is_none() {
            self.budget.set(&self.meter, self.scan.message);
        }
    }
}

impl<S> Drop for Metered<S> {
    fn drop(&mut self) {
        self.budget
            .meters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
        self.budget.set(&self.meter, 0);
    }
}

fn refused(why: Refusal) -> io::Error {
    io::Error::other(match why {
        Refusal::Budget => "inbound memory budget full",
        Refusal::Fragmented => "fragmented message over max_message_size",
    })
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(why) = this.meter.refusal() {
            return Poll::Ready(Err(refused(why)));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        let read = &buf.filled()[before..];
        if this.scan.feed(read, this.budget.max_message_size).is_err() {
            this.budget.fragmented_hits.inc();
            this.meter.refuse(Refusal::Fragmented);
            return Poll::Ready(Err(refused(Refusal::Fragmented)));
        }
        match this.budget.charge(&this.meter, read.len()) {
            Ok(()) => Poll::Ready(Ok(())),
            Err(why) => Poll::Ready(Err(refused(why))),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// Where the byte stream is among the frames (RFC 6455, 5.2): headers are
/// read, payloads skipped.
#[derive(Debug, Default)]
struct Scan {
    header: [u8; 14],
    have: usize,
    /// Payload bytes of the current frame still to come.
    payload_left: u64,
    /// The current frame is a data frame.
    data: bool,
    /// The current frame ends its message.
    last: bool,
    /// Payload announced so far by the fragments of a fragmented message.
    fragmented: Option<u64>,
    /// Bytes of the data message in progress, headers included.
    message: usize,
}

/// A fragmented message over the size limit.
#[derive(Debug)]
struct TooLarge;

impl Scan {
    fn feed(&mut self, mut bytes: &[u8], max: usize) -> Result<(), TooLarge> {
        while !bytes.is_empty() {
            if self.payload_left > 0 {
                let take = bytes
                    .len()
                    .min(usize::try_from(self.payload_left).unwrap_or(usize::MAX));
                self.payload_left -= take as u64;
                bytes = &bytes[take..];
                if self.data {
                    self.message += take;
                }
                if self.payload_left == 0 {
                    self.frame_done();
                }
                continue;
            }
            self.header[self.have] = bytes[0];
            self.have += 1;
            bytes = &bytes[1..];
            // The opcode, in the first byte, says whether it is data.
            if self.header[0] & 0x08 == 0 {
                self.message += 1;
            }
            if let Some(len) = self.header_complete() {
                self.frame_started(len, max)?;
            }
        }
        Ok(())
    }

    /// The payload length, once the whole header is in.
    fn header_complete(&self) -> Option<u64> {
        if self.have < 2 {
            return None;
        }
        let len7 = self.header[1] & 0x7F;
        let extended = match len7 {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let mask = if self.header[1] & 0x80 != 0 { 4 } else { 0 };
        if self.have < 2 + extended + mask {
            return None;
        }
        Some(match extended {
            0 => u64::from(len7),
            2 => u64::from(u16::from_be_bytes([self.header[2], self.header[3]])),
            _ => u64::from_be_bytes(self.header[2..10].try_into().expect("8 bytes")),
        })
    }

    fn frame_started(&mut self, len: u64, max: usize) -> Result<(), TooLarge> {
        let fin = self.header[0] & 0x80 != 0;
        let opcode = self.header[0] & 0x0F;
        self.data = opcode & 0x08 == 0;
        self.last = fin;
        if self.data {
            // A first fragment, or a continuation (opcode 0).
            let so_far = match (opcode, self.fragmented) {
                (0, Some(n)) => Some(n.saturating_add(len)),
                (0, None) => None,
                (_, _) if !fin => Some(len),
                _ => None,
            };
            if so_far.is_some_and(|n| n > max as u64) {
                return Err(TooLarge);
            }
            self.fragmented = if fin { None } else { so_far };
        }
        self.have = 0;
        self.payload_left = len;
        if len == 0 {
            self.frame_done();
        }
        Ok(())
    }

    fn frame_done(&mut self) {
        if self.data && self.last {
            self.message = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's (masked) frame header.
    fn header(fin: bool, opcode: u8, len: usize) -> Vec<u8> {
        let mut h = vec![if fin { 0x80 } else { 0 } | opcode];
        match len {
            0..=125 => h.push(0x80 | len as u8),
            126..=65535 => {
                h.push(0x80 | 126);
                h.extend((len as u16).to_be_bytes());
            }
            _ => {
                h.push(0x80 | 127);
                h.extend((len as u64).to_be_bytes());
            }
        }
        h.extend([1, 2, 3, 4]);
        h
    }

    fn frame(fin: bool, opcode: u8, len: usize) -> Vec<u8> {
        let mut f = header(fin, opcode, len);
        f.extend(std::iter::repeat_n(b'x', len));
        f
    }

    #[test]
    fn follows_messages_byte_by_byte_and_cuts_large_fragmented_ones() {
        let mut scan = Scan::default();
        let whole = frame(true, 1, 300);
        // Fed one byte at a time, the message is in progress until its end.
        for (i, b) in whole.iter().enumerate() {
            scan.feed(&[*b], 100).unwrap();
            let expected = if i + 1 == whole.len() { 0 } else { i + 1 };
            assert_eq!(scan.message, expected);
        }
        // A whole frame over the limit passes: tungstenite answers it.
        assert_eq!(scan.message, 0);
        // Fragments with a ping between them.
        scan.feed(&frame(false, 1, 40), 100).unwrap();
        scan.feed(&frame(true, 9, 4), 100).unwrap();
        scan.feed(&frame(false, 0, 40), 100).unwrap();
        assert_eq!(scan.message, 2 * (40 + 6));
        scan.feed(&frame(true, 0, 20), 100).unwrap();
        assert_eq!((scan.message, scan.fragmented), (0, None));
        // Cut as soon as the header announces too much.
        scan.feed(&frame(false, 2, 60), 100).unwrap();
        assert!(scan.feed(&header(false, 0, 70_000), 100).is_err());
    }
}
