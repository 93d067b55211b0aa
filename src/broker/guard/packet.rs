//! MQTT framing and the few packets the guard must read or write. Pure
//! functions over byte slices: no I/O, no allocation beyond what an encoded
//! packet needs, and no panics on any input (the proptests below hold that).
//!
//! SUBSCRIBE and UNSUBSCRIBE are read and written with rumqttd's codec
//! (`rumqttd::protocol`, patched where it was lenient: see
//! `vendor/rumqttd/PATCHES.md`); the guard only adds its own policy on
//! what they hold. Kept here: the framing; PUBLISH, a view borrowed from
//! the frame, because every publication and delivery is read (rumqttd's
//! decoder copies topic, payload and properties); and CONNECT, because
//! rumqttd's holds the password as a `String` and so refuses a binary one,
//! which MQTT allows and [`super::Policy::connect`] takes. The guard
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

    /// What an MQTT 5 property list holds, every property checked.
    fn property_content(&mut self) -> Result<&'a [u8], PacketError> {
        let (content, _) = properties::list(self.properties()?)?;
        properties::all(content)?;
        Ok(content)
    }
}

/// What the guard needs from a CONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect<'a> {
    pub version: Version,
    /// The connect flags byte as sent.
    pub flags: u8,
    /// Clean Session (3.1.1) / Clean Start (5).
    pub clean: bool,
    /// Seconds; 0 turns keep-alive off.
    pub keep_alive: u16,
    /// What the MQTT 5 property list holds; empty on 3.1.1.
    pub properties: &'a [u8],
    pub client_id: &'a str,
    pub will: Option<Will<'a>>,
    pub username: Option<&'a str>,
    pub password: Option<&'a [u8]>,
}

/// A CONNECT's last will.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Will<'a> {
    /// What the MQTT 5 will property list holds; empty on 3.1.1.
    pub properties: &'a [u8],
    pub topic: &'a str,
    pub message: &'a [u8],
}

/// Decodes a CONNECT body (after the fixed header).
pub fn connect(body: &[u8]) -> Result<Connect<'_>, PacketError> {
    let mut r = Reader::new(body, "CONNECT");
    let name = r.binary()?;
    let level = r.u8()?;
    let version = match (name, level) {
        (b"MQTT", 4) => Version::V4,
        (b"MQTT", 5) => Version::V5,
        _ => {
            return Err(PacketError::Protocol {
                name: String::from_utf8_lossy(name).into_owned(),
                level,
            })
        }
    };
    let flags = r.u8()?;
    // Bit 0 is reserved (MQTT-3.1.2-3); a will's QoS and retain need the
    // will flag; QoS 3 does not exist; a password needs a user name in
    // 3.1.1.
    let will = flags & 0x04 != 0;
    let will_qos = (flags >> 3) & 0x03;
    if flags & 0x01 != 0
        || will_qos == 3
        || (!will && flags & 0x38 != 0)
        || (version == Version::V4 && flags & 0xC0 == 0x40)
    {
        return Err(r.malformed());
    }
    let keep_alive = r.u16()?;
    let props = match version {
        Version::V4 => &[][..],
        Version::V5 => r.property_content()?,
    };
    let client_id = r.string()?;
    let will = if will {
        let properties = match version {
            Version::V4 => &[][..],
            Version::V5 => r.property_content()?,
        };
        let topic = r.topic()?;
        let message = r.binary()?;
        Some(Will {
            properties,
            topic,
            message,
        })
    } else {
        None
    };
    let username = if flags & 0x80 != 0 {
        Some(r.string()?)
    } else {
        None
    };
    let password = if flags & 0x40 != 0 {
        Some(r.binary()?)
    } else {
        None
    };
    Ok(Connect {
        version,
        flags,
        clean: flags & 0x02 != 0,
        keep_alive,
        properties: props,
        client_id,
        will,
        username,
        password,
    })
}

fn put_binary(out: &mut BytesMut, b: &[u8]) {
    // Every field comes from a decoded packet, so it fits in 16 bits.
    out.put_u16(b.len() as u16);
    out.put_slice(b);
}

