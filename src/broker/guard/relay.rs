//! The I/O of one guarded connection: the two pumps that move bytes
//! between the client's socket and the broker's link, each asking its
//! direction's pure state ([`super::inspect`], [`super::downstream`]) what
//! to write.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::debug;

use super::bell::Bell;
use super::connection::{End, ToClient, PINGS_EVERY};
use super::downstream::Downstream;
use super::inspect::{Inspected, Inspector};
use super::order;
use super::packet::Version;
use crate::broker::engine::{EngineRx, EngineTx};
use crate::store::Store;

/// Packets the guard may owe a client before it stops reading from it.
const OUTBOX: usize = 64;
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
    /// The client certificate's identity (TLS with `mqtt.tls_client_ca`,
    /// the chain verified in the handshake); `None` without one.
    fn certified(&self) -> Option<crate::tls::identity::Certified> {
        None
    }
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
    /// Ready when a read would find something (or the end). A poll, not
    /// a future: tokio's `readable()` future is some 170 bytes, held in
    /// every idle connection's task (issue 32).
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
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
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The one reader of the socket: only its waker is kept.
        self.as_ref().poll_read_ready(cx)
    }
}

type Tls = tokio_rustls::server::TlsStream<TcpStream>;

impl ClientStream for Tls {
    type Rx = tokio::io::ReadHalf<Tls>;
    type Tx = tokio::io::WriteHalf<Tls>;
    fn split(self) -> (Self::Rx, Self::Tx) {
        tokio::io::split(self)
    }
    fn certified(&self) -> Option<crate::tls::identity::Certified> {
        crate::tls::identity::Certified::of_handshake(self.get_ref().1.peer_certificates())
    }
}

impl ClientRx for tokio::io::ReadHalf<Tls> {
    const UNBUFFERED_WAIT: bool = false;
    fn try_read(&mut self, _: &mut BytesMut) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
    fn poll_readable(&self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Reads what the client sent into `buf`. With nothing buffered, a plain
/// connection waits for data holding no read buffer: most MQTT clients
/// are idle most of the time, and their buffers were a quarter of what one
/// cost (issue 32). A busy one keeps its buffer while reads find data.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps each argument twice in its state, and every idle connection's task holds this one (issue 48)"
)]
fn read_some<'r, R: ClientRx>(
    client: &'r mut R,
    buf: &'r mut BytesMut,
) -> impl Future<Output = io::Result<usize>> + use<'r, R> {
    async move {
        if R::UNBUFFERED_WAIT && buf.is_empty() {
            loop {
                if buf.capacity() > 0 {
                    match client.try_read(buf) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        read => return read,
                    }
                    *buf = BytesMut::new();
                }
                // Holding the reader mutably keeps the wait `Send` for readers
                // that are not `Sync` (a WebSocket over an upgraded HTTP
                // connection).
                let reader = &mut *client;
                std::future::poll_fn(move |cx| reader.poll_readable(cx)).await?;
                grow(buf);
            }
        }
        grow(buf);
        client.read_buf(buf).await
    }
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

/// Packets the guard owes a client, from the client-to-broker pump to the
/// broker-to-client pump, at most [`OUTBOX`] at a time. Held in the
/// connection's task, its queue allocated only while something is in it:
/// a channel cost every idle client some 320 bytes (issue 32).
#[derive(Default)]
pub(super) struct Outbox {
    queue: Mutex<VecDeque<ToClient>>,
    /// Something was queued (one receiver: the broker-to-client pump).
    queued: Bell,
    /// Room was made.
    room: Notify,
}

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, VecDeque<ToClient>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `message`, waiting for room while the client does not read
    /// what the guard owes it (the guard stops reading from it meanwhile).
    async fn send(&self, mut message: ToClient) {
        loop {
            // Asked for before looking: room made in between still wakes it.
            let room = self.room.notified();
            match self.try_send(message) {
                Ok(()) => return,
                Err(full) => message = full,
            }
            room.await;
        }
    }

    /// Queues `messages` in order, waiting for room as [`Outbox::send`].
    async fn send_all(&self, messages: Vec<ToClient>) {
        for message in messages {
            self.send(message).await;
        }
    }

    fn try_send(&self, message: ToClient) -> Result<(), ToClient> {
        let mut queue = self.lock();
        if queue.len() >= OUTBOX {
            return Err(message);
        }
        queue.push_back(message);
        drop(queue);
        self.queued.ring();
        Ok(())
    }

    /// The next packet, if one is queued.
    fn try_recv(&self) -> Option<ToClient> {
        let mut queue = self.lock();
        let message = queue.pop_front()?;
        if queue.is_empty() {
            *queue = VecDeque::new();
        }
        drop(queue);
        self.room.notify_one();
        Some(message)
    }

    /// The next packet, once there is one.
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn keeps each argument twice in its state, and every idle connection's task holds this one (issue 48)"
    )]
    fn recv(&self) -> impl Future<Output = ToClient> + '_ {
        async move {
            loop {
                if let Some(message) = self.try_recv() {
                    return message;
                }
                // A packet queued since rang the bell.
                self.queued.rung().await;
            }
        }
    }
}

