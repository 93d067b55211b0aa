//! MQTT framing and the packets the guard reads or writes. Pure functions
//! over byte slices: no I/O and no panics on any input (the proptests in
//! `packet_tests.rs` hold that).
//!
//! Every packet but PUBLISH is read and written with rumqttd's codec
//! (`rumqttd::protocol`, patched where it was lenient or fell short: see
//! `vendor/rumqttd/PATCHES.md`, patches 16-18 and 24-26); the guard adds its
//! own policy on what they hold. Kept here: the framing (the fixed header and
//! the byte budgets it enforces before a body is buffered) and PUBLISH, a
//! view borrowed from the frame, because every publication and delivery is
//! read and rumqttd's decoder copies topic, payload and properties. The guard
//! forwards the original bytes of everything it does not change.

use bytes::{BufMut, Bytes, BytesMut};
use rumqttd::protocol::{self as wire, v4::V4, v5::V5, Protocol};

use super::properties;

pub const CONNECT: u8 = 1;
pub const CONNACK: u8 = 2;
pub const PUBLISH: u8 = 3;
pub const PUBACK: u8 = 4;
pub const PUBREC: u8 = 5;
pub const PUBREL: u8 = 6;
pub const PUBCOMP: u8 = 7;
pub const SUBSCRIBE: u8 = 8;
pub const SUBACK: u8 = 9;
pub const UNSUBSCRIBE: u8 = 10;
pub const UNSUBACK: u8 = 11;
pub const PINGREQ: u8 = 12;
pub const PINGRESP: u8 = 13;
pub const DISCONNECT: u8 = 14;
pub const AUTH: u8 = 15;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// MQTT 3.1.1 (protocol level 4).
    V4,
    /// MQTT 5 (protocol level 5).
    V5,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("the remaining length is malformed")]
    RemainingLength,
    #[error("a packet of {size} bytes exceeds the limit of {limit}")]
    TooLarge { size: usize, limit: usize },
    #[error("malformed {0} packet")]
    Malformed(&'static str),
    #[error("malformed {what} packet: {why}")]
    Codec { what: &'static str, why: String },
    #[error("unsupported protocol {name:?} level {level}")]
    Protocol { name: String, level: u8 },
}

/// The fixed header of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Packet type and flags.
    pub first: u8,
    /// Bytes of the fixed header (type byte and remaining length).
    pub header_len: usize,
    pub remaining: usize,
}

impl Header {
    pub fn kind(&self) -> u8 {
        self.first >> 4
    }

    /// Bytes of the whole packet.
    pub fn size(&self) -> usize {
        self.header_len + self.remaining
    }
}

/// The header of the packet at the start of `buf` once all of it is in
/// `buf`. A packet larger than `limit` fails as soon as its header is read,
/// before its body is buffered.
pub fn frame(buf: &[u8], limit: usize) -> Result<Option<Header>, PacketError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let mut remaining = 0usize;
    for i in 0..4 {
        let Some(&byte) = buf.get(1 + i) else {
            return Ok(None);
        };
        remaining |= usize::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            let header = Header {
                first,
                header_len: 2 + i,
                remaining,
            };
            if header.size() > limit {
                return Err(PacketError::TooLarge {
                    size: header.size(),
                    limit,
                });
            }
            return Ok((buf.len() >= header.size()).then_some(header));
        }
    }
    Err(PacketError::RemainingLength)
}

/// Reads MQTT data types off a packet body; every read is bounds-checked.
struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { buf, what }
    }

    fn malformed(&self) -> PacketError {
        PacketError::Malformed(self.what)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], PacketError> {
        if self.buf.len() < n {
            return Err(self.malformed());
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, PacketError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, PacketError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn binary(&mut self) -> Result<&'a [u8], PacketError> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }

    fn string(&mut self) -> Result<&'a str, PacketError> {
        let b = self.binary()?;
        std::str::from_utf8(b).map_err(|_| self.malformed())
    }

    /// A topic or filter. Control characters, which MQTT says topics
    /// should not contain (§1.5.3 of 3.1.1 allows closing the connection),
    /// are refused: a clustered engine such as NATS drops its cluster
    /// routes over a subscription containing a tab, CR or LF.
    fn topic(&mut self) -> Result<&'a str, PacketError> {
        let topic = self.string()?;
        if has_control(topic) {
            return Err(self.malformed());
        }
        Ok(topic)
    }

    fn varint(&mut self) -> Result<usize, PacketError> {
        let mut value = 0usize;
        for i in 0..4 {
            let byte = self.u8()?;
            value |= usize::from(byte & 0x7F) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.malformed())
    }

    /// MQTT 5 properties, raw: the length and what it covers.
    fn properties(&mut self) -> Result<&'a [u8], PacketError> {
        let before = self.buf;
        let n = self.varint()?;
        self.take(n)?;
        Ok(&before[..before.len() - self.buf.len()])
    }
}

