//! One client connection through the guard: the CONNECT handshake and the
//! session opened in rumqttd, then two pumps (client to broker, broker to
//! client; [`super::live`], [`super::relay`]) until either side closes or
//! the sidecar shuts down, then the session's fate.
//!
//! The pumps run concurrently so that neither side can stall the other:
//! a broker blocked writing to us never stops us reading from it. Packets
//! the guard itself owes the client (acks of denied publications, SUBACKs)
//! go through a bounded outbox to the broker-to-client pump, which writes
//! only whole packets and so never splits one of the broker's.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use tracing::{debug, info, warn, Instrument, Span};

use super::admission;
use super::delivery::Delivery;
use super::handshake::{self, Offer};
use super::live::Live;
use super::packet;
use super::reason::*;
use super::relay::ClientStream;
use super::sessions::{AfterClose, Expiry, Opened, Refused};
use super::upstream;
use super::{GuardEvent, GuardLimit, Session, Shared};
use crate::broker::engine::EngineStream;

/// How long a final packet (DISCONNECT, refused CONNACK) may take to go out.
pub(super) const FAREWELL: Duration = Duration::from_secs(1);
/// How long a new connection of a client ID waits for the connection
/// holding it to finish reading what its client sent before (see
/// [`super::live`]).
const HANDOVER_WAIT: Duration = Duration::from_millis(200);
/// rumqttd refuses keep-alive 0 (legal MQTT: no keep-alive). The guard
/// gives the broker this keep-alive instead and pings it itself, every half
/// of it, for as long as the client stays.
const UPSTREAM_KEEP_ALIVE: u16 = 300;
pub(super) const PINGS_EVERY: u16 = UPSTREAM_KEEP_ALIVE / 2;

/// How a connection ended, which decides how the other side is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// The client closed its side.
    ClientClosed,
    /// The client sent DISCONNECT, which went to the broker.
    ClientDisconnected,
    /// The client's connection failed (reset, timeout).
    ClientFailed,
    BrokerClosed,
    /// The guard closes the connection; any last word is queued.
    Closing,
    Shutdown,
    /// A new connection of the client ID took the session over.
    TakenOver,
}

/// What the broker-to-client pump is asked to do besides relaying.
pub(super) enum ToClient {
    Packet(Bytes),
    /// The broker's SUBACK for `pkid` covers only the filters forwarded;
    /// the guard's codes go where `plan` has them.
    SubAck {
        pkid: u16,
        plan: Vec<Option<u8>>,
    },
    /// The broker answers an UNSUBSCRIBE with one UNSUBACK per filter it
    /// removed: `forwarded` of them for `pkid` make one UNSUBACK with
    /// `codes`.
    UnsubAck {
        pkid: u16,
        forwarded: usize,
        codes: Vec<u8>,
    },
    /// The broker's SUBACK for `pkid` answers the guard's own SUBSCRIBE:
    /// the client never sees it.
    SwallowSubAck(u16),
    /// The client acknowledged publications: send those its Receive
    /// Maximum held back.
    Release,
    /// Send the packet, if any, then close.
    Close(Option<Bytes>),
}

/// Logs and counts it, naming the peer (before the CONNECT is read) or the
/// client ID (after).
pub(super) fn packet_too_large(
    shared: &Shared,
    size: usize,
    (peer, client_id): (Option<SocketAddr>, Option<&str>),
) {
    info!(
        peer = peer.map(tracing::field::display),
        client_id,
        size,
        limit = shared.limits.max_packet_size,
        "Closed an MQTT connection that sent a packet larger than mqtt.max_payload_size allows."
    );
    shared
        .policy
        .observe(GuardEvent::Limit(GuardLimit::PacketSize));
}

/// Sends a last packet and closes, without waiting long on a client that
/// does not read.
pub(super) async fn farewell<W: AsyncWrite + Unpin>(writer: &mut W, last: &[u8]) {
    let _ = tokio::time::timeout(FAREWELL, async {
        writer.write_all(last).await?;
        writer.shutdown().await
    })
    .await;
}

/// The delivery state, even after a panic in the other pump (each of its
/// changes leaves it usable).
pub(super) fn lock(delivery: &Mutex<Delivery>) -> std::sync::MutexGuard<'_, Delivery> {
    delivery.lock().unwrap_or_else(|e| e.into_inner())
}

/// Unix time in milliseconds, the clock Message Expiry is kept in (and
/// the kept sessions' records).
pub(super) use crate::broker::kept::now_ms;

