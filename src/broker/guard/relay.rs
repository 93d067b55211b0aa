//! The I/O of one guarded connection: the two pumps that move bytes
//! between the client's socket and the broker's link, each asking its
//! direction's pure state ([`super::inspect`], [`super::downstream`]) what
//! to write.

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::debug;

use super::connection::{End, ToClient};
use super::downstream::Downstream;
use super::inspect::Inspector;
use super::order;
use crate::broker::engine::{EngineRx, EngineTx};
use crate::store::Store;

/// Read buffers grow by this much; whole packets larger than it grow them
/// to their size.
const READ_CHUNK: usize = 16 * 1024;
/// A read buffer's first allocation: most MQTT clients are idle, and their
/// two buffers (client and broker side) were most of what one cost
/// (issue 16); a busy connection reaches READ_CHUNK on its next growth.
const FIRST_CHUNK: usize = 2 * 1024;
/// Below this much free room a read buffer grows before the next read.
const MIN_SPARE: usize = 256;
const PINGREQ: [u8; 2] = [0xC0, 0];

/// A client's connection, split into the halves the two pumps use.
pub(super) trait ClientStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    type Rx: ClientRx;
    type Tx: AsyncWrite + Unpin + Send + 'static;
    fn split(self) -> (Self::Rx, Self::Tx);
}

/// A client's reading half, which may be able to wait for data without
/// holding a read buffer.
pub(super) trait ClientRx: AsyncRead + Unpin + Send + 'static {
    /// Whether [`ClientRx::readable`] and [`ClientRx::try_read`] work; a TLS
    /// stream reads records ahead into buffers of its own, and is read
    /// the ordinary way.
    const UNBUFFERED_WAIT: bool;
    /// Reads what has arrived, without waiting: `WouldBlock` if nothing.
    fn try_read(&mut self, buf: &mut BytesMut) -> io::Result<usize>;
    /// Waits until a read would find something (or the end).
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send + '_;
}

impl ClientStream for TcpStream {
    type Rx = OwnedReadHalf;
    type Tx = OwnedWriteHalf;
    fn split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        self.into_split()
    }
}

impl ClientRx for OwnedReadHalf {
    const UNBUFFERED_WAIT: bool = true;
    fn try_read(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        self.try_read_buf(buf)
    }
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send + '_ {
        OwnedReadHalf::readable(self)
    }
}

type Tls = tokio_rustls::server::TlsStream<TcpStream>;

impl ClientStream for Tls {
    type Rx = tokio::io::ReadHalf<Tls>;
    type Tx = tokio::io::WriteHalf<Tls>;
    fn split(self) -> (Self::Rx, Self::Tx) {
        tokio::io::split(self)
    }
}

impl ClientRx for tokio::io::ReadHalf<Tls> {
    const UNBUFFERED_WAIT: bool = false;
    fn try_read(&mut self, _: &mut BytesMut) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send + '_ {
        std::future::ready(Ok(()))
    }
}

/// Reads what the client sent into `buf`. With nothing buffered, a plain
/// connection waits for data holding no read buffer: most MQTT clients
/// are idle most of the time, and their buffers were a quarter of what one
/// cost (issue 32). A busy one keeps its buffer while reads find data.
async fn read_some<R: ClientRx>(client: &mut R, buf: &mut BytesMut) -> io::Result<usize> {
    if R::UNBUFFERED_WAIT && buf.is_empty() {
        loop {
            if buf.capacity() > 0 {
                match client.try_read(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    read => return read,
                }
                *buf = BytesMut::new();
            }
            client.readable().await?;
            grow(buf);
        }
    }
    grow(buf);
    client.read_buf(buf).await
}

pub(super) fn grow(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < MIN_SPARE {
        let chunk = if buf.capacity() == 0 {
            FIRST_CHUNK
        } else {
            READ_CHUNK
        };
        buf.reserve(chunk);
    }
}