/// A CONNECT as rumqttd's codec reads it, 3.1.1 or 5.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    pub version: Version,
    /// Clean Session (3.1.1) / Clean Start (5).
    pub clean: bool,
    /// Seconds; 0 turns keep-alive off.
    pub keep_alive: u16,
    pub client_id: String,
    /// MQTT 5 only.
    pub properties: Option<wire::ConnectProperties>,
    pub will: Option<Will>,
    /// User name and password, each there when its flag is (patch 24).
    pub login: Option<wire::Login>,
}

/// A CONNECT's last will.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Will {
    /// The will's topic, a checked topic (rumqttd reads it as bytes).
    pub topic: String,
    pub will: wire::LastWill,
    /// MQTT 5 only.
    pub properties: Option<wire::LastWillProperties>,
}

impl Connect {
    /// A clean MQTT 5 CONNECT of the guard's own, without will or
    /// credentials.
    pub fn own(client_id: &str) -> Connect {
        Connect {
            version: Version::V5,
            clean: true,
            keep_alive: 60,
            client_id: client_id.to_owned(),
            properties: None,
            will: None,
            login: None,
        }
    }

    pub fn username(&self) -> Option<&str> {
        self.login.as_ref()?.username.as_deref()
    }

    pub fn password(&self) -> Option<&[u8]> {
        self.login.as_ref()?.password.as_deref()
    }
}

/// The MQTT version a CONNECT body names, read ahead of rumqttd's decoder
/// to pick the codec (and to name another protocol in the log).
fn protocol(body: &[u8]) -> Result<Version, PacketError> {
    let mut r = Reader::new(body, "CONNECT");
    let name = r.binary()?;
    match (name, r.u8()?) {
        (b"MQTT", 4) => Ok(Version::V4),
        (b"MQTT", 5) => Ok(Version::V5),
        (_, level) => Err(PacketError::Protocol {
            name: String::from_utf8_lossy(name).into_owned(),
            level,
        }),
    }
}

/// Decodes a whole CONNECT packet (`raw`, fixed header included).
pub fn connect(raw: &[u8]) -> Result<Connect, PacketError> {
    let header = frame(raw, usize::MAX)?.ok_or(PacketError::Malformed("CONNECT"))?;
    let version = protocol(&raw[header.header_len..header.size()])?;
    let wire::Packet::Connect(c, properties, will, will_properties, login) =
        decode(version, &raw[..header.size()], "CONNECT")?
    else {
        return Err(PacketError::Malformed("CONNECT"));
    };
    let will = match will {
        None => None,
        Some(will) => {
            // A topic like any other (see `Reader::topic`).
            let topic = std::str::from_utf8(&will.topic)
                .ok()
                .filter(|t| !has_control(t))
                .ok_or(PacketError::Malformed("CONNECT"))?;
            Some(Will {
                topic: topic.to_owned(),
                will,
                properties: will_properties,
            })
        }
    };
    Ok(Connect {
        version,
        clean: c.clean_session,
        keep_alive: c.keep_alive,
        client_id: c.client_id,
        properties,
        will,
        login,
    })
}

/// The MQTT 5 CONNECT the broker gets for a client's (3.1.1 or 5): the
/// same client, will and credentials, with the clean start, keep-alive and
/// properties the guard chose.
pub fn encode_connect(
    c: &Connect,
    clean: bool,
    keep_alive: u16,
    properties: Option<wire::ConnectProperties>,
) -> Result<Bytes, PacketError> {
    let connect = wire::Connect {
        keep_alive,
        client_id: c.client_id.clone(),
        clean_session: clean,
    };
    let (will, will_properties) = match &c.will {
        Some(w) => (Some(w.will.clone()), w.properties.clone()),
        None => (None, None),
    };
    let packet = wire::Packet::Connect(connect, properties, will, will_properties, c.login.clone());
    encode(packet, "CONNECT")
}