/// Ends a session that nobody resumed in time (see [`super::sessions`]).
pub(super) async fn expire(
    shared: Arc<Shared>,
    client_id: String,
    generation: u64,
    after: Duration,
) {
    tokio::select! {
        _ = shared.shutdown.cancelled() => return,
        _ = tokio::time::sleep(after) => {}
    }
    let Some(gate) = shared.sessions.existing_gate(&client_id) else {
        return;
    };
    let _held = gate.lock().await;
    if shared.sessions.expire(&client_id, generation) {
        if let Err(e) = upstream::wipe(&shared.upstream, &client_id).await {
            warn!(error = %e, "Could not end an expired MQTT session in the embedded broker.");
        }
    }
}

pub(super) struct Connection<S> {
    client: S,
    /// The client's TCP socket under `client` (which may be TLS).
    socket: RawFd,
    /// The client's address, whose failed CONNECTs are counted together.
    peer: SocketAddr,
    shared: Arc<Shared>,
    /// When a complete CONNECT must have arrived.
    deadline: Instant,
    /// The connection's log span (peer, client ID, principal), for its
    /// admission; none where the task around it has one (TLS, WebSocket).
    span: Span,
}

impl<S: ClientStream> Connection<S> {
    pub(super) fn new(
        client: S,
        socket: RawFd,
        peer: SocketAddr,
        shared: Arc<Shared>,
        deadline: Instant,
        span: Span,
    ) -> Connection<S> {
        Connection {
            client,
            socket,
            peer,
            shared,
            deadline,
            span,
        }
    }

    /// The connection's task: boxed, so that the task holds a pointer
    /// where the connection's first state was (issue 32).
    pub(super) async fn run(self: Box<Self>) {
        // The steps before and after the pumps are boxed too: a task's
        // future is as large as its largest state, and every idle
        // connection's task would hold room for them.
        let Some((mut live, session, logged)) = Box::pin(self.admitted()).await else {
            return;
        };
        let ended = live.serve(session).await;
        Box::pin(live.finish(ended, logged)).await;
    }

    /// [`Connection::establish`] in the connection's log span, and whether
    /// the span was the connection's own (not its task's). The span covers
    /// admission and the end, not the time between: with the log layer's
    /// copy of its fields it cost every idle client some 450 bytes (issue
    /// 48). What a connection logs in between names its client ID and
    /// principal itself.
    async fn admitted(mut self: Box<Self>) -> Option<(Live<S>, Box<dyn Session>, bool)> {
        let span = std::mem::replace(&mut self.span, Span::none());
        let own = !span.is_none();
        let (live, session) = self.establish().instrument(span).await?;
        Some((live, session, own))
    }

    /// Admission, then the session opened in rumqttd: the connection
    /// ready for its pumps, or `None` (the client was refused and has its
    /// CONNACK, or has gone).
    async fn establish(self: Box<Self>) -> Option<(Live<S>, Box<dyn Session>)> {
        let Connection {
            client,
            socket,
            peer,
            shared,
            deadline,
            span: _,
        } = *self;
        let certified = client.certified();
        let (mut client_rx, mut client_tx) = client.split();
        let mut inbound = BytesMut::new();
        let (rx, tx) = (&mut client_rx, &mut client_tx);
        let certificate = certified.as_ref().map(|c| c.name());
        let at = (peer, socket, certificate);
        // Boxed while it runs: in a burst every connection then waits for
        // the router (below) at once, and would hold room for it (issue 48).
        let admitted = Box::pin(admission::admit(
            &shared,
            at,
            deadline,
            rx,
            tx,
            &mut inbound,
        ))
        .await?;
        let admission::Admitted {
            header,
            connect,
            permit,
            session,
            asked,
        } = admitted;
        let version = connect.version;
        let limit = shared.limits.max_keep_alive;
        let (held_to, offered) = handshake::keep_alive(version, connect.keep_alive, limit);
        let opened = open_session(&shared, &connect, &asked, session.name(), held_to, tx).await;
        let Some((upstream, opened)) = opened else {
            shared.keeps.wills.release(socket);
            return None;
        };
        let client_id = connect.client_id.to_owned();
        inbound.advance(header.size());
        let (up_rx, up_tx) = upstream.into_split();
        let live = Live {
            client_rx,
            client_tx,
            socket,
            inbound,
            permit,
            version,
            client_id,
            up_rx,
            up_tx,
            opened,
            asked,
            pings: held_to == 0,
            offer: offer(&shared, offered),
            shared,
        };
        Some((live, session))
    }
}

