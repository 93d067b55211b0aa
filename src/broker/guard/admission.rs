//! The CONNECT step of a guarded connection: the first packet read within
//! the handshake deadline, then the connection quota, the credentials, the
//! last will's right to publish and the MQTT 5 limits the client asked
//! for. A refusal is answered (a CONNACK saying why, where MQTT has one)
//! here; what passes goes on to the broker in [`super::connection`].

use std::net::SocketAddr;
use std::os::fd::RawFd;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tracing::{debug, info};

use super::connection::{farewell, packet_too_large};
use super::handshake::{self, Asked};
use super::packet::{self, Connect, Header, PacketError, Version};
use super::reason::*;
use super::relay::grow;
use super::{GuardEvent, GuardLimit, Refusal, Session, Shared};

/// The read buffer's first allocation: room for a CONNECT with credentials
/// and a short will. Thousands of clients connecting at once each hold it
/// while their session opens, and what a burst freed stays with the
/// process (issue 32); larger CONNECTs grow it.
const CONNECT_CHUNK: usize = 512;

/// A CONNECT the guard accepted (the first `header.size()` bytes of the
/// connection's read buffer).
pub(super) struct Admitted {
    pub(super) header: Header,
    pub(super) connect: Connect,
    /// The connection's place under `mqtt.max_connections`.
    pub(super) permit: OwnedSemaphorePermit,
    pub(super) session: Box<dyn Session>,
    pub(super) asked: Asked,
}

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

pub(super) fn handshake_timed_out(shared: &Shared, peer: SocketAddr) {
    info!(
        %peer,
        timeout_ms = shared.limits.handshake_timeout.as_millis() as u64,
        "Closed an MQTT connection that sent no CONNECT in time (mqtt.connection_timeout_ms)."
    );
    shared
        .policy
        .observe(GuardEvent::Limit(GuardLimit::HandshakeTimeout));
}

/// Reads and checks the CONNECT; `None` when the connection ends here
/// (refused, answered where MQTT has an answer, or gone).
pub(super) async fn admit<R, W>(
    shared: &Shared,
    (peer, socket, certificate): (SocketAddr, RawFd, Option<&str>),
    deadline: Instant,
    client_rx: &mut R,
    client_tx: &mut W,
    inbound: &mut BytesMut,
) -> Option<Admitted>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let header = first_packet(shared, (peer, deadline), client_rx, inbound).await?;
    let connect = match packet::connect(&inbound[..header.size()]) {
        Ok(c) => c,
        Err(PacketError::Protocol { name, level }) => {
            debug!(protocol = %name, level, "Refused an MQTT connection with an unsupported protocol.");
            let ack = packet::connack(Version::V4, V4_UNACCEPTABLE_PROTOCOL);
            farewell(client_tx, &ack).await;
            return None;
        }
        Err(e) => {
            debug!(error = %e, "Closed an MQTT connection with a malformed CONNECT.");
            return None;
        }
    };
    let version = connect.version;
    // Before anything costs: a kept session writes its client ID into the
    // key of every publication queued for it.
    if connect.client_id.len() > shared.limits.max_client_id_length {
        client_id_too_long(shared, &connect, client_tx).await;
        return None;
    }
    if connect.client_id.contains(RESERVED_IN_CLIENT_IDS) {
        client_id_reserved(&connect, client_tx).await;
        return None;
    }
    let span = tracing::Span::current();
    span.record("client_id", connect.client_id.as_str());
    let refuse = |v4: u8, v5: u8| refusal(version, v4, v5);

    let Ok(permit) = shared.connections.clone().try_acquire_owned() else {
        info!(
            %peer,
            client_id = connect.client_id.as_str(),
            limit = shared.limits.max_connections,
            "Refused an MQTT connection past mqtt.max_connections."
        );
        shared
            .policy
            .observe(GuardEvent::Limit(GuardLimit::Connections));
        let ack = refuse(V4_SERVER_UNAVAILABLE, QUOTA_EXCEEDED);
        farewell(client_tx, &ack).await;
        return None;
    };
    let session = authenticate(shared, (peer, certificate), &connect, client_tx).await?;
    span.record("principal", session.name());
    // A last will is a publication the broker makes on the client's
    // behalf; unchecked, it would bypass the publish rights.
    if let Some(will) = &connect.will {
        if !session.may_publish(&will.topic) {
            info!(
                %peer,
                client_id = connect.client_id.as_str(),
                principal = session.name(),
                topic = will.topic.as_str(),
                "Refused an MQTT connection whose last will it may not publish."
            );
            shared
                .policy
                .observe(GuardEvent::Refused(Refusal::NotAuthorized));
            let ack = refuse(V4_NOT_AUTHORIZED, NOT_AUTHORIZED);
            farewell(client_tx, &ack).await;
            return None;
        }
    }
    let asked = match handshake::asked(&connect) {
        Ok(a) => a,
        Err(reason) => {
            debug!("Refused an MQTT 5 CONNECT with a Receive Maximum or Maximum Packet Size of 0.");
            let ack = refuse(V4_UNACCEPTABLE_PROTOCOL, reason);
            farewell(client_tx, &ack).await;
            return None;
        }
    };
    if let Err(over) = charge_will(shared, &connect, socket, session.name()) {
        debug!(
            principal = session.name(),
            key = %over.key(),
            "Refused an MQTT connection whose last will would pass a bound."
        );
        let label = over.label();
        shared
            .policy
            .observe(GuardEvent::Limit(GuardLimit::Keep(label)));
        let ack = match version {
            Version::V4 => packet::connack(version, V4_SERVER_UNAVAILABLE),
            Version::V5 => packet::connack_saying(version, QUOTA_EXCEEDED, &over.reason_string()),
        };
        farewell(client_tx, &ack).await;
        return None;
    }

    Some(Admitted {
        header,
        connect,
        permit,
        session,
        asked,
    })
}