impl<'a> Inspector<'a> {
    /// The client-to-broker pump: reads the client, inspects, writes the
    /// broker what the inspection let through (and what the guard owes
    /// it), pings the broker for a client without keep-alive.
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn keeps each argument twice in its state, and every idle connection's task holds this one (issue 48)"
    )]
    pub(super) fn pump<'p, R: ClientRx>(
        &'p mut self,
        client: &'p mut R,
        socket: RawFd,
        upstream: &'p mut EngineTx,
        buf: &'p mut BytesMut,
    ) -> impl Future<Output = End> + use<'a, 'p, R> {
        async move {
            // Boxed: only a client without keep-alive has one.
            let mut ping = self.pings.then(|| {
                let every = std::time::Duration::from_secs(u64::from(PINGS_EVERY));
                let mut i = tokio::time::interval_at(Instant::now() + every, every);
                i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                Box::new(i)
            });
            let between = self.between;
            // Boxed: only a JWT's connection has one, and a timer would take
            // room in every connection's task.
            let mut expiry = self
                .session
                .expires_in()
                .map(|left| Box::pin(tokio::time::sleep(left)));
            loop {
                // Inspected and written before the next read: an idle
                // connection holds nothing of what came last (an empty chunk
                // held the CONNECT's buffer, issue 32).
                if let Some(end) = self.forward(upstream, buf).await {
                    return end;
                }
                // Acknowledgements the guard owes the broker for what it
                // delivered lower or not at all go in between the client's.
                let read = loop {
                    tokio::select! {
                        read = read_some(client, buf) => break read,
                        _ = async { expiry.as_mut()?.as_mut().await; Some(()) }, if expiry.is_some() => {
                            return Box::pin(self.token_expired()).await;
                        }
                        _ = async { ping.as_mut()?.tick().await; Some(()) }, if ping.is_some() => {
                            between.guard_pings.fetch_add(1, Ordering::Relaxed);
                            if to_broker(upstream, &PINGREQ).await.is_err() {
                                return End::BrokerClosed;
                            }
                        }
                        _ = between.owed.rung() => {
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
                        debug!(client_id = self.client_id, error = %e, "MQTT client connection failed.");
                        return End::ClientFailed;
                    }
                }
            }
        }
    }

    /// The principal's token passed its `exp`: the client is told (MQTT 5)
    /// and the connection closed; it may reconnect with a fresh token.
    async fn token_expired(&mut self) -> End {
        tracing::info!(
            client_id = self.client_id,
            principal = self.session.name(),
            "Closing an MQTT connection: its token expired."
        );
        let _ = self.close(super::reason::MAXIMUM_CONNECT_TIME);
        let pending = std::mem::take(&mut self.pending);
        self.between.outbox.send_all(pending).await;
        End::Closing
    }

    /// Inspects what `buf` holds and writes the broker what goes there
    /// (what the guard owes it first, in the same write), the client's
    /// answers from the guard before; how the connection ends, if it does.
    async fn forward(&mut self, upstream: &mut EngineTx, buf: &mut BytesMut) -> Option<End> {
        let (mut chunk, end) = self.inspect_all(buf);
        let Inspected {
            subscribing: mut ticket,
            publishing,
        } = std::mem::take(&mut self.order);
        if let Some(unsent) = self.queue_pending() {
            // A client that does not read holds up no publisher.
            ticket = None;
            // Boxed: rare, and its wait for room would take room in the
            // task.
            Box::pin(self.between.outbox.send_all(unsent)).await;
        }
        chunk = match self.take_owed() {
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
                // Nor does a slow prerequisite (the cluster's).
                ticket = None;
                p.prepare().await;
            }
        }
        if publishing && ticket.is_none() {
            self.after_subscribes().await;
        }
        if publishing && !self.shared.store.has_room() {
            // What the broker keeps of publications waits for the disk
            // here, on this connection, not on a worker thread (issue 43).
            // Boxed: rare, and its wait would take room in every task.
            ticket = None;
            Box::pin(self.shared.store.room()).await;
        }
        if !chunk.is_empty() && to_broker(upstream, &chunk).await.is_err() {
            return Some(End::BrokerClosed);
        }
        drop(ticket);
        end
    }

    /// Queues the packets the guard owes the client; those that found the
    /// outbox full, in order, to wait for room.
    fn queue_pending(&mut self) -> Option<Vec<ToClient>> {
        let mut pending = std::mem::take(&mut self.pending).into_iter();
        while let Some(message) = pending.next() {
            if let Err(message) = self.between.outbox.try_send(message) {
                let mut unsent = vec![message];
                unsent.extend(pending);
                return Some(unsent);
            }
        }
        None
    }

    /// Publications go after the SUBSCRIBEs read before them
    /// ([`order`]). One after a quiet spell lets the sockets that became
    /// readable with it be read first (a yield polls the I/O driver); a
    /// stream of them does not pay for it.
    async fn after_subscribes(&mut self) {
        let now = Instant::now();
        if self.last_publish.is_none_or(|at| now - at > order::QUIET) {
            for _ in 0..order::YIELDS {
                tokio::task::yield_now().await;
            }
        }
        self.last_publish = Some(now);
        if self.shared.order.busy() {
            // Boxed: rare, and its timer would take room in every task.
            Box::pin(self.shared.order.settled()).await;
        }
    }
}