/// The steps between admission and the pumps: the session's owner and
/// quota checked, a connection holding the client ID handed over, the
/// session opened in rumqttd with keep-alive `held_to` (0: none, the guard
/// pings). `None` when the client was refused (it has its CONNACK).
async fn open_session<W: AsyncWrite + Unpin>(
    shared: &Shared,
    connect: &packet::Connect,
    asked: &handshake::Asked,
    owner: &str,
    held_to: u16,
    client_tx: &mut W,
) -> Option<(EngineStream, Opened)> {
    let (version, client_id) = (connect.version, connect.client_id.as_str());
    // Another principal's session is not this one's to take over.
    let keeps = !(connect.clean && asked.expiry.0 == 0);
    if let Err(refused) = shared.sessions.check(client_id, owner, keeps) {
        refuse_session(shared, version, refused, client_tx).await;
        return None;
    }
    // A connection still holding the client ID first reads what its
    // client sent before this CONNECT (see `sessions::Handover`).
    if let Some(old) = shared.sessions.holder(client_id) {
        old.ask();
        let _ = tokio::time::timeout(HANDOVER_WAIT, old.finished()).await;
    }
    let keep_alive = match held_to {
        0 => UPSTREAM_KEEP_ALIVE,
        k => k,
    };
    match open_upstream(shared, connect, asked, keep_alive, client_id, owner).await {
        Ok(opened) => Some(opened),
        Err(Unopened::Refused(refused)) => {
            refuse_session(shared, version, refused, client_tx).await;
            None
        }
        Err(Unopened::Unreachable) => {
            let ack = admission::refusal(version, V4_SERVER_UNAVAILABLE, SERVER_UNAVAILABLE);
            farewell(client_tx, &ack).await;
            None
        }
    }
}

/// What the CONNACK offers the client.
fn offer(shared: &Shared, server_keep_alive: Option<u16>) -> Offer {
    Offer {
        receive_max: shared.limits.receive_maximum,
        max_packet: u32::try_from(shared.limits.max_packet_size).unwrap_or(u32::MAX),
        server_keep_alive,
    }
}

/// The session's fate once its connection ended: kept (its expiry
/// recorded), handed to the connection that took it over, or wiped when
/// it expires.
pub(super) fn session_ends(
    shared: &Arc<Shared>,
    client_id: &str,
    opened: &Opened,
    closed: Option<AfterClose>,
    expiry: Expiry,
    end: End,
) {
    let after_close = match (closed, end) {
        (Some(after), _) => after,
        // The session lives on with the connection that took it over.
        (None, End::TakenOver) => AfterClose::Nothing,
        (None, _) => {
            shared
                .sessions
                .close_kept(client_id, opened.generation, expiry, |expiry, owner| {
                    let ended = Some(now_ms());
                    let _ticket = shared.records.record(client_id, expiry.0, ended, owner);
                })
        }
    };
    opened.handover.finish();
    if let AfterClose::Wipe { generation, after } = after_close {
        tokio::spawn(expire(
            shared.clone(),
            client_id.to_owned(),
            generation,
            after,
        ));
    }
}

/// Why a session could not be opened.
enum Unopened {
    Refused(Refused),
    /// rumqttd cannot be reached (the session is closed again).
    Unreachable,
}

/// Refuses a CONNECT whose session is another principal's, or one kept
/// session too many; counted and logged (at debug: a flood must not fill
/// the log).
async fn refuse_session<W: AsyncWrite + Unpin>(
    shared: &Shared,
    version: packet::Version,
    refused: Refused,
    client_tx: &mut W,
) {
    debug!(reason = %refused, "Refused an MQTT connection.");
    let ack = match refused {
        Refused::OtherOwner => {
            shared.policy.observe(GuardEvent::SessionDenied);
            admission::refusal(version, V4_IDENTIFIER_REJECTED, CLIENT_IDENTIFIER_NOT_VALID)
        }
        Refused::TooManyKept | Refused::TooManyKeptForPrincipal => {
            shared
                .policy
                .observe(GuardEvent::Limit(GuardLimit::KeptSessions));
            admission::refusal(version, V4_SERVER_UNAVAILABLE, QUOTA_EXCEEDED)
        }
    };
    farewell(client_tx, &ack).await;
}