/// The bytes the broker keeps of a last will (topic, properties and
/// payload), charged to `principal` until the connection on `socket` ends
/// (see [`super::wills`]), and a retained will's retained message (see
/// [`super::retained`]); the sidecar's own connections are not counted.
fn charge_will(
    shared: &Shared,
    connect: &Connect,
    socket: RawFd,
    principal: &str,
) -> Result<(), super::retained::Over> {
    let Some(will) = connect.will.as_ref().filter(|_| !shared.keeps.own) else {
        return Ok(());
    };
    let properties = will.properties.as_ref().map_or(0, |p| {
        let user: usize = p
            .user_properties
            .iter()
            .map(|(k, v)| 4 + k.len() + v.len())
            .sum();
        let text = |t: &Option<String>| t.as_ref().map_or(0, |t| 3 + t.len());
        let data = p.correlation_data.as_ref().map_or(0, |d| 3 + d.len());
        16 + user + text(&p.content_type) + text(&p.response_topic) + data
    });
    let bytes = (will.topic.len() + will.will.message.len() + properties) as u64;
    let wills = &shared.keeps.wills;
    wills.charge(socket, principal, bytes)?;
    // A retained will becomes the principal's retained message when it is
    // published: charged now, as a retained publication would be (else
    // connecting and vanishing would retain without bound).
    if will.will.retain {
        let retained = &shared.keeps.retained;
        if let Err(over) = retained.charge(Some(principal), &will.topic, bytes) {
            wills.release(socket);
            return Err(over);
        }
    }
    Ok(())
}

/// The client's first packet's fixed header, once it is whole: a
/// CONNECT within `mqtt.connection_timeout_ms` and the packet size limit,
/// or `None` (the connection closes; too large and too late are counted).
async fn first_packet<R: AsyncRead + Unpin>(
    shared: &Shared,
    (peer, deadline): (SocketAddr, Instant),
    client_rx: &mut R,
    inbound: &mut BytesMut,
) -> Option<packet::Header> {
    let limit = shared.limits.max_packet_size;
    let first = tokio::select! {
        _ = shared.shutdown.cancelled() => return None,
        read = tokio::time::timeout_at(deadline, read_connect(client_rx, inbound, limit)) => read,
    };
    let header = match first {
        Ok(Ok(h)) => h,
        Ok(Err(ReadError::NotConnect)) => {
            debug!("Closed an MQTT connection whose first packet was not CONNECT.");
            return None;
        }
        Ok(Err(ReadError::Packet(PacketError::TooLarge { size, .. }))) => {
            packet_too_large(shared, size, (Some(peer), None));
            return None;
        }
        Ok(Err(e)) => {
            debug!(error = %e, "MQTT client left before CONNECT.");
            return None;
        }
        Err(_) => {
            handshake_timed_out(shared, peer);
            return None;
        }
    };
    if header.first != 0x10 {
        debug!("Closed an MQTT connection whose CONNECT has reserved flags set.");
        return None;
    }
    Some(header)
}