/// What the guard needs from a PUBLISH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Publish<'a> {
    pub qos: u8,
    /// 0 at QoS 0, which has no packet identifier.
    pub pkid: u16,
    /// Empty when an MQTT 5 publisher relies on a Topic Alias alone.
    pub topic: &'a str,
    pub alias: Option<u16>,
    /// What the MQTT 5 property list holds (its length field left out);
    /// empty on 3.1.1.
    pub properties: &'a [u8],
    pub payload: &'a [u8],
}

pub fn publish(first: u8, body: &[u8], version: Version) -> Result<Publish<'_>, PacketError> {
    let mut r = Reader::new(body, "PUBLISH");
    let qos = (first >> 1) & 0x03;
    if qos == 3 {
        return Err(r.malformed());
    }
    let topic = r.topic()?;
    let pkid = if qos > 0 { r.u16()? } else { 0 };
    let (properties, alias) = match version {
        Version::V4 => (&[][..], None),
        Version::V5 => {
            let (content, _) = properties::list(r.properties()?)?;
            let mut alias = None;
            for p in properties::walk(content) {
                let p = p?;
                if p.id == properties::TOPIC_ALIAS {
                    alias = Some(p.int() as u16);
                }
            }
            (content, alias)
        }
    };
    Ok(Publish {
        qos,
        pkid,
        topic,
        alias,
        properties,
        payload: r.buf,
    })
}

/// Whether `s` holds a control character (`char::is_control`: U+0000 to
/// U+001F and U+007F to U+009F), byte by byte: every delivery's topic is
/// read, and decoding it char by char was the guard's most expensive step
/// per delivery. U+0080 to U+009F are 0xC2 0x80 to 0xC2 0x9F in UTF-8.
fn has_control(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter().enumerate().any(|(i, &c)| {
        c < 0x20
            || c == 0x7F
            || (c == 0xC2 && b.get(i + 1).is_some_and(|n| (0x80..=0x9F).contains(n)))
    })
}

/// Decodes one whole packet (fixed header included) with rumqttd's codec.
fn decode(version: Version, raw: &[u8], what: &'static str) -> Result<wire::Packet, PacketError> {
    let mut buf = BytesMut::from(raw);
    let read = match version {
        Version::V4 => V4.read_mut(&mut buf, usize::MAX),
        Version::V5 => V5.read_mut(&mut buf, usize::MAX),
    };
    read.map_err(|e| PacketError::Codec {
        what,
        why: e.to_string(),
    })
}

/// Encodes an MQTT 5 packet with rumqttd's codec.
fn encode(packet: wire::Packet, what: &'static str) -> Result<Bytes, PacketError> {
    let mut out = BytesMut::new();
    match V5.write(packet, &mut out) {
        Ok(_) => Ok(out.freeze()),
        Err(e) => Err(PacketError::Codec {
            what,
            why: e.to_string(),
        }),
    }
}

/// Filters with control characters are malformed (see [`Reader::topic`]).
fn no_control<'a>(
    mut filters: impl Iterator<Item = &'a str>,
    what: &'static str,
) -> Result<(), PacketError> {
    match filters.any(has_control) {
        true => Err(PacketError::Malformed(what)),
        false => Ok(()),
    }
}

/// A SUBSCRIBE: packet identifier, MQTT 5 properties (none on 3.1.1), and
/// each filter with its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    pub pkid: u16,
    pub properties: Option<wire::SubscribeProperties>,
    pub filters: Vec<wire::Filter>,
}

/// Decodes a whole SUBSCRIBE packet (`raw`, fixed header included).
pub fn subscribe(raw: &[u8], version: Version) -> Result<Subscribe, PacketError> {
    match decode(version, raw, "SUBSCRIBE")? {
        wire::Packet::Subscribe(s, properties) => {
            no_control(s.filters.iter().map(|f| f.path.as_str()), "SUBSCRIBE")?;
            Ok(Subscribe {
                pkid: s.pkid,
                properties,
                filters: s.filters,
            })
        }
        _ => Err(PacketError::Malformed("SUBSCRIBE")),
    }
}

/// An UNSUBSCRIBE: packet identifier, MQTT 5 properties (none on 3.1.1)
/// and its filters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    pub pkid: u16,
    pub properties: Option<wire::UnsubscribeProperties>,
    pub filters: Vec<String>,
}

