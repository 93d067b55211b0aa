//! MQTT 3.1.1 clients on rumqttd's MQTT 5 listener. Pure functions over
//! packet bodies.
//!
//! rumqttd 0.20 panics when it writes a message carrying MQTT 5 properties
//! (a user property, a content type, ...) to an MQTT 3.1.1 connection, and
//! the panic poisons a lock every later CONNECT of that listener takes. So
//! every client reaches the broker as MQTT 5: the guard rewrites what a
//! 3.1.1 client sends into MQTT 5 (a SUBSCRIBE or UNSUBSCRIBE re-encoded by
//! rumqttd's codec, see `packet.rs`; a CONNECT by `handshake.rs`) and, here,
//! what the broker sends back into 3.1.1 (properties dropped, reason codes
//! mapped). MQTT 5 publishers' properties then reach MQTT 5
//! subscribers intact and 3.1.1 subscribers without them, as MQTT 5 §3.3.2
//! intends.

use bytes::{BufMut, Bytes, BytesMut};

use super::packet::{self, PacketError};

/// Builds a packet from its first byte and the pieces of its body.
fn assemble(first: u8, parts: &[&[u8]]) -> Bytes {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = BytesMut::with_capacity(len + 5);
    out.put_u8(first);
    packet::put_remaining_length(&mut out, len);
    for part in parts {
        out.put_slice(part);
    }
    out.freeze()
}

fn short(what: &'static str) -> PacketError {
    PacketError::Malformed(what)
}

/// The length of an MQTT 5 property list (its own length field included)
/// at the start of `bytes`.
fn properties_len(bytes: &[u8], what: &'static str) -> Result<usize, PacketError> {
    let mut value = 0usize;
    for i in 0..4 {
        let byte = *bytes.get(i).ok_or(short(what))?;
        value |= usize::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            let n = i + 1 + value;
            return if bytes.len() < n {
                Err(short(what))
            } else {
                Ok(n)
            };
        }
    }
    Err(short(what))
}

/// An MQTT 5 CONNACK reason code as a 3.1.1 return code.
pub fn connack_code(reason: u8) -> u8 {
    match reason {
        0x00 => 0,
        0x84 => 1,
        0x85 => 2,
        0x86 => 4,
        0x87 => 5,
        _ => 3,
    }
}

/// An MQTT 5 SUBACK reason code as a 3.1.1 return code.
pub fn suback_code(reason: u8) -> u8 {
    if reason <= 2 {
        reason
    } else {
        0x80
    }
}

/// What a 3.1.1 client gets for a packet the broker sent in MQTT 5.
#[derive(Debug, PartialEq, Eq)]
pub enum Down {
    Packet(Bytes),
    /// The broker closes the connection (an MQTT 5 DISCONNECT), which
    /// 3.1.1 says by closing.
    Close,
}

/// Translates one MQTT 5 packet from the broker for a 3.1.1 client.
pub fn downstream(first: u8, body: &[u8]) -> Result<Down, PacketError> {
    let kind = first >> 4;
    let translated = match kind {
        packet::CONNACK => {
            let b = body.get(..2).ok_or(short("CONNACK"))?;
            assemble(0x20, &[&[b[0] & 0x01, connack_code(b[1])]])
        }
        packet::PUBACK | packet::PUBREC | packet::PUBREL | packet::PUBCOMP => {
            assemble(first, &[body.get(..2).ok_or(short("ack"))?])
        }
        packet::SUBACK => {
            let pkid = body.get(..2).ok_or(short("SUBACK"))?;
            let properties = properties_len(&body[2..], "SUBACK")?;
            let codes: Vec<u8> = body[2 + properties..]
                .iter()
                .map(|&c| suback_code(c))
                .collect();
            assemble(0x90, &[pkid, &codes])
        }
        packet::UNSUBACK => assemble(0xB0, &[body.get(..2).ok_or(short("UNSUBACK"))?]),
        packet::DISCONNECT => return Ok(Down::Close),
        _ => assemble(first, &[body]),
    };
    Ok(Down::Packet(translated))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_packets_lose_their_properties() {
        assert_eq!(
            downstream(0x20, &[1, 0x00, 3, 0x24, 0x01, 0x00]).unwrap(),
            Down::Packet(Bytes::from_static(&[0x20, 2, 1, 0]))
        );
        assert_eq!(
            downstream(0x20, &[0, 0x86, 0]).unwrap(),
            Down::Packet(Bytes::from_static(&[0x20, 2, 0, 4]))
        );
        assert_eq!(
            downstream(0x40, &[0, 5, 0x10, 0]).unwrap(),
            Down::Packet(Bytes::from_static(&[0x40, 2, 0, 5]))
        );
        assert_eq!(
            downstream(0x90, &[0, 5, 0, 1, 0x87, 2]).unwrap(),
            Down::Packet(Bytes::from_static(&[0x90, 5, 0, 5, 1, 0x80, 2]))
        );
        assert_eq!(
            downstream(0xB0, &[0, 5, 0, 0]).unwrap(),
            Down::Packet(Bytes::from_static(&[0xB0, 2, 0, 5]))
        );
        assert_eq!(downstream(0xE0, &[0x8E, 0]).unwrap(), Down::Close);
        assert_eq!(
            downstream(0xD0, &[]).unwrap(),
            Down::Packet(Bytes::from_static(&[0xD0, 0]))
        );
    }

    #[test]
    fn truncated_packets_are_errors() {
        assert!(downstream(0x90, &[0]).is_err());
    }
}
