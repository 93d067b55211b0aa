//! One client connection through the guard: the CONNECT handshake, then two
//! pumps (client to broker, broker to client) until either side closes or
//! the sidecar shuts down.
//!
//! The pumps run concurrently so that neither side can stall the other:
//! a broker blocked writing to us never stops us reading from it. Packets
//! the guard itself owes the client (acks of denied publications, SUBACKs)
//! go through a bounded channel to the broker-to-client pump, which writes
//! only whole packets and so never splits one of the broker's.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use std::os::fd::{AsRawFd, RawFd};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::io::{ReadHalf, WriteHalf};

use crate::broker::engine::{Engine, EngineStream};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::delivery::{Delivery, Undelivered};
use super::handshake::{self, Offer};
use super::packet::{self, Header, PacketError, Version};
use super::publication;
use super::sessions::{AfterClose, Expiry, Filters};
use super::upstream;
use super::v4::{self, Down};
use super::validate::{self, Violation};
use super::{GuardEvent, GuardLimit, Refusal, Session, Shared};

/// Read buffers grow by this much; whole packets larger than it grow them
/// to their size.
const READ_CHUNK: usize = 16 * 1024;
/// A read buffer's first allocation: most MQTT clients are idle, and their
/// two buffers (client and broker side) were most of what one cost
/// (issue 16); a busy connection reaches READ_CHUNK on its next growth.
const FIRST_CHUNK: usize = 2 * 1024;
/// Below this much free room a read buffer grows before the next read.
const MIN_SPARE: usize = 256;
/// Packets the guard may owe a client before it stops reading from it.
const OUTBOX: usize = 64;
/// How long a final packet (DISCONNECT, refused CONNACK) may take to go out.
const FAREWELL: Duration = Duration::from_secs(1);
/// At shutdown, what the broker already sent (replies the sidecar published
/// while stopping) still goes out: the connection closes once the broker
/// has been quiet this long, or after `DRAIN` at the latest.
const QUIET: Duration = Duration::from_millis(200);
/// How long a connection asked to hand its client ID over keeps reading
/// what its client sent before (a DISCONNECT already in the socket takes
/// microseconds), and how long the new connection waits for that.
const HANDOVER_DRAIN: Duration = Duration::from_millis(20);
const HANDOVER_WAIT: Duration = Duration::from_millis(200);
const DRAIN: Duration = Duration::from_secs(2);
/// rumqttd refuses keep-alive 0 (legal MQTT: no keep-alive). The guard
/// gives the broker this keep-alive instead and pings it itself, every half
/// of it, for as long as the client stays.
const UPSTREAM_KEEP_ALIVE: u16 = 300;
const PINGREQ: [u8; 2] = [0xC0, 0];

// MQTT 3.1.1 CONNACK return codes.
const V4_UNACCEPTABLE_PROTOCOL: u8 = 1;
const V4_SERVER_UNAVAILABLE: u8 = 3;
const V4_BAD_CREDENTIALS: u8 = 4;
const V4_NOT_AUTHORIZED: u8 = 5;
/// MQTT 3.1.1 SUBACK failure.
const V4_FAILURE: u8 = 0x80;

// MQTT 5 reason codes.
const UNSPECIFIED_ERROR: u8 = 0x80;
const MALFORMED_PACKET: u8 = 0x81;
const PROTOCOL_ERROR: u8 = 0x82;
const BAD_CREDENTIALS: u8 = 0x86;
const NOT_AUTHORIZED: u8 = 0x87;
const SERVER_UNAVAILABLE: u8 = 0x88;
const NO_SUBSCRIPTION_EXISTED: u8 = 0x11;
const TOPIC_FILTER_INVALID: u8 = 0x8F;
const PACKET_TOO_LARGE: u8 = 0x95;
const QUOTA_EXCEEDED: u8 = 0x97;
const RECEIVE_MAXIMUM_EXCEEDED: u8 = 0x93;
const TOPIC_ALIAS_INVALID: u8 = 0x94;
const PAYLOAD_FORMAT_INVALID: u8 = 0x99;

#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("connection closed")]
    Closed,
    #[error("the first packet is not CONNECT")]
    NotConnect,
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Packet(#[from] PacketError),
}

/// How a connection ended, which decides how the other side is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
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
enum ToClient {
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

/// What becomes of one packet from the client.
enum Verdict {
    Forward,
    Replace(Bytes),
    Drop,
    Close,
}

pub(super) fn handshake_timed_out(shared: &Shared) {
    info!(
        timeout_ms = shared.limits.handshake_timeout.as_millis() as u64,
        "Closed an MQTT connection that sent no CONNECT in time (mqtt.connection_timeout_ms)."
    );
    shared
        .policy
        .observe(GuardEvent::Limit(GuardLimit::HandshakeTimeout));
}

fn packet_too_large(shared: &Shared, size: usize) {
    info!(
        size,
        limit = shared.limits.max_packet_size,
        "Closed an MQTT connection that sent a packet larger than mqtt.max_payload_size allows."
    );
    shared
        .policy
        .observe(GuardEvent::Limit(GuardLimit::PacketSize));
}

fn grow(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < MIN_SPARE {
        let chunk = if buf.capacity() == 0 {
            FIRST_CHUNK
        } else {
            READ_CHUNK
        };
        buf.reserve(chunk);
    }
}

/// Reads until `buf` starts with a whole CONNECT; anything else fails at
/// its first byte, before more is buffered.
async fn read_connect<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    limit: usize,
) -> Result<Header, ReadError> {
    loop {
        if buf.first().is_some_and(|b| b >> 4 != packet::CONNECT) {
            return Err(ReadError::NotConnect);
        }
        if let Some(header) = packet::frame(buf, limit)? {
            return Ok(header);
        }
        grow(buf);
        if reader.read_buf(buf).await? == 0 {
            return Err(ReadError::Closed);
        }
    }
}