/// Decodes a whole UNSUBSCRIBE packet (`raw`, fixed header included).
pub fn unsubscribe(raw: &[u8], version: Version) -> Result<Unsubscribe, PacketError> {
    match decode(version, raw, "UNSUBSCRIBE")? {
        wire::Packet::Unsubscribe(u, properties) => {
            no_control(u.filters.iter().map(String::as_str), "UNSUBSCRIBE")?;
            Ok(Unsubscribe {
                pkid: u.pkid,
                properties,
                filters: u.filters,
            })
        }
        _ => Err(PacketError::Malformed("UNSUBSCRIBE")),
    }
}

/// An MQTT 5 SUBSCRIBE of `filters`.
pub fn encode_subscribe(
    pkid: u16,
    properties: Option<wire::SubscribeProperties>,
    filters: Vec<wire::Filter>,
) -> Result<Bytes, PacketError> {
    let subscribe = wire::Subscribe { pkid, filters };
    encode(wire::Packet::Subscribe(subscribe, properties), "SUBSCRIBE")
}

/// An MQTT 5 UNSUBSCRIBE of `filters`.
pub fn encode_unsubscribe(
    pkid: u16,
    properties: Option<wire::UnsubscribeProperties>,
    filters: Vec<String>,
) -> Result<Bytes, PacketError> {
    let unsubscribe = wire::Unsubscribe { pkid, filters };
    encode(
        wire::Packet::Unsubscribe(unsubscribe, properties),
        "UNSUBSCRIBE",
    )
}

/// The packet identifier of an UNSUBACK.
pub fn unsuback_pkid(body: &[u8]) -> Option<u16> {
    Reader::new(body, "UNSUBACK").u16().ok()
}

/// The packet identifier of a PUBREL.
pub fn pubrel(body: &[u8]) -> Result<u16, PacketError> {
    Reader::new(body, "PUBREL").u16()
}

/// The packet identifier of a SUBACK, without decoding the rest.
pub fn suback_pkid(body: &[u8]) -> Option<u16> {
    Reader::new(body, "SUBACK").u16().ok()
}

/// The filter a subscription matches topics with: `$share/{group}/{filter}`
/// matches like `{filter}`.
pub fn shared_filter(filter: &str) -> &str {
    filter
        .strip_prefix("$share/")
        .and_then(|rest| rest.split_once('/'))
        .map_or(filter, |(_group, filter)| filter)
}

pub(super) fn put_remaining_length(out: &mut BytesMut, mut n: usize) {
    loop {
        let mut byte = (n % 128) as u8;
        n /= 128;
        if n > 0 {
            byte |= 0x80;
        }
        out.put_u8(byte);
        if n == 0 {
            return;
        }
    }
}

/// Decodes one packet the broker sent in MQTT 5 from its first byte and
/// body (reassembled: the rare packets this serves are not worth a second
/// reader).
pub(super) fn decode_body(
    first: u8,
    body: &[u8],
    what: &'static str,
) -> Result<wire::Packet, PacketError> {
    let mut raw = BytesMut::with_capacity(body.len() + 5);
    raw.put_u8(first);
    put_remaining_length(&mut raw, body.len());
    raw.put_slice(body);
    decode(Version::V5, &raw, what)
}

/// Encodes one of the guard's small packets for a client of `version`.
/// rumqttd's writers fail only past MQTT's largest remaining length
/// (256 MiB), which no acknowledgement reaches; nothing is sent then.
pub(super) fn encode_for(version: Version, packet: wire::Packet) -> Bytes {
    let mut out = BytesMut::with_capacity(8);
    let written = match version {
        Version::V4 => V4.write(packet, &mut out),
        Version::V5 => V5.write(packet, &mut out),
    };
    match written {
        Ok(_) => out.freeze(),
        Err(_) => Bytes::new(),
    }
}

/// A CONNACK refusing the connection (no session present, no
/// properties): `code` is the version's own, a 3.1.1 return code or an
/// MQTT 5 reason code.
pub fn connack(version: Version, code: u8) -> Bytes {
    let code = match version {
        Version::V4 => wire::ConnectReturnCode::from_v4(code),
        Version::V5 => wire::ConnectReturnCode::from_v5(code),
    };
    let connack = wire::ConnAck {
        session_present: false,
        code: code.unwrap_or(wire::ConnectReturnCode::ServiceUnavailable),
    };
    encode_for(version, wire::Packet::ConnAck(connack, None))
}

