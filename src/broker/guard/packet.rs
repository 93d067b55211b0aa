//! MQTT framing and the packets the guard reads or writes. Pure functions
//! over byte slices: no I/O and no panics on any input (the proptests in
//! `packet_tests.rs` hold that).
//!
//! Every packet but PUBLISH is read and written with rumqttd's codec
//! (`rumqttd::protocol`, patched where it was lenient or fell short: see
//! `vendor/rumqttd/PATCHES.md`, patches 16-18 and 24-26), in `codec.rs`
//! and `connect.rs`; the guard adds its own policy on what they hold. Kept
//! here: the framing (the fixed header and the byte budgets it enforces
//! before a body is buffered, and a packet identifier read off an
//! acknowledgement) and PUBLISH, a view borrowed from the frame, because
//! every publication and delivery is read and rumqttd's decoder copies
//! topic, payload and properties. The guard forwards the original bytes of
//! everything it does not change.

use bytes::{BufMut, BytesMut};

use super::properties;

mod codec;
mod connect;

pub use codec::{
    connack, connack_because, disconnect, encode_suback, encode_subscribe, encode_unsuback,
    encode_unsubscribe, puback, pubcomp, pubrec, suback_reply, subscribe, unsubscribe, Subscribe,
    Unsubscribe,
};
pub(super) use codec::{decode_body, encode_for};
pub use connect::{connect, encode_connect, Connect, Will};

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
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8], what: &'static str) -> Reader<'a> {
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

    pub(super) fn u8(&mut self) -> Result<u8, PacketError> {
        Ok(self.take(1)?[0])
    }

    pub(super) fn u16(&mut self) -> Result<u16, PacketError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(super) fn binary(&mut self) -> Result<&'a [u8], PacketError> {
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
pub(super) fn has_control(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter().enumerate().any(|(i, &c)| {
        c < 0x20
            || c == 0x7F
            || (c == 0xC2 && b.get(i + 1).is_some_and(|n| (0x80..=0x9F).contains(n)))
    })
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