/// Opens `owner`'s session in rumqttd: a CONNECT on a new link, after
/// wiping the session there first where the guard's session state says so.
async fn open_upstream(
    shared: &Shared,
    connect: &packet::Connect,
    asked: &handshake::Asked,
    keep_alive: u16,
    client_id: &str,
    owner: &str,
) -> Result<(EngineStream, Opened), Unopened> {
    // The session's gate stays held until rumqttd has the CONNECT, so
    // that no wipe of this client ID overtakes it.
    let gate = shared.sessions.gate(client_id);
    let _held = gate.lock().await;
    let opened = shared
        .sessions
        .open(client_id, connect.clean, asked.expiry, owner)
        .map_err(Unopened::Refused)?;
    if opened.wipe_first {
        // Boxed: rare, and as large as opening a link and talking on it.
        if let Err(e) = Box::pin(upstream::wipe(&shared.upstream, client_id)).await {
            warn!(client_id, error = %e, "Could not end an MQTT session in the embedded broker.");
        }
    }
    let opening = match handshake::upstream_connect(connect, opened.clean_upstream, keep_alive) {
        Ok(connect_packet) => shared.upstream.open(&connect_packet).await,
        Err(e) => Err(std::io::Error::other(e)),
    };
    match opening {
        Ok(stream) => {
            if !opened.clean_upstream && !client_id.is_empty() {
                let _ticket = shared
                    .records
                    .record(client_id, asked.expiry.0, None, owner);
            }
            Ok((stream, opened))
        }
        Err(e) => {
            warn!(client_id, error = %e, "Cannot reach the embedded MQTT broker.");
            shared
                .sessions
                .close(client_id, opened.generation, Expiry(0));
            Err(Unopened::Unreachable)
        }
    }
}

/// Closes the client's side as the way the connection ended asks.
pub(super) async fn close_client<R, W>(end: End, client_rx: &mut R, client_tx: &mut W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    match end {
        // The client has gone: rumqttd sees its link close (after the
        // DISCONNECT, if the client sent one, and publishes the last will
        // if not).
        End::ClientFailed | End::ClientClosed | End::ClientDisconnected => {}
        End::BrokerClosed | End::Shutdown | End::TakenOver => {
            let _ = tokio::time::timeout(FAREWELL, client_tx.shutdown()).await;
        }
        // The guard ended it, often with a DISCONNECT saying why. A client
        // still sending (acknowledgements of what it read before) would get
        // a reset for them, and a reset can destroy the DISCONNECT before
        // the client reads it: read and discard until the client closes
        // too, for a moment.
        End::Closing => {
            let _ = tokio::time::timeout(FAREWELL, async {
                client_tx.shutdown().await?;
                let mut sink = [0u8; 4096];
                while client_rx.read(&mut sink).await? > 0 {}
                std::io::Result::Ok(())
            })
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use tokio::net::TcpStream;

    use super::*;

    fn future_size<A, F: Future>(_: impl FnOnce(A) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every idle MQTT client's task is this future: its size is what
    /// each costs before any buffer or state (issue 32: 2 936 bytes in a
    /// release build before, about 2 150 after; the task with tokio's
    /// header 3 328 and 2 304 by `heaptrack`). Tokio aligns a task to 128
    /// bytes and adds 104 (header, trailer, scheduler, ID): a future of at
    /// most 1 560 bytes makes a task of 1 664 (issue 48: 2 432 with the log
    /// span around it before, a task of 2 560; the rarely used maps became
    /// `Sparse`, the pumps' futures stopped holding their arguments twice
    /// and buffers across their waits: 1 920; its waits became bells
    /// holding a reference where a `Notify`'s held a 64-byte waiter, and
    /// shutdown came through the handover: 1 664).
    #[test]
    fn a_connection_task_stays_small() {
        let plain = future_size(Connection::<TcpStream>::run);
        eprintln!("Connection::run: {plain} bytes");
        assert!(plain <= 1_560, "{plain} bytes");
    }

    /// Every connection of a burst of CONNECTs waits for the router at
    /// once, holding this future (issue 48: 3 952 bytes before, when the
    /// admission's state was inline and rumqttd's link kept the parsed
    /// CONNECT across its wait; 2 264 after, of which the link's 528).
    #[test]
    fn an_opening_connection_stays_small() {
        let opening = future_size(Connection::<TcpStream>::establish);
        eprintln!("Connection::establish: {opening} bytes");
        assert!(opening <= 2_400, "{opening} bytes");
        let link = future_size(|(direct, connect): (rumqttd::Direct, Vec<u8>)| async move {
            let _ = direct.open(&connect).await;
        });
        eprintln!("rumqttd::Direct::open: {link} bytes");
        assert!(link <= 600, "{link} bytes");
    }
}