/// A PUBACK; MQTT 3.1.1 has no reason code, so `reason` is then ignored.
pub fn puback(version: Version, pkid: u16, reason: u8) -> Bytes {
    let reason =
        wire::PubAckReason::from_v5(reason).unwrap_or(wire::PubAckReason::UnspecifiedError);
    encode_for(
        version,
        wire::Packet::PubAck(wire::PubAck { pkid, reason }, None),
    )
}

/// An MQTT 5 PUBREC with a reason code.
pub fn pubrec(pkid: u16, reason: u8) -> Bytes {
    let reason =
        wire::PubRecReason::from_v5(reason).unwrap_or(wire::PubRecReason::UnspecifiedError);
    encode_for(
        Version::V5,
        wire::Packet::PubRec(wire::PubRec { pkid, reason }, None),
    )
}

/// A PUBCOMP (success).
pub fn pubcomp(pkid: u16) -> Bytes {
    let reason = wire::PubCompReason::Success;
    encode_for(
        Version::V5,
        wire::Packet::PubComp(wire::PubComp { pkid, reason }, None),
    )
}

/// An MQTT 5 DISCONNECT with a reason code.
pub fn disconnect(reason: u8) -> Bytes {
    let reason_code = wire::DisconnectReasonCode::from_v5(reason)
        .unwrap_or(wire::DisconnectReasonCode::UnspecifiedError);
    encode_for(
        Version::V5,
        wire::Packet::Disconnect(wire::Disconnect { reason_code }, None),
    )
}

/// A SUBACK with MQTT 5 reason codes (as 3.1.1 return codes for a 3.1.1
/// client, whose SUBACK has no properties either).
pub fn encode_suback(
    version: Version,
    pkid: u16,
    properties: Option<wire::SubAckProperties>,
    codes: &[u8],
) -> Bytes {
    let return_codes = codes
        .iter()
        .map(|&c| {
            wire::SubscribeReasonCode::from_v5(c).unwrap_or(wire::SubscribeReasonCode::Unspecified)
        })
        .collect();
    let properties = properties.filter(|_| version == Version::V5);
    encode_for(
        version,
        wire::Packet::SubAck(wire::SubAck { pkid, return_codes }, properties),
    )
}

/// The SUBACK a client gets for the broker's (`body` after its fixed
/// header) to a SUBSCRIBE the guard cut short: the broker's codes merged
/// into the guard's `plan` (see [`merge_codes`]), its properties kept for
/// an MQTT 5 client.
pub fn suback_reply(
    version: Version,
    body: &[u8],
    plan: &[Option<u8>],
    failure: u8,
) -> Result<Bytes, PacketError> {
    let wire::Packet::SubAck(ack, properties) = decode_body(0x90, body, "SUBACK")? else {
        return Err(PacketError::Malformed("SUBACK"));
    };
    let broker: Vec<u8> = ack.return_codes.iter().map(|c| c.v5()).collect();
    let codes = merge_codes(plan, &broker, failure);
    Ok(encode_suback(version, ack.pkid, properties, &codes))
}

/// An UNSUBACK; `codes` (MQTT 5 reason codes, one per filter) only in
/// MQTT 5.
pub fn encode_unsuback(version: Version, pkid: u16, codes: &[u8]) -> Bytes {
    let reasons = match version {
        Version::V4 => Vec::new(),
        Version::V5 => codes
            .iter()
            .map(|&c| {
                wire::UnsubAckReason::from_v5(c).unwrap_or(wire::UnsubAckReason::UnspecifiedError)
            })
            .collect(),
    };
    encode_for(
        version,
        wire::Packet::UnsubAck(wire::UnsubAck { pkid, reasons }, None),
    )
}

/// Merges the broker's codes for the filters it was sent into the codes
/// the guard decided: `plan` has the guard's code where it refused a filter
/// and `None` where the broker's next code belongs. Should the broker send
/// too few codes, the missing ones are failures.
pub fn merge_codes(plan: &[Option<u8>], broker: &[u8], failure: u8) -> Vec<u8> {
    let mut broker = broker.iter().copied();
    plan.iter()
        .map(|code| code.unwrap_or_else(|| broker.next().unwrap_or(failure)))
        .collect()
}

#[cfg(test)]
#[path = "packet_tests.rs"]
mod tests;