/// The principal the CONNECT's credentials (or the client certificate's
/// identity, `certificate`) name, or `None` once the client has its
/// refusal.
async fn authenticate<W: AsyncWrite + Unpin>(
    shared: &Shared,
    (peer, certificate): (SocketAddr, Option<&str>),
    connect: &packet::Connect,
    client_tx: &mut W,
) -> Option<Box<dyn Session>> {
    let refuse = |v4: u8, v5: u8| refusal(connect.version, v4, v5);
    // Checking a password may wait for a verifier thread; the connection
    // holds its place under mqtt.max_connections meanwhile, so a flood of
    // CONNECTs is bounded by that too.
    let verdict = shared.policy.connect(
        peer,
        certificate,
        &connect.client_id,
        connect.username(),
        connect.password(),
    );
    let session = tokio::select! {
        _ = shared.shutdown.cancelled() => return None,
        verdict = verdict => verdict,
    };
    match session {
        Ok(session) => Some(session),
        Err(refusal) => {
            // Logged by the policy, once per flood, not per attempt.
            debug!(username = connect.username(), reason = ?refusal, "Refused an MQTT connection.");
            shared.policy.observe(GuardEvent::Refused(refusal));
            let ack = match refusal {
                Refusal::BadCredentials => refuse(V4_BAD_CREDENTIALS, BAD_CREDENTIALS),
                Refusal::NotAuthorized | Refusal::Certificate => {
                    refuse(V4_NOT_AUTHORIZED, NOT_AUTHORIZED)
                }
                Refusal::Busy => refuse(V4_SERVER_UNAVAILABLE, SERVER_BUSY),
                Refusal::Throttled => refuse(V4_SERVER_UNAVAILABLE, CONNECTION_RATE_EXCEEDED),
            };
            farewell(client_tx, &ack).await;
            None
        }
    }
}

/// Refuses a CONNECT whose client ID is longer than
/// `mqtt.max_client_id_length`: MQTT 5 0x85 Client Identifier not valid
/// (naming the key), 3.1.1 identifier rejected; counted, logged at debug
/// (unauthenticated: a flood must not fill the log).
async fn client_id_too_long<W: AsyncWrite + Unpin>(
    shared: &Shared,
    connect: &Connect,
    client_tx: &mut W,
) {
    let limit = shared.limits.max_client_id_length;
    debug!(
        length = connect.client_id.len(),
        limit,
        "Refused an MQTT connection whose client ID is longer than mqtt.max_client_id_length."
    );
    shared
        .policy
        .observe(GuardEvent::Limit(GuardLimit::ClientIdLength));
    let ack = match connect.version {
        Version::V4 => packet::connack(Version::V4, V4_IDENTIFIER_REJECTED),
        Version::V5 => packet::connack_saying(
            Version::V5,
            CLIENT_IDENTIFIER_NOT_VALID,
            &format!("client ID longer than {limit} bytes (mqtt.max_client_id_length)"),
        ),
    };
    farewell(client_tx, &ack).await;
}

/// Characters the embedded broker does not take in a client ID (rumqttd
/// keeps them for its tenants' prefixes): a client naming itself with one
/// was dropped by the router, and its CONNECT answered "server
/// unavailable", which clients retry forever.
pub(super) const RESERVED_IN_CLIENT_IDS: [char; 4] = ['/', '+', '#', '$'];

/// Refuses a CONNECT whose client ID has a [`RESERVED_IN_CLIENT_IDS`]
/// character, saying so: MQTT 5 0x85 Client Identifier not valid, 3.1.1
/// identifier rejected (a client does not retry that one unchanged).
async fn client_id_reserved<W: AsyncWrite + Unpin>(connect: &Connect, client_tx: &mut W) {
    debug!("Refused an MQTT connection whose client ID has a character the broker reserves.");
    let ack = match connect.version {
        Version::V4 => packet::connack(Version::V4, V4_IDENTIFIER_REJECTED),
        Version::V5 => packet::connack_saying(
            Version::V5,
            CLIENT_IDENTIFIER_NOT_VALID,
            "a client ID may not contain '/', '+', '#' or '$'",
        ),
    };
    farewell(client_tx, &ack).await;
}

/// The CONNACK refusing a connection: MQTT 3.1.1's return code `v4` or
/// MQTT 5's reason code `v5`, whichever the client speaks.
pub(super) fn refusal(version: Version, v4: u8, v5: u8) -> bytes::Bytes {
    match version {
        Version::V4 => packet::connack(version, v4),
        Version::V5 => packet::connack(version, v5),
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
        if buf.capacity() == 0 {
            buf.reserve(CONNECT_CHUNK);
        } else {
            grow(buf);
        }
        if reader.read_buf(buf).await? == 0 {
            return Err(ReadError::Closed);
        }
    }
}