/// Sends a last packet and closes, without waiting long on a client that
/// does not read.
async fn farewell<W: AsyncWrite + Unpin>(writer: &mut W, last: &[u8]) {
    let _ = tokio::time::timeout(FAREWELL, async {
        writer.write_all(last).await?;
        writer.shutdown().await
    })
    .await;
}

/// The delivery state, even after a panic in the other pump (each of its
/// changes leaves it usable).
fn lock(delivery: &Mutex<Delivery>) -> std::sync::MutexGuard<'_, Delivery> {
    delivery.lock().unwrap_or_else(|e| e.into_inner())
}

/// Unix time in milliseconds, the clock Message Expiry is kept in.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A connection to rumqttd with the client's CONNECT on its way.
async fn dial(engine: &Engine, connect: &[u8]) -> std::io::Result<EngineStream> {
    let mut stream = engine.connect()?;
    stream.write_all(connect).await?;
    Ok(stream)
}

/// Ends a session that nobody resumed in time (see [`super::sessions`]).
async fn expire(shared: Arc<Shared>, client_id: String, generation: u64, after: Duration) {
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
    shared: Arc<Shared>,
    /// When a complete CONNECT must have arrived.
    deadline: Instant,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection<S> {
    pub(super) fn new(
        client: S,
        socket: RawFd,
        shared: Arc<Shared>,
        deadline: Instant,
    ) -> Connection<S> {
        Connection {
            client,
            socket,
            shared,
            deadline,
        }
    }

    pub(super) async fn run(self) {
        let Connection {
            client,
            socket,
            shared,
            deadline,
        } = self;
        let (mut client_rx, mut client_tx) = tokio::io::split(client);
        let mut inbound = BytesMut::new();
        let limit = shared.limits.max_packet_size;

        let first = tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            read = tokio::time::timeout_at(deadline, read_connect(&mut client_rx, &mut inbound, limit)) => read,
        };
        let header = match first {
            Ok(Ok(h)) => h,
            Ok(Err(ReadError::NotConnect)) => {
                return debug!("Closed an MQTT connection whose first packet was not CONNECT.")
            }
            Ok(Err(ReadError::Packet(PacketError::TooLarge { size, .. }))) => {
                return packet_too_large(&shared, size)
            }
            Ok(Err(e)) => return debug!(error = %e, "MQTT client left before CONNECT."),
            Err(_) => return handshake_timed_out(&shared),
        };
        if header.first != 0x10 {
            return debug!("Closed an MQTT connection whose CONNECT has reserved flags set.");
        }
        let connect = match packet::connect(&inbound[header.header_len..header.size()]) {
            Ok(c) => c,
            Err(PacketError::Protocol { name, level }) => {
                debug!(protocol = %name, level, "Refused an MQTT connection with an unsupported protocol.");
                let ack = packet::connack(Version::V4, V4_UNACCEPTABLE_PROTOCOL);
                return farewell(&mut client_tx, &ack).await;
            }
            Err(e) => {
                return debug!(error = %e, "Closed an MQTT connection with a malformed CONNECT.")
            }
        };
        let version = connect.version;
        let span = tracing::Span::current();
        span.record("client_id", connect.client_id);
        let refuse = |v4: u8, v5: u8| match version {
            Version::V4 => packet::connack(version, v4),
            Version::V5 => packet::connack(version, v5),
        };

        let Ok(permit) = shared.connections.clone().try_acquire_owned() else {
            info!(
                limit = shared.limits.max_connections,
                "Refused an MQTT connection past mqtt.max_connections."
            );
            shared
                .policy
                .observe(GuardEvent::Limit(GuardLimit::Connections));
            let ack = refuse(V4_SERVER_UNAVAILABLE, QUOTA_EXCEEDED);
            return farewell(&mut client_tx, &ack).await;
        };
        let session = match shared.policy.connect(
            connect.client_id,
            connect.username,
            connect.password,
        ) {
            Ok(session) => session,
            Err(refusal) => {
                info!(username = connect.username, reason = ?refusal, "Refused an MQTT connection.");
                shared.policy.observe(GuardEvent::Refused(refusal));
                let ack = match refusal {
                    Refusal::BadCredentials => refuse(V4_BAD_CREDENTIALS, BAD_CREDENTIALS),
                    Refusal::NotAuthorized => refuse(V4_NOT_AUTHORIZED, NOT_AUTHORIZED),
                };
                return farewell(&mut client_tx, &ack).await;
            }
        };
        span.record("principal", session.name());
        // A last will is a publication the broker makes on the client's
        // behalf; unchecked, it would bypass the publish rights.
        if let Some(will) = &connect.will {
            if !session.may_publish(will.topic) {
                info!(
                    principal = session.name(),
                    topic = will.topic,
                    "Refused an MQTT connection whose last will it may not publish."
                );
                shared
                    .policy
                    .observe(GuardEvent::Refused(Refusal::NotAuthorized));
                let ack = refuse(V4_NOT_AUTHORIZED, NOT_AUTHORIZED);
                return farewell(&mut client_tx, &ack).await;
            }
        }
        let asked = match handshake::asked(&connect) {
            Ok(a) => a,
            Err(reason) => {
                debug!(
                    "Refused an MQTT 5 CONNECT with a Receive Maximum or Maximum Packet Size of 0."
                );
                let ack = refuse(V4_UNACCEPTABLE_PROTOCOL, reason);
                return farewell(&mut client_tx, &ack).await;
            }
        };

        let client_id = connect.client_id.to_owned();
        let pings = (connect.keep_alive == 0)
            .then(|| Duration::from_secs(u64::from(UPSTREAM_KEEP_ALIVE / 2)));
        let keep_alive = match connect.keep_alive {
            0 => UPSTREAM_KEEP_ALIVE,
            k => k,
        };

        // A connection still holding the client ID first reads what its
        // client sent before this CONNECT (see `sessions::Handover`).
        if let Some(old) = shared.sessions.holder(&client_id) {
            old.asked.cancel();
            let _ = tokio::time::timeout(HANDOVER_WAIT, old.done.cancelled()).await;
        }
        // The session's gate stays held until rumqttd has the CONNECT, so
        // that no wipe of this client ID overtakes it.
        let gate = shared.sessions.gate(&client_id);
        let opened;
        let upstream = {
            let _held = gate.lock().await;
            opened = shared
                .sessions
                .open(&client_id, connect.clean, asked.expiry);
            if opened.wipe_first {
                if let Err(e) = upstream::wipe(&shared.upstream, &client_id).await {
                    warn!(error = %e, "Could not end an MQTT session in the embedded broker.");
                }
            }
            let connect_packet =
                handshake::upstream_connect(&connect, opened.clean_upstream, keep_alive);
            match dial(&shared.upstream, &connect_packet).await {
                Ok(s) => s,
                Err(e) => {
                    warn!(error = %e, "Cannot reach the embedded MQTT broker.");
                    drop(_held);
                    shared
                        .sessions
                        .close(&client_id, opened.generation, Expiry(0));
                    let ack = refuse(V4_SERVER_UNAVAILABLE, SERVER_UNAVAILABLE);
                    return farewell(&mut client_tx, &ack).await;
                }
            }
        };
        drop(gate);
        inbound.advance(header.size());
        let (mut up_rx, mut up_tx) = tokio::io::split(upstream);

        let guard_pings = AtomicU32::new(0);
        let unacked = AtomicU32::new(0);
        let delivery = Mutex::new(Delivery::new(version, asked.limits));
        let (outbox, from_guard) = mpsc::channel(OUTBOX);
        let owed = Notify::new();
        let mut inspector = Inspector {
            version,
            session,
            shared: &shared,
            aliases: HashMap::new(),
            subscriptions: opened.filters.clone(),
            denied_qos2: HashSet::new(),
            pending: Vec::new(),
            outbox,
            pings,
            guard_pings: &guard_pings,
            delivery: &delivery,
            unacked: &unacked,
            client_id: &client_id,
            generation: opened.generation,
            expiry: asked.expiry,
            after_close: None,
            prepare_first: false,
        };
        let end = {
            let inbound_pump =
                inspector.pump(&mut client_rx, socket, &mut up_tx, &mut inbound, &owed);
            let relayed = AtomicU64::new(0);
            let downstream = Downstream {
                version,
                sub_plans: HashMap::new(),
                unsub_plans: HashMap::new(),
                guard_pings: &guard_pings,
                delivery: &delivery,
                unacked: &unacked,
                owed: &owed,
                offer: Offer {
                    receive_max: shared.limits.receive_maximum,
                    max_packet: u32::try_from(shared.limits.max_packet_size).unwrap_or(u32::MAX),
                },
            };
            let outbound_pump = relay(downstream, &mut up_rx, &mut client_tx, from_guard, &relayed);
            tokio::pin!(inbound_pump, outbound_pump);
            let handover = opened.handover.asked.clone();
            let end = tokio::select! {
                // What the client sent before its next connection counts
                // first: a DISCONNECT already in the socket ends the session
                // as it says. A client still talking is cut off.
                _ = handover.cancelled() => {
                    match tokio::time::timeout(HANDOVER_DRAIN, &mut inbound_pump).await {
                        Ok(end) => end,
                        Err(_) => End::TakenOver,
                    }
                }
                _ = shared.shutdown.cancelled() => {
                    let deadline = Instant::now() + DRAIN;
                    loop {
                        let before = relayed.load(Ordering::Relaxed);
                        let ended = tokio::time::timeout(QUIET, &mut outbound_pump).await.is_ok();
                        let idle = relayed.load(Ordering::Relaxed) == before;
                        if ended || idle || Instant::now() >= deadline {
                            break;
                        }
                    }
                    End::Shutdown
                }
                end = &mut inbound_pump => {
                    if end == End::Closing {
                        let _ = tokio::time::timeout(FAREWELL, &mut outbound_pump).await;
                    }
                    end
                }
                end = &mut outbound_pump => end,
            };
            // rumqttd closes the connection of a DISCONNECT itself; the
            // guard waits for that, as `probe::leave` explains why.
            if end == End::ClientDisconnected {
                let _ = tokio::time::timeout(FAREWELL, &mut outbound_pump).await;
            }
            end
        };
        let undelivered = lock(&delivery).undelivered;
        if undelivered != Undelivered::default() {
            debug!(
                expired = undelivered.expired,
                too_large = undelivered.too_large,
                "Publications this MQTT client did not get."
            );
        }
        let after_close = match (inspector.after_close.take(), end) {
            (Some(after), _) => after,
            // The session lives on with the connection that took it over.
            (None, End::TakenOver) => AfterClose::Nothing,
            (None, _) => shared
                .sessions
                .close(&client_id, opened.generation, inspector.expiry),
        };
        opened.handover.done.cancel();
        if let AfterClose::Wipe { generation, after } = after_close {
            tokio::spawn(expire(shared.clone(), client_id.clone(), generation, after));
        }
        debug!(?end, "MQTT connection closed.");
        match end {
            // The client has gone: rumqttd sees its pipe close (after the
            // DISCONNECT, if the client sent one, and publishes the last
            // will if not).
            End::ClientFailed | End::ClientClosed | End::ClientDisconnected => {}
            End::BrokerClosed | End::Shutdown | End::TakenOver => {
                let _ = tokio::time::timeout(FAREWELL, client_tx.shutdown()).await;
            }
            // The guard ended it, often with a DISCONNECT saying why. A
            // client still sending (acknowledgements of what it read
            // before) would get a reset for them, and a reset can destroy
            // the DISCONNECT before the client reads it: read and discard
            // until the client closes too, for a moment.
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
        drop(permit);
    }
}

/// The client-to-broker direction and the per-connection state it keeps.
struct Inspector<'a> {
    version: Version,
    session: Box<dyn Session>,
    shared: &'a Shared,
    /// MQTT 5 Topic Alias to topic, as the client set them.
    aliases: HashMap<u16, String>,
    /// Filters the session holds: for `mqtt.max_subscriptions`, and to
    /// answer UNSUBSCRIBE.
    subscriptions: Arc<Filters>,
    /// QoS 2 publications the guard refused with PUBREC; their PUBREL is
    /// answered here, as the broker never saw them.
    denied_qos2: HashSet<u16>,
    /// Packets for the client, sent before the batch that caused them goes
    /// to the broker.
    pending: Vec<ToClient>,
    outbox: mpsc::Sender<ToClient>,
    /// For a client without keep-alive: how often the guard pings the
    /// broker on its behalf.
    pings: Option<Duration>,
    /// PINGREQs the guard sent whose PINGRESP the client must not see.
    guard_pings: &'a AtomicU32,
    /// What is on its way to the client; its acknowledgements change it.
    delivery: &'a Mutex<Delivery>,
    /// The client's QoS 1 and 2 publications the broker has not yet
    /// acknowledged (PUBACK, PUBCOMP): at most the Receive Maximum the
    /// CONNACK announced.
    unacked: &'a AtomicU32,
    client_id: &'a str,
    /// The session's generation this connection opened.
    generation: u64,
    /// The session's expiry; a DISCONNECT may change it.
    expiry: Expiry,
    /// Set at DISCONNECT: the session's fate is decided the moment the
    /// client says goodbye, before it can come back on another connection.
    after_close: Option<AfterClose>,
    /// A SUBSCRIBE in what was just inspected waits for the guard's
    /// [`super::Prerequisite`] before it goes to the broker.
    prepare_first: bool,
}