impl Inspector<'_> {
    /// The client-to-broker pump: reads the client, inspects, writes the
    /// broker what the inspection let through (and what the guard owes
    /// it), pings the broker for a client without keep-alive.
    pub(super) async fn pump<R: ClientRx>(
        &mut self,
        client: &mut R,
        socket: RawFd,
        upstream: &mut EngineTx,
        buf: &mut BytesMut,
        owed: &Notify,
    ) -> End {
        let mut ping = self.pings.map(|every| {
            let mut i = tokio::time::interval_at(Instant::now() + every, every);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        });
        let mut last_publish: Option<Instant> = None;
        loop {
            let (chunk, end) = self.inspect_all(buf);
            let inspected = std::mem::take(&mut self.order);
            let ticket = inspected.subscribing.then(|| self.shared.order.begin());
            for message in self.pending.drain(..) {
                if self.outbox.send_async(message).await.is_err() {
                    return End::Closing;
                }
            }
            // What the guard owes the broker goes first (the client's
            // acknowledgements are among it, in the order rumqttd needs),
            // in the same write.
            let chunk = match self.take_owed() {
                None => chunk,
                Some(acks) if chunk.is_empty() => acks,
                Some(acks) => {
                    let mut both = BytesMut::with_capacity(acks.len() + chunk.len());
                    both.extend_from_slice(&acks);
                    both.extend_from_slice(&chunk);
                    both.freeze()
                }
            };
            if std::mem::take(&mut self.prepare_first) {
                if let Some(p) = &self.shared.prerequisite {
                    p.prepare().await;
                }
            }
            if inspected.publishing && ticket.is_none() {
                // A publication after a quiet spell lets the sockets that
                // became readable with it be read first (a yield polls the
                // I/O driver); a stream of them does not pay for it.
                let now = Instant::now();
                if last_publish.is_none_or(|at| now - at > order::QUIET) {
                    for _ in 0..order::YIELDS {
                        tokio::task::yield_now().await;
                    }
                }
                last_publish = Some(now);
                self.shared.order.settled().await;
            }
            if !chunk.is_empty() && to_broker(upstream, &chunk).await.is_err() {
                return End::BrokerClosed;
            }
            drop(ticket);
            if let Some(end) = end {
                return end;
            }
            // Acknowledgements the guard owes the broker for what it
            // delivered lower or not at all go in between the client's.
            let read = loop {
                tokio::select! {
                    read = read_some(client, buf) => break read,
                    _ = async { ping.as_mut()?.tick().await; Some(()) }, if ping.is_some() => {
                        self.guard_pings.fetch_add(1, Ordering::Relaxed);
                        if to_broker(upstream, &PINGREQ).await.is_err() {
                            return End::BrokerClosed;
                        }
                    }
                    _ = owed.notified() => {
                        if let Some(acks) = self.take_owed() {
                            if to_broker(upstream, &acks).await.is_err() {
                                return End::BrokerClosed;
                            }
                        }
                    }
                }
            };
            match read {
                Ok(0) => return End::ClientClosed,
                Ok(_) => quick_ack(socket),
                Err(e) => {
                    debug!(error = %e, "MQTT client connection failed.");
                    return End::ClientFailed;
                }
            }
        }
    }
}

/// Hands rumqttd whole packets. The flush completes telling the router, when
/// its queue was full as the packets went in.
async fn to_broker(upstream: &mut EngineTx, packets: &[u8]) -> std::io::Result<()> {
    upstream.write_all(packets).await?;
    upstream.flush().await
}

