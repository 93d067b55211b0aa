//! MQTT 5 properties of a PUBLISH: walking a property list borrowed from
//! the frame, rebuilding one with some properties left out or added, and
//! the guard's own marker. (The properties of every other packet are
//! rumqttd's codec's: see `packet.rs`.)
//!
//! rumqttd 0.20 keeps no clock for Message Expiry, and the sidecar's router
//! wants to know who published a request. The guard sees every publication
//! on its way in, so it writes what it needs later into a user property
//! (the marker), which rumqttd stores and
//! delivers like any other, and takes it out again on the way to every
//! client. Clients never see it and cannot forge it: one sent by a client
//! is dropped on the way in.

use bytes::{BufMut, BytesMut};

use super::packet::{put_remaining_length, PacketError};

pub const MESSAGE_EXPIRY: u8 = 0x02;
pub const TOPIC_ALIAS: u8 = 0x23;
pub const USER_PROPERTY: u8 = 0x26;

/// The marker's user property name. `$` keeps it apart from names people
/// choose, as it does for topics.
pub const MARKER_KEY: &[u8] = b"$lmos";

/// One property: its identifier, its whole encoding (identifier included,
/// to copy it as it is) and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Property<'a> {
    pub id: u8,
    pub raw: &'a [u8],
    pub value: &'a [u8],
}

impl Property<'_> {
    /// A two- or four-byte integer property's value.
    pub fn int(&self) -> u32 {
        self.value
            .iter()
            .fold(0u32, |n, &b| (n << 8) | u32::from(b))
    }

    /// A user property's name, if this is one.
    pub fn user_key(&self) -> Option<&[u8]> {
        if self.id != USER_PROPERTY {
            return None;
        }
        let n = usize::from(u16::from_be_bytes([self.value[0], self.value[1]]));
        Some(&self.value[2..2 + n])
    }

    /// The guard's marker, if this is it.
    pub fn marker(&self) -> Option<Marker> {
        if self.user_key()? != MARKER_KEY {
            return None;
        }
        let at = 2 + MARKER_KEY.len();
        Marker::decode(self.value.get(at + 2..)?)
    }
}

fn varint(buf: &[u8]) -> Result<(usize, usize), PacketError> {
    let mut value = 0usize;
    for i in 0..4 {
        let byte = *buf.get(i).ok_or(PacketError::Malformed("properties"))?;
        value |= usize::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    Err(PacketError::Malformed("properties"))
}

/// The property list at the start of `bytes` (its length field first):
/// what it holds, and how many bytes it took altogether.
pub fn list(bytes: &[u8]) -> Result<(&[u8], usize), PacketError> {
    let (n, at) = varint(bytes)?;
    let content = bytes
        .get(at..at + n)
        .ok_or(PacketError::Malformed("properties"))?;
    Ok((content, at + n))
}

/// Every property of a list's content, checked against the lengths their
/// types have; stops after the first error.
pub fn walk(content: &[u8]) -> Walk<'_> {
    Walk { content, at: 0 }
}

pub struct Walk<'a> {
    content: &'a [u8],
    at: usize,
}

impl<'a> Walk<'a> {
    fn next_property(&mut self) -> Result<Property<'a>, PacketError> {
        let bad = PacketError::Malformed("properties");
        let content = self.content;
        let at = self.at;
        let id = content[at];
        let rest = &content[at + 1..];
        let two = |from: usize| -> Result<usize, PacketError> {
            let b = rest.get(from..from + 2).ok_or(bad.clone())?;
            Ok(usize::from(u16::from_be_bytes([b[0], b[1]])))
        };
        let size = match id {
            0x01 | 0x17 | 0x19 | 0x24 | 0x25 | 0x28 | 0x29 | 0x2A => 1,
            0x13 | 0x21 | 0x22 | 0x23 => 2,
            0x02 | 0x11 | 0x18 | 0x27 => 4,
            0x0B => varint(rest)?.1,
            0x03 | 0x08 | 0x09 | 0x12 | 0x15 | 0x16 | 0x1A | 0x1C | 0x1F => 2 + two(0)?,
            USER_PROPERTY => {
                let key = 2 + two(0)?;
                key + 2 + two(key)?
            }
            _ => return Err(bad),
        };
        let value = rest.get(..size).ok_or(bad)?;
        self.at += 1 + size;
        Ok(Property {
            id,
            raw: &content[at..at + 1 + size],
            value,
        })
    }
}

impl<'a> Iterator for Walk<'a> {
    type Item = Result<Property<'a>, PacketError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.content.len() {
            return None;
        }
        let next = self.next_property();
        if next.is_err() {
            self.at = self.content.len();
        }
        Some(next)
    }
}

/// Every property of a list's content, or the first error.
#[cfg(test)]
pub fn all(content: &[u8]) -> Result<Vec<Property<'_>>, PacketError> {
    walk(content).collect()
}

/// Appends a property list (length, then `parts`) to `out`.
pub fn put_list(out: &mut BytesMut, parts: &[&[u8]]) {
    put_remaining_length(out, parts.iter().map(|p| p.len()).sum());
    for p in parts {
        out.put_slice(p);
    }
}

/// A two-byte integer property.
pub fn u16_property(id: u8, value: u16) -> [u8; 3] {
    let [hi, lo] = value.to_be_bytes();
    [id, hi, lo]
}

/// A four-byte integer property.
pub fn u32_property(id: u8, value: u32) -> [u8; 5] {
    let [a, b, c, d] = value.to_be_bytes();
    [id, a, b, c, d]
}