/// What woke the broker-to-client pump.
enum Woken {
    /// A packet of the guard's own for the client.
    Outbox(ToClient),
    /// What reading the broker gave.
    Broker(io::Result<usize>),
}

/// Hands rumqttd whole packets. The flush completes telling the router, when
/// its queue was full as the packets went in.
async fn to_broker(upstream: &mut EngineTx, packets: &[u8]) -> std::io::Result<()> {
    upstream.write_all(packets).await?;
    upstream.flush().await
}

/// Reads what the broker sent. An MQTT 3.1.1 client's publications come
/// unwritten: the guard writes them in 3.1.1 itself (issue 32: writing them
/// as MQTT 5 and reading that back was most of what a delivery cost the
/// guard).
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps each argument twice in its state, and every idle connection's task holds this one (issue 48)"
)]
fn read_broker<'r>(
    upstream: &'r mut EngineRx,
    buf: &'r mut BytesMut,
    unwritten: &'r mut Vec<rumqttd::Publication>,
    version: Version,
) -> impl Future<Output = io::Result<usize>> + use<'r> {
    async move {
        match version {
            Version::V4 => upstream.read_split(buf, unwritten).await,
            Version::V5 => upstream.read_into(buf).await,
        }
    }
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

impl<'a> Downstream<'a> {
    /// The broker-to-client pump: relays whole packets (translated for an
    /// MQTT 3.1.1 client), rewrites the acknowledgements of SUBSCRIBEs and
    /// UNSUBSCRIBEs the guard changed, and slips the guard's own packets in
    /// between the broker's.
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn keeps each argument twice in its state, and every idle connection's task holds this one (issue 48)"
    )]
    pub(super) fn relay<'p, W: AsyncWrite + Unpin>(
        &'p mut self,
        (upstream, store): (&'p mut EngineRx, &'p Store),
        client: &'p mut W,
        relayed: &'p AtomicU64,
    ) -> impl Future<Output = End> + use<'a, 'p, W> {
        async move {
            let outbox = &self.between.outbox;
            // The link hands over a buffer of its own when this one is empty
            // (`DirectRx::read_into`), so an idle connection holds none.
            let mut buf = BytesMut::new();
            let mut unwritten = Vec::new();
            loop {
                let woken = tokio::select! {
                    biased;
                    m = outbox.recv() => Woken::Outbox(m),
                    read = read_broker(upstream, &mut buf, &mut unwritten, self.version) => {
                        Woken::Broker(read)
                    }
                };
                let (mut out, mut closing) = match self.gather(woken, &mut buf, &mut unwritten) {
                    Ok(gathered) => gathered,
                    Err(end) => return end,
                };
                // Boxed: only a durable store waits, and the wait would take
                // room in every connection's task.
                if std::mem::take(&mut self.sync_first) {
                    let (checked, refused) = Box::pin(self.stored(store, out)).await;
                    out = checked;
                    if refused {
                        // Never acknowledge what is not on disk: the client
                        // publishes it again on its next connection.
                        closing = Some(End::BrokerClosed);
                    }
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
    }
}

impl Downstream<'_> {
    /// What goes to the client for what woke the pump, and whether the
    /// connection closes after; `Err` when the broker's side has closed.
    /// Its buffer is made here, after the wait: an idle connection's task
    /// holds no room for it.
    fn gather(
        &mut self,
        woken: Woken,
        buf: &mut BytesMut,
        unwritten: &mut Vec<rumqttd::Publication>,
    ) -> Result<(BytesMut, Option<End>), End> {
        let outbox = &self.between.outbox;
        let mut out = BytesMut::new();
        let closing;
        match woken {
            Woken::Outbox(m) => {
                let mut close = self.take(m, &mut out);
                while let (false, Some(m)) = (close, outbox.try_recv()) {
                    close = self.take(m, &mut out);
                }
                closing = close.then_some(End::Closing);
            }
            Woken::Broker(read) => {
                match read {
                    Ok(0) | Err(_) => return Err(End::BrokerClosed),
                    Ok(_) => {}
                }
                // A SUBACK's plan is queued before its SUBSCRIBE is sent, so
                // it is in the outbox by the time the SUBACK is read.
                let mut close = false;
                while let (false, Some(m)) = (close, outbox.try_recv()) {
                    close = self.take(m, &mut out);
                }
                if close {
                    closing = Some(End::Closing);
                } else {
                    let (chunk, end) = self.client_bound(buf, unwritten, out);
                    out = chunk;
                    closing = end;
                }
                if buf.is_empty() {
                    *buf = BytesMut::new();
                }
                // Its publications go with it (what they hold is the
                // router's log's).
                *unwritten = Vec::new();
            }
        }
        Ok((out, closing))
    }

    /// Waits until the store has decided the changes the acknowledgements
    /// in `out` cover, and refuses those whose changes failed
    /// ([`super::stored`]); true when the connection must close after
    /// what is returned (a 3.1.1 client's PUBACK cannot refuse).
    async fn stored(&mut self, store: &Store, out: BytesMut) -> (BytesMut, bool) {
        let marks: Vec<(u16, u64)> = match self.acked.is_empty() {
            true => Vec::new(),
            false => {
                let mut held = self.between.marks();
                self.acked
                    .drain(..)
                    .filter_map(|pkid| Some((pkid, held.take(pkid)?)))
                    .collect()
            }
        };
        if self.acked.capacity() > 1024 {
            self.acked = Vec::new();
        }
        // Without a mark (an UNSUBACK, a PUBCOMP): waits for what is
        // queued, refuses nothing.
        let since = marks.iter().map(|(_, m)| *m).min();
        let settled = store
            .barrier_since(since.unwrap_or(store.mark()))
            .settle()
            .await;
        let Some(since) = since else {
            return (out, false);
        };
        if settled.failed_since(since).is_none() {
            return (out, false);
        }
        let failed = |pkid: u16| {
            let (_, mark) = marks.iter().find(|(p, _)| *p == pkid)?;
            settled.failed_since(*mark)
        };
        // Counted, not logged: the store logs once as it fills and
        // empties, and a flood of refusals must not fill the log.
        store.note_refused_acknowledgement();
        match super::stored::refuse(self.version, &out, failed) {
            Ok(rewritten) => (rewritten, false),
            Err(before) => (before, true),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::net::TcpListener;

    use super::*;

    /// The guard's outbox holds room only while it holds packets (issue
    /// 32), and a full one makes the client-to-broker pump wait until the
    /// other pump has taken one.
    #[tokio::test(start_paused = true)]
    async fn the_outbox_holds_room_only_while_it_holds_packets() {
        let outbox = Outbox::default();
        assert_eq!(outbox.lock().capacity(), 0);
        for _ in 0..OUTBOX {
            outbox.send(ToClient::Release).await;
        }
        let mut full = std::pin::pin!(outbox.send(ToClient::Release));
        let waited = tokio::time::timeout(Duration::from_secs(1), &mut full);
        assert!(waited.await.is_err(), "no room");
        assert!(matches!(outbox.recv().await, ToClient::Release));
        let sent = tokio::time::timeout(Duration::from_secs(1), &mut full);
        sent.await.expect("room was made");
        let mut taken = 0;
        while outbox.try_recv().is_some() {
            taken += 1;
        }
        assert_eq!(taken, OUTBOX);
        assert_eq!(outbox.lock().capacity(), 0, "its room given back");
    }

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