impl Inspector<'_> {
    fn take_owed(&self) -> Option<Bytes> {
        lock(self.delivery).take_owed()
    }

    async fn pump<R: AsyncRead + Unpin>(
        &mut self,
        client: &mut R,
        socket: RawFd,
        upstream: &mut WriteHalf<EngineStream>,
        buf: &mut BytesMut,
        owed: &Notify,
    ) -> End {
        let mut ping = self.pings.map(|every| {
            let mut i = tokio::time::interval_at(Instant::now() + every, every);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        });
        loop {
            let (chunk, end) = self.inspect_all(buf);
            for message in self.pending.drain(..) {
                if self.outbox.send(message).await.is_err() {
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
            if !chunk.is_empty() && upstream.write_all(&chunk).await.is_err() {
                return End::BrokerClosed;
            }
            if let Some(end) = end {
                return end;
            }
            grow(buf);
            // Acknowledgements the guard owes the broker for what it
            // delivered lower or not at all go in between the client's.
            let read = loop {
                tokio::select! {
                    read = client.read_buf(buf) => break read,
                    _ = async { ping.as_mut()?.tick().await; Some(()) }, if ping.is_some() => {
                        self.guard_pings.fetch_add(1, Ordering::Relaxed);
                        if upstream.write_all(&PINGREQ).await.is_err() {
                            return End::BrokerClosed;
                        }
                    }
                    _ = owed.notified() => {
                        if let Some(acks) = self.take_owed() {
                            if upstream.write_all(&acks).await.is_err() {
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

    /// Decides on every whole packet in `buf` and takes them out: what goes
    /// to the broker, and how the connection ends if one of them ends it.
    fn inspect_all(&mut self, buf: &mut BytesMut) -> (Bytes, Option<End>) {
        let mut pos = 0;
        let mut raw_from = 0;
        let mut out: Option<BytesMut> = None;
        let mut end = None;
        loop {
            let header = match packet::frame(&buf[pos..], self.shared.limits.max_packet_size) {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(PacketError::TooLarge { size, .. }) => {
                    packet_too_large(self.shared, size);
                    self.close(PACKET_TOO_LARGE);
                    end = Some(End::Closing);
                    break;
                }
                Err(e) => {
                    self.malformed(&e);
                    end = Some(End::Closing);
                    break;
                }
            };
            let frame_end = pos + header.size();
            let body = &buf[pos + header.header_len..frame_end];
            let replacement = match self.inspect(header, &buf[pos..frame_end], body) {
                // Nothing comes after a DISCONNECT.
                Verdict::Forward if header.kind() == packet::DISCONNECT => {
                    pos = frame_end;
                    end = Some(End::ClientDisconnected);
                    break;
                }
                Verdict::Forward => {
                    pos = frame_end;
                    continue;
                }
                Verdict::Replace(bytes) => Some(bytes),
                Verdict::Drop => None,
                Verdict::Close => {
                    end = Some(End::Closing);
                    break;
                }
            };
            let o = out.get_or_insert_with(BytesMut::new);
            o.extend_from_slice(&buf[raw_from..pos]);
            if let Some(bytes) = replacement {
                o.extend_from_slice(&bytes);
            }
            pos = frame_end;
            raw_from = frame_end;
        }
        let chunk = match out {
            // The common case: every packet unchanged, no copy.
            None => buf.split_to(pos).freeze(),
            Some(mut o) => {
                o.extend_from_slice(&buf[raw_from..pos]);
                buf.advance(pos);
                o.freeze()
            }
        };
        (chunk, end)
    }

    /// `raw` is the whole packet, `body` what follows its fixed header.
    fn inspect(&mut self, header: Header, raw: &[u8], body: &[u8]) -> Verdict {
        if let Err(violation) = validate::fixed_header(self.version, header.first, header.remaining)
        {
            return self.violation(violation, header.first);
        }
        match header.kind() {
            packet::PUBLISH => self.publish(header.first, body),
            packet::SUBSCRIBE => self.subscribe(body),
            packet::UNSUBSCRIBE => self.unsubscribe(body),
            packet::PUBREL if !self.denied_qos2.is_empty() => match packet::pubrel(body) {
                Ok(pkid) if self.denied_qos2.remove(&pkid) => {
                    self.pending.push(ToClient::Packet(packet::pubcomp(pkid)));
                    Verdict::Drop
                }
                _ => Verdict::Forward,
            },
            // Acknowledgements of the broker's publications go through
            // Delivery, which passes them on in rumqttd's order (a 3.1.1
            // acknowledgement is a valid MQTT 5 one as it is).
            packet::PUBACK | packet::PUBREC | packet::PUBCOMP => {
                let mut delivery = lock(self.delivery);
                delivery.client_ack(raw, header.header_len);
                if delivery.releasable() {
                    self.pending.push(ToClient::Release);
                }
                Verdict::Drop
            }
            packet::DISCONNECT => {
                if self.version == Version::V5 {
                    if let Some(secs) = handshake::disconnect_expiry(body) {
                        // A session that was to end with its connection
                        // cannot be kept from its DISCONNECT (§3.14.2.2.2).
                        if self.expiry.0 != 0 {
                            self.expiry = Expiry(secs);
                        }
                    }
                }
                self.after_close = Some(self.shared.sessions.close(
                    self.client_id,
                    self.generation,
                    self.expiry,
                ));
                Verdict::Forward
            }
            _ => Verdict::Forward,
        }
    }

    /// A packet no client may send: rumqttd must never see it (several
    /// make it panic), so the connection closes.
    fn violation(&mut self, violation: Violation, first: u8) -> Verdict {
        debug!(
            packet_type = first >> 4,
            flags = first & 0x0F,
            ?violation,
            "Closed an MQTT connection that sent a packet a client must not send."
        );
        self.close(violation.reason())
    }

    /// What goes to the broker for an MQTT 3.1.1 client's packet that MQTT
    /// 5 lays out differently; an MQTT 5 client's goes as it came.
    fn upstream(&mut self, translate: impl FnOnce() -> Result<Bytes, PacketError>) -> Verdict {
        match self.version {
            Version::V5 => Verdict::Forward,
            Version::V4 => match translate() {
                Ok(bytes) => Verdict::Replace(bytes),
                Err(e) => self.malformed(&e),
            },
        }
    }

    /// Closes the connection, with an MQTT 5 DISCONNECT first.
    fn close(&mut self, reason: u8) -> Verdict {
        let last = match self.version {
            Version::V4 => None,
            Version::V5 => Some(packet::disconnect(reason)),
        };
        self.pending.push(ToClient::Close(last));
        Verdict::Close
    }

    fn malformed(&mut self, error: &PacketError) -> Verdict {
        debug!(%error, "Closed an MQTT connection that sent a malformed packet.");
        self.close(MALFORMED_PACKET)
    }

    fn publish(&mut self, first: u8, body: &[u8]) -> Verdict {
        let p = match packet::publish(first, body, self.version) {
            Ok(p) => p,
            Err(e) => return self.malformed(&e),
        };
        if !validate::topic_name(p.topic) || (p.topic.is_empty() && p.alias.is_none()) {
            debug!(
                topic = p.topic,
                "Closed an MQTT connection that published to an invalid topic name."
            );
            return self.close(Violation::TopicName.reason());
        }
        if let Some(alias) = p
            .alias
            .filter(|&a| a == 0 || a > handshake::CLIENT_ALIAS_MAX)
        {
            debug!(
                alias,
                "Closed an MQTT connection that used a Topic Alias beyond the maximum."
            );
            return self.close(TOPIC_ALIAS_INVALID);
        }
        let topic = match p.alias {
            None => p.topic,
            Some(alias) if p.topic.is_empty() => match self.aliases.get(&alias) {
                Some(topic) => {
                    let topic = topic.clone();
                    return self.checked(first, &p, &topic);
                }
                None => {
                    debug!(
                        alias,
                        "Closed an MQTT connection that used an unknown Topic Alias."
                    );
                    return self.close(PROTOCOL_ERROR);
                }
            },
            Some(alias) => {
                if self.aliases.get(&alias).map(String::as_str) != Some(p.topic) {
                    self.aliases.insert(alias, p.topic.to_owned());
                }
                p.topic
            }
        };
        self.checked(first, &p, topic)
    }

    /// A publication to `topic` (resolved from its alias), as the
    /// principal's rights and the policy allow.
    fn checked(&mut self, first: u8, p: &packet::Publish<'_>, topic: &str) -> Verdict {
        let reason = if !self.session.may_publish(topic) {
            info!(
                principal = self.session.name(),
                topic,
                qos = p.qos,
                "Denied a publication."
            );
            self.shared.policy.observe(GuardEvent::PublishDenied);
            NOT_AUTHORIZED
        } else if let Err(why) = self.shared.policy.payload_fits(topic, p.payload) {
            info!(
                principal = self.session.name(),
                topic,
                qos = p.qos,
                reason = %why,
                "Refused a publication whose payload does not fit its topic."
            );
            self.shared.policy.observe(GuardEvent::PayloadRefused);
            PAYLOAD_FORMAT_INVALID
        } else {
            return self.accepted(first, p, topic);
        };
        match (p.qos, self.version) {
            (0, _) => Verdict::Drop,
            // MQTT 3.1.1 has no negative PUBACK; §3.3.5 allows a positive
            // one for a message the server will not deliver.
            (1, version) => {
                self.pending
                    .push(ToClient::Packet(packet::puback(version, p.pkid, reason)));
                Verdict::Drop
            }
            (_, Version::V5) => {
                self.denied_qos2.insert(p.pkid);
                self.pending
                    .push(ToClient::Packet(packet::pubrec(p.pkid, reason)));
                Verdict::Drop
            }
            // A positive PUBREC would promise exactly-once delivery.
            (_, Version::V4) => self.close(UNSPECIFIED_ERROR),
        }
    }

    /// A publication the broker gets: with the guard's marker, the topic
    /// its alias stood for; counted against the Receive Maximum.
    fn accepted(&mut self, first: u8, p: &packet::Publish<'_>, topic: &str) -> Verdict {
        if p.qos > 0 && self.version == Version::V5 {
            let unacked = self.unacked.fetch_add(1, Ordering::Relaxed) + 1;
            if unacked > u32::from(self.shared.limits.receive_maximum) {
                debug!(
                    limit = self.shared.limits.receive_maximum,
                    "Closed an MQTT connection that exceeded the Receive Maximum."
                );
                return self.close(RECEIVE_MAXIMUM_EXCEEDED);
            }
        }
        let principal = self
            .session
            .names_publisher(topic)
            .then(|| self.session.name());
        match publication::to_broker(self.version, first, p, topic, now_ms(), principal) {
            Ok(None) => Verdict::Forward,
            Ok(Some(bytes)) => Verdict::Replace(bytes),
            Err(e) => self.malformed(&e),
        }
    }

    fn subscribe(&mut self, body: &[u8]) -> Verdict {
        let s = match packet::subscribe(body, self.version) {
            Ok(s) => s,
            Err(e) => return self.malformed(&e),
        };
        if let Some(&(_, options)) = s
            .filters
            .iter()
            .find(|(_, options)| !validate::subscribe_options(self.version, *options))
        {
            debug!(
                options,
                "Closed an MQTT connection that sent a SUBSCRIBE with reserved options."
            );
            return self.close(MALFORMED_PACKET);
        }
        let (denied, quota, invalid) = match self.version {
            Version::V4 => (V4_FAILURE, V4_FAILURE, V4_FAILURE),
            Version::V5 => (NOT_AUTHORIZED, QUOTA_EXCEEDED, TOPIC_FILTER_INVALID),
        };
        let max = self.shared.limits.max_subscriptions;
        let mut plan = Vec::with_capacity(s.filters.len());
        let mut allowed = Vec::with_capacity(s.filters.len());
        let subscriptions = self.subscriptions.clone();
        let mut held = subscriptions.lock();
        for &(filter, options) in &s.filters {
            if !validate::topic_filter(filter) || validate::reserved_filter(filter) {
                info!(
                    principal = self.session.name(),
                    filter, "Refused an invalid or reserved topic filter."
                );
                plan.push(Some(invalid));
            } else if !self.session.may_subscribe(packet::shared_filter(filter)) {
                info!(
                    principal = self.session.name(),
                    filter, "Denied a subscription."
                );
                self.shared.policy.observe(GuardEvent::SubscribeDenied);
                plan.push(Some(denied));
            } else if !held.contains(filter) && held.len() >= max {
                info!(
                    principal = self.session.name(),
                    filter,
                    limit = max,
                    "Refused a subscription past mqtt.max_subscriptions."
                );
                self.shared
                    .policy
                    .observe(GuardEvent::Limit(GuardLimit::Subscriptions));
                plan.push(Some(quota));
            } else {
                if !held.contains(filter) {
                    held.insert(filter.to_owned());
                }
                if let Some(p) = &self.shared.prerequisite {
                    self.prepare_first |= p.needed_for(packet::shared_filter(filter));
                }
                plan.push(None);
                allowed.push((filter, options));
            }
        }
        drop(held);
        if allowed.len() == s.filters.len() {
            return self.upstream(|| v4::with_properties_after_pkid(0x82, body));
        }
        if allowed.is_empty() {
            let codes: Vec<u8> = plan.iter().map(|c| c.unwrap_or(denied)).collect();
            self.pending.push(ToClient::Packet(packet::encode_suback(
                self.version,
                s.pkid,
                &[],
                &codes,
            )));
            return Verdict::Drop;
        }
        let rewritten = packet::encode_subscribe(Version::V5, s.pkid, s.properties, &allowed);
        self.pending.push(ToClient::SubAck { pkid: s.pkid, plan });
        Verdict::Replace(rewritten)
    }

    /// Forwards what the session holds and answers for the rest: rumqttd
    /// acknowledges only the filters it removed, one UNSUBACK each.
    fn unsubscribe(&mut self, body: &[u8]) -> Verdict {
        let u = match packet::unsubscribe(body, self.version) {
            Ok(u) => u,
            Err(e) => return self.malformed(&e),
        };
        if let Some(filter) = u.filters.iter().find(|f| !validate::topic_filter(f)) {
            debug!(
                filter,
                "Closed an MQTT connection that unsubscribed an invalid topic filter."
            );
            return self.close(PROTOCOL_ERROR);
        }
        let mut codes = Vec::with_capacity(u.filters.len());
        let mut forwarded = Vec::with_capacity(u.filters.len());
        {
            let mut held = self.subscriptions.lock();
            for &filter in &u.filters {
                if held.remove(filter) {
                    forwarded.push(filter);
                    codes.push(0);
                } else if forwarded.contains(&filter) {
                    // Named twice: removed once, successfully both times.
                    codes.push(0);
                } else {
                    codes.push(NO_SUBSCRIPTION_EXISTED);
                }
            }
        }
        if forwarded.is_empty() {
            self.pending.push(ToClient::Packet(packet::encode_unsuback(
                self.version,
                u.pkid,
                &codes,
            )));
            return Verdict::Drop;
        }
        // rumqttd forgets, when a session resumes, which connection its
        // subscriptions belong to, and then ignores their UNSUBSCRIBE (and
        // goes on delivering). Subscribing again first ties them to this
        // connection; for a filter already tied it changes nothing (no new
        // delivery cursor, no retained messages).
        let again: Vec<(&str, u8)> = forwarded.iter().map(|f| (*f, 0)).collect();
        let mut upstream = BytesMut::new();
        upstream.extend_from_slice(&packet::encode_subscribe(Version::V5, u.pkid, &[], &again));
        upstream.extend_from_slice(&packet::encode_unsubscribe(
            u.pkid,
            u.properties,
            &forwarded,
        ));
        self.pending.push(ToClient::SwallowSubAck(u.pkid));
        self.pending.push(ToClient::UnsubAck {
            pkid: u.pkid,
            forwarded: forwarded.len(),
            codes,
        });
        Verdict::Replace(upstream.freeze())
    }
}

/// Acknowledges what was just read at once instead of after the kernel's
/// delayed-ACK timer. A peer that leaves Nagle on (rumqttd on the sockets
/// it accepts; many MQTT clients) holds each small packet it writes while
/// another is unacknowledged until that ACK comes: about 40 ms on Linux per
/// request/response hop. Linux clears the flag as it goes, hence once per
/// read.
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

/// The broker-to-client direction's state.
struct Downstream<'a> {
    /// The client's; the broker always speaks MQTT 5.
    version: Version,
    /// SUBACKs to rewrite, by packet identifier; `None`: to swallow.
    sub_plans: HashMap<u16, Option<Vec<Option<u8>>>>,
    /// UNSUBACKs to gather: how many more the broker owes, and the codes.
    unsub_plans: HashMap<u16, (usize, Vec<u8>)>,
    guard_pings: &'a AtomicU32,
    delivery: &'a Mutex<Delivery>,
    unacked: &'a AtomicU32,
    /// Wakes the other pump to write what [`Delivery`] owes the broker.
    owed: &'a Notify,
    /// What an MQTT 5 client's CONNACK announces.
    offer: Offer,
}

impl Downstream<'_> {
    /// Applies one request of the inbound pump; true when it closes.
    fn take(&mut self, message: ToClient, out: &mut BytesMut) -> bool {
        match message {
            ToClient::Packet(p) => out.extend_from_slice(&p),
            ToClient::SubAck { pkid, plan } => {
                self.sub_plans.insert(pkid, Some(plan));
            }
            ToClient::SwallowSubAck(pkid) => {
                self.sub_plans.insert(pkid, None);
            }
            ToClient::UnsubAck {
                pkid,
                forwarded,
                codes,
            } => {
                self.unsub_plans.insert(pkid, (forwarded, codes));
            }
            ToClient::Release => self.lock().release(out),
            ToClient::Close(last) => {
                if let Some(p) = last {
                    out.extend_from_slice(&p);
                }
                return true;
            }
        }
        false
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Delivery> {
        lock(self.delivery)
    }

    /// A publication from the broker, or an acknowledgement the guard
    /// owes it, goes through [`Delivery`].
    fn publish(&mut self, raw: &[u8], header_len: usize, out: &mut BytesMut) -> Result<(), End> {
        let result = self.lock().publish(raw, header_len, now_ms(), out);
        self.owed.notify_one();
        result.map_err(|e| {
            warn!(error = %e, "The embedded MQTT broker sent a PUBLISH the guard cannot read.");
            End::BrokerClosed
        })
    }

    /// What the client gets for one whole packet from the broker: `None`
    /// to pass it as it is, `Some(None)` to swallow it.
    fn translate(&mut self, first: u8, body: &[u8]) -> Result<Option<Option<Bytes>>, End> {
        let kind = first >> 4;
        match kind {
            packet::CONNACK if self.version == Version::V5 => {
                return match handshake::connack(body, self.offer) {
                    Ok(ack) => Ok(Some(Some(ack))),
                    Err(e) => {
                        warn!(error = %e, "The embedded MQTT broker sent a CONNACK the guard cannot read.");
                        Err(End::BrokerClosed)
                    }
                };
            }
            packet::PUBREL => {
                let ours = packet::pubrel(body).is_ok_and(|pkid| self.lock().broker_pubrel(pkid));
                if ours {
                    self.owed.notify_one();
                    return Ok(Some(None));
                }
            }
            packet::PUBACK | packet::PUBCOMP => {
                let _ = self
                    .unacked
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            }
            packet::SUBACK if !self.sub_plans.is_empty() => {
                let plan = packet::suback_pkid(body).and_then(|pkid| self.sub_plans.remove(&pkid));
                if let Some(None) = plan {
                    return Ok(Some(None));
                }
                if let (Some(Some(plan)), Ok(ack)) = (plan, packet::suback(body, Version::V5)) {
                    let codes = packet::merge_codes(&plan, ack.codes, UNSPECIFIED_ERROR);
                    let (properties, codes) = match self.version {
                        Version::V4 => {
                            (&[][..], codes.iter().map(|&c| v4::suback_code(c)).collect())
                        }
                        Version::V5 => (ack.properties, codes),
                    };
                    return Ok(Some(Some(packet::encode_suback(
                        self.version,
                        ack.pkid,
                        properties,
                        &codes,
                    ))));
                }
            }
            packet::UNSUBACK => {
                if let Some(pkid) = packet::unsuback_pkid(body) {
                    if let Some((owed, _)) = self.unsub_plans.get_mut(&pkid) {
                        *owed = owed.saturating_sub(1);
                        if *owed > 0 {
                            return Ok(Some(None));
                        }
                        let (_, codes) = self.unsub_plans.remove(&pkid).unwrap_or_default();
                        return Ok(Some(Some(packet::encode_unsuback(
                            self.version,
                            pkid,
                            &codes,
                        ))));
                    }
                }
            }
            packet::PINGRESP => {
                let ours = self
                    .guard_pings
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok();
                if ours {
                    return Ok(Some(None));
                }
            }
            _ => {}
        }
        match self.version {
            Version::V5 => Ok(None),
            Version::V4 => match v4::downstream(first, body) {
                Ok(Down::Packet(p)) => Ok(Some(Some(p))),
                Ok(Down::Close) => Err(End::BrokerClosed),
                Err(e) => {
                    warn!(error = %e, "The embedded MQTT broker sent a packet the guard cannot translate.");
                    Err(End::BrokerClosed)
                }
            },
        }
    }

    /// Takes the whole packets off `buf` and appends what the client gets
    /// to `out`. `Err` when the connection ends (after `out`).
    fn client_bound(&mut self, buf: &mut BytesMut, mut out: BytesMut) -> (BytesMut, Option<End>) {
        if self.version == Version::V4 {
            // Every publication is rewritten for a 3.1.1 client, and none
            // grows (the broker's properties are left out): room for all
            // of them at once, instead of a reallocation and a copy each
            // time the buffer doubles.
            out.reserve(buf.len());
        }
        let mut pos = 0;
        let mut raw_from = 0;
        let mut end = None;
        loop {
            let header = match packet::frame(&buf[pos..], usize::MAX) {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(_) => {
                    end = Some(End::BrokerClosed);
                    break;
                }
            };
            let frame_end = pos + header.size();
            if header.kind() == packet::PUBLISH {
                out.extend_from_slice(&buf[raw_from..pos]);
                raw_from = frame_end;
                if let Err(e) = self.publish(&buf[pos..frame_end], header.header_len, &mut out) {
                    end = Some(e);
                    break;
                }
                pos = frame_end;
                continue;
            }
            let body = &buf[pos + header.header_len..frame_end];
            match self.translate(header.first, body) {
                Ok(None) => {}
                Ok(Some(replacement)) => {
                    out.extend_from_slice(&buf[raw_from..pos]);
                    if let Some(bytes) = replacement {
                        out.extend_from_slice(&bytes);
                    }
                    raw_from = frame_end;
                }
                Err(e) => {
                    end = Some(e);
                    break;
                }
            }
            pos = frame_end;
        }
        if out.is_empty() && raw_from == 0 {
            // The common case: nothing to add or change, no copy.
            return (buf.split_to(pos), end);
        }
        out.extend_from_slice(&buf[raw_from..pos]);
        buf.advance(pos);
        (out, end)
    }
}

/// The broker-to-client direction: relays whole packets (translated for
/// an MQTT 3.1.1 client), rewrites the acknowledgements of SUBSCRIBEs and
/// UNSUBSCRIBEs the guard changed, and slips the guard's own packets in
/// between the broker's.
async fn relay<W: AsyncWrite + Unpin>(
    mut state: Downstream<'_>,
    upstream: &mut ReadHalf<EngineStream>,
    client: &mut W,
    mut from_guard: mpsc::Receiver<ToClient>,
    relayed: &AtomicU64,
) -> End {
    let mut buf = BytesMut::new();
    let mut guard_open = true;
    loop {
        grow(&mut buf);
        let mut out = BytesMut::new();
        let mut closing = None;
        tokio::select! {
            biased;
            message = from_guard.recv(), if guard_open => match message {
                Some(m) => {
                    let mut close = state.take(m, &mut out);
                    while let (false, Ok(m)) = (close, from_guard.try_recv()) {
                        close = state.take(m, &mut out);
                    }
                    closing = close.then_some(End::Closing);
                }
                None => guard_open = false,
            },
            read = upstream.read_buf(&mut buf) => {
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