/// What the guard remembers of a publication for its delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The QoS it was published with: no subscriber gets more (MQTT 5
    /// §3.8.4, as 3.1.1 §3.3.5).
    pub qos: u8,
    /// When it expires (Unix time, ms), if it had a Message Expiry.
    pub expires_at_ms: Option<u64>,
    /// The principal that published it, on request topics: the sidecar's
    /// router makes the invocation its principal's.
    pub principal: Option<String>,
}

impl Marker {
    /// The marker among a delivery's user properties, as the broker's
    /// in-process link hands them over.
    pub fn among(user_properties: &[(String, String)]) -> Option<Marker> {
        let (_, value) = user_properties
            .iter()
            .find(|(k, _)| k.as_bytes() == MARKER_KEY)?;
        Marker::decode(value.as_bytes())
    }

    /// The whole user property.
    pub fn property(&self) -> Vec<u8> {
        let mut value = match self.expires_at_ms {
            None => format!("q{}", self.qos),
            Some(at) => format!("q{};e{at}", self.qos),
        };
        if let Some(p) = &self.principal {
            // Last, so a name with `;` in it reads back whole.
            value.push_str(";p");
            value.push_str(p);
        }
        let mut out = Vec::with_capacity(7 + MARKER_KEY.len() + value.len());
        out.push(USER_PROPERTY);
        out.extend_from_slice(&(MARKER_KEY.len() as u16).to_be_bytes());
        out.extend_from_slice(MARKER_KEY);
        out.extend_from_slice(&(value.len() as u16).to_be_bytes());
        out.extend_from_slice(value.as_bytes());
        out
    }

    fn decode(value: &[u8]) -> Option<Marker> {
        let text = std::str::from_utf8(value).ok()?;
        let (qos, mut rest) = match text.split_once(';') {
            Some((q, rest)) => (q, Some(rest)),
            None => (text, None),
        };
        let qos = qos.strip_prefix('q')?.parse().ok()?;
        let mut expires_at_ms = None;
        if let Some(e) = rest.and_then(|r| r.strip_prefix('e')) {
            let (at, after) = match e.split_once(';') {
                Some((at, after)) => (at, Some(after)),
                None => (e, None),
            };
            expires_at_ms = Some(at.parse().ok()?);
            rest = after;
        }
        let principal = match rest {
            None => None,
            Some(r) => Some(r.strip_prefix('p')?.to_owned()),
        };
        (qos <= 2).then_some(Marker {
            qos,
            expires_at_ms,
            principal,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAYLOAD_FORMAT: u8 = 0x01;

    fn user(key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut p = vec![USER_PROPERTY];
        p.extend((key.len() as u16).to_be_bytes());
        p.extend(key);
        p.extend((value.len() as u16).to_be_bytes());
        p.extend(value);
        p
    }

    #[test]
    fn walks_every_kind_of_property() {
        let mut content = vec![PAYLOAD_FORMAT, 1];
        content.extend(u32_property(MESSAGE_EXPIRY, 70_000));
        content.extend(u16_property(TOPIC_ALIAS, 3));
        content.extend([0x0B, 0x80, 0x01]); // subscription identifier 128
        content.extend([0x03, 0, 2, b'a', b'b']); // content type
        content.extend(user(b"k", b"v"));
        let props = all(&content).unwrap();
        let ids: Vec<u8> = props.iter().map(|p| p.id).collect();
        assert_eq!(ids, [0x01, 0x02, 0x23, 0x0B, 0x03, 0x26]);
        assert_eq!(props[1].int(), 70_000);
        assert_eq!(props[2].int(), 3);
        assert_eq!(props[5].user_key(), Some(&b"k"[..]));
        let total: usize = props.iter().map(|p| p.raw.len()).sum();
        assert_eq!(total, content.len());
        // Truncated anywhere, or an unknown identifier: malformed.
        for cut in 1..content.len() {
            if all(&content[..cut]).is_ok() {
                let ends: Vec<usize> = props
                    .iter()
                    .scan(0, |at, p| {
                        *at += p.raw.len();
                        Some(*at)
                    })
                    .collect();
                assert!(ends.contains(&cut), "cut at {cut} must fail");
            }
        }
        assert!(all(&[0x7F, 0]).is_err());
    }

    #[test]
    fn the_marker_round_trips_and_nothing_else_is_one() {
        for m in [
            Marker {
                qos: 0,
                expires_at_ms: None,
                principal: None,
            },
            Marker {
                qos: 1,
                expires_at_ms: Some(1_732_290_000_123),
                principal: None,
            },
            Marker {
                qos: 2,
                expires_at_ms: None,
                principal: Some("alice".into()),
            },
            Marker {
                qos: 1,
                expires_at_ms: Some(7),
                principal: Some("odd;p;e1 name".into()),
            },
        ] {
            let raw = m.property();
            let props = all(&raw).unwrap();
            assert_eq!(props.len(), 1);
            assert_eq!(props[0].marker(), Some(m));
        }
        for (k, v) in [
            (&b"$lmos"[..], &b"q3"[..]),
            (b"$lmos", b"x"),
            (b"lmos", b"q1"),
            (b"$lmos", b"q1;x5"),
        ] {
            let raw = user(k, v);
            assert_eq!(all(&raw).unwrap()[0].marker(), None, "{k:?} {v:?}");
        }
    }

    #[test]
    fn lists_carry_their_length() {
        let mut out = BytesMut::new();
        put_list(
            &mut out,
            &[&[PAYLOAD_FORMAT, 1], &u16_property(TOPIC_ALIAS, 1)],
        );
        assert_eq!(&out[..], &[5, 1, 1, 0x23, 0, 1]);
        let (content, used) = list(&out).unwrap();
        assert_eq!((content.len(), used), (5, 6));
        assert!(list(&[5, 1]).is_err());
    }
}