/// Acknowledges what was just read at once instead of after the kernel's
/// delayed-ACK timer. A peer that leaves Nagle on (rumqttd on the sockets
/// it accepts; many MQTT clients) holds each small packet it writes while
/// another is unacknowledged until that ACK comes: about 40 ms on Linux per
/// request/response hop. Linux clears the flag as it goes, hence once per
/// read.
// TCP_QUICKACK has no safe std or tokio API: one setsockopt.
#[allow(unsafe_code)]
fn quick_ack(socket: RawFd) {
    #[cfg(target_os = "linux")]
    {
        let on: libc::c_int = 1;
        // SAFETY: a valid socket and a c_int option of the right size.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_QUICKACK,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = socket;
}

/// The broker-to-client direction: relays whole packets (translated for
/// an MQTT 3.1.1 client), rewrites the acknowledgements of SUBSCRIBEs and
/// UNSUBSCRIBEs the guard changed, and slips the guard's own packets in
/// between the broker's.
pub(super) async fn relay<W: AsyncWrite + Unpin>(
    mut state: Downstream<'_>,
    (upstream, store): (&mut EngineRx, &Store),
    client: &mut W,
    from_guard: flume::Receiver<ToClient>,
    relayed: &AtomicU64,
) -> End {
    // The link hands over a buffer of its own when this one is empty
    // (`DirectRx::read_into`), so an idle connection holds none.
    let mut buf = BytesMut::new();
    let mut guard_open = true;
    loop {
        let mut out = BytesMut::new();
        let mut closing = None;
        tokio::select! {
            biased;
            message = from_guard.recv_async(), if guard_open => match message.ok() {
                Some(m) => {
                    let mut close = state.take(m, &mut out);
                    while let (false, Ok(m)) = (close, from_guard.try_recv()) {
                        close = state.take(m, &mut out);
                    }
                    closing = close.then_some(End::Closing);
                }
                None => guard_open = false,
            },
            read = upstream.read_into(&mut buf) => {
                match read {
                    Ok(0) | Err(_) => return End::BrokerClosed,
                    Ok(_) => {}
                }
                // A SUBACK's plan is queued before its SUBSCRIBE is sent, so
                // it is in the channel by the time the SUBACK is read.
                let mut close = false;
                while let (false, Ok(m)) = (close, from_guard.try_recv()) {
                    close = state.take(m, &mut out);
                }
                if close {
                    closing = Some(End::Closing);
                } else {
                    let (chunk, end) = state.client_bound(&mut buf, out);
                    out = chunk;
                    closing = end;
                }
                if buf.is_empty() {
                    buf = BytesMut::new();
                }
            }
        }
        if std::mem::take(&mut state.sync_first) && store.barrier().durable().await.is_err() {
            // Never acknowledge what is not on disk: the client publishes
            // it again on its next connection.
            return End::BrokerClosed;
        }
        if !out.is_empty() {
            let written = async {
                client.write_all(&out).await?;
                client.flush().await
            };
            if written.await.is_err() {
                return End::ClientFailed;
            }
            relayed.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(end) = closing {
            return end;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::net::TcpListener;

    use super::*;

    /// An idle client costs its read buffer only while it sends (issue 32):
    /// with nothing left to read, the read waits holding none, and what
    /// comes later, and the client's end, still arrive.
    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_waits_without_a_read_buffer() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (mut rx, _tx) = ClientStream::split(server);
        let mut buf = BytesMut::new();

        client.write_all(b"hello").await.unwrap();
        assert_eq!(read_some(&mut rx, &mut buf).await.unwrap(), 5);
        assert_eq!(&buf[..], b"hello");
        buf.clear();

        let waiting = tokio::time::timeout(Duration::from_secs(1), read_some(&mut rx, &mut buf));
        assert!(waiting.await.is_err(), "nothing was sent");
        assert_eq!(buf.capacity(), 0, "no buffer held while waiting");

        client.write_all(b"more").await.unwrap();
        assert_eq!(read_some(&mut rx, &mut buf).await.unwrap(), 4);
        assert_eq!(&buf[..], b"more");
        buf.clear();
        drop(client);
        assert_eq!(read_some(&mut rx, &mut buf).await.unwrap(), 0, "the end");
    }
}