/// The MQTT 5 CONNECT the broker gets for a client's (3.1.1 or 5): the
/// same client, will and credentials, with the clean start, keep-alive and
/// properties the guard chose.
pub fn encode_connect(c: &Connect<'_>, clean: bool, keep_alive: u16, props: &[&[u8]]) -> Bytes {
    let mut body = BytesMut::with_capacity(64 + c.client_id.len());
    put_binary(&mut body, b"MQTT");
    body.put_u8(5);
    body.put_u8((c.flags & !0x02) | if clean { 0x02 } else { 0 });
    body.put_u16(keep_alive);
    properties::put_list(&mut body, props);
    put_binary(&mut body, c.client_id.as_bytes());
    if let Some(will) = &c.will {
        properties::put_list(&mut body, &[will.properties]);
        put_binary(&mut body, will.topic.as_bytes());
        put_binary(&mut body, will.message);
    }
    if let Some(u) = c.username {
        put_binary(&mut body, u.as_bytes());
    }
    if let Some(p) = c.password {
        put_binary(&mut body, p);
    }
    packet(0x10, &body)
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

/// A SUBACK from the broker: packet identifier, raw properties, codes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubAck<'a> {
    pub pkid: u16,
    pub properties: &'a [u8],
    pub codes: &'a [u8],
}

pub fn suback(body: &[u8], version: Version) -> Result<SubAck<'_>, PacketError> {
    let mut r = Reader::new(body, "SUBACK");
    let pkid = r.u16()?;
    let properties = match version {
        Version::V4 => &[][..],
        Version::V5 => r.properties()?,
    };
    Ok(SubAck {
        pkid,
        properties,
        codes: r.buf,
    })
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

fn packet(first: u8, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(body.len() + 5);
    out.put_u8(first);
    put_remaining_length(&mut out, body.len());
    out.put_slice(body);
    out.freeze()
}

/// A CONNACK refusing the connection (no session present, no properties).
pub fn connack(version: Version, code: u8) -> Bytes {
    match version {
        Version::V4 => packet(0x20, &[0, code]),
        Version::V5 => packet(0x20, &[0, code, 0]),
    }
}

/// A PUBACK; MQTT 3.1.1 has no reason code, so `reason` is then ignored.
pub fn puback(version: Version, pkid: u16, reason: u8) -> Bytes {
    let [hi, lo] = pkid.to_be_bytes();
    match version {
        Version::V4 => packet(0x40, &[hi, lo]),
        Version::V5 => packet(0x40, &[hi, lo, reason]),
    }
}

/// An MQTT 5 PUBREC with a reason code.
pub fn pubrec(pkid: u16, reason: u8) -> Bytes {
    let [hi, lo] = pkid.to_be_bytes();
    packet(0x50, &[hi, lo, reason])
}

/// A PUBCOMP (success).
pub fn pubcomp(pkid: u16) -> Bytes {
    packet(0x70, &pkid.to_be_bytes())
}

/// An MQTT 5 DISCONNECT with a reason code.
pub fn disconnect(reason: u8) -> Bytes {
    packet(0xE0, &[reason])
}

/// A SUBACK; `properties` are raw MQTT 5 properties (ignored on 3.1.1,
/// empty means none).
pub fn encode_suback(version: Version, pkid: u16, properties: &[u8], codes: &[u8]) -> Bytes {
    let mut body = Vec::with_capacity(3 + properties.len() + codes.len());
    body.extend_from_slice(&pkid.to_be_bytes());
    if version == Version::V5 {
        push_properties(&mut body, properties);
    }
    body.extend_from_slice(codes);
    packet(0x90, &body)
}

/// MQTT 5 properties as given, raw, or an empty property list for none.
fn push_properties(body: &mut Vec<u8>, properties: &[u8]) {
    if properties.is_empty() {
        body.push(0);
    } else {
        body.extend_from_slice(properties);
    }
}

/// An UNSUBACK; `codes` (one per filter) only in MQTT 5.
pub fn encode_unsuback(version: Version, pkid: u16, codes: &[u8]) -> Bytes {
    let mut body = pkid.to_be_bytes().to_vec();
    if version == Version::V5 {
        body.push(0);
        body.extend_from_slice(codes);
    }
    packet(0xB0, &body)
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
