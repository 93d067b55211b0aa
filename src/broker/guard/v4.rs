//! MQTT 3.1.1 clients on rumqttd's MQTT 5 listener. Pure functions over
//! packet bodies.
//!
//! rumqttd 0.20 panics when it writes a message carrying MQTT 5 properties
//! (a user property, a content type, ...) to an MQTT 3.1.1 connection, and
//! the panic poisons a lock every later CONNECT of that listener takes. So
//! every client reaches the broker as MQTT 5: the guard rewrites what a
//! 3.1.1 client sends into MQTT 5 (re-encoded by rumqttd's codec, see
//! `packet.rs`; the CONNECT's choices are `handshake.rs`'s) and, here, what
//! the broker sends back into 3.1.1 (properties dropped, reason codes mapped
//! by rumqttd's tables). MQTT 5 publishers' properties then reach MQTT 5
//! subscribers intact and 3.1.1 subscribers without them, as MQTT 5 §3.3.2
//! intends.

use bytes::{BufMut, Bytes, BytesMut};
use rumqttd::protocol as wire;

use super::packet::{self, decode_body, encode_for, PacketError, Version};

/// What a 3.1.1 client gets for a packet the broker sent in MQTT 5.
#[derive(Debug, PartialEq, Eq)]
pub enum Down {
    Packet(Bytes),
    /// The broker closes the connection (an MQTT 5 DISCONNECT), which
    /// 3.1.1 says by closing.
    Close,
}

/// Translates one MQTT 5 packet from the broker for a 3.1.1 client:
/// decoded and written again with rumqttd's codec, whose 3.1.1 writers
/// leave the properties out and map the reason codes (patch 26).
pub fn downstream(first: u8, body: &[u8]) -> Result<Down, PacketError> {
    let v4 = |packet| Ok(Down::Packet(encode_for(Version::V4, packet)));
    match first >> 4 {
        packet::PUBACK | packet::PUBREC | packet::PUBREL | packet::PUBCOMP => {
            // Every QoS 1 and 2 acknowledgement: only the packet identifier
            // carries over, read as the framing reads it.
            let pkid = packet::pubrel(body)?;
            v4(ack(first >> 4, pkid))
        }
        packet::DISCONNECT => Ok(Down::Close),
        packet::CONNACK | packet::SUBACK | packet::UNSUBACK => {
            match decode_body(first, body, "acknowledgement")? {
                wire::Packet::ConnAck(ack, _) => v4(wire::Packet::ConnAck(ack, None)),
                wire::Packet::SubAck(ack, _) => v4(wire::Packet::SubAck(ack, None)),
                wire::Packet::UnsubAck(ack, _) => v4(wire::Packet::UnsubAck(
                    wire::UnsubAck {
                        pkid: ack.pkid,
                        reasons: Vec::new(),
                    },
                    None,
                )),
                _ => Err(PacketError::Malformed("acknowledgement")),
            }
        }
        // PINGRESP, the same in both versions.
        _ => {
            let mut out = BytesMut::with_capacity(body.len() + 5);
            out.put_u8(first);
            packet::put_remaining_length(&mut out, body.len());
            out.put_slice(body);
            Ok(Down::Packet(out.freeze()))
        }
    }
}

/// A successful PUBACK, PUBREC, PUBREL or PUBCOMP (`kind`).
fn ack(kind: u8, pkid: u16) -> wire::Packet {
    match kind {
        packet::PUBACK => {
            let reason = wire::PubAckReason::Success;
            wire::Packet::PubAck(wire::PubAck { pkid, reason }, None)
        }
        packet::PUBREC => {
            let reason = wire::PubRecReason::Success;
            wire::Packet::PubRec(wire::PubRec { pkid, reason }, None)
        }
        packet::PUBREL => {
            let reason = wire::PubRelReason::Success;
            wire::Packet::PubRel(wire::PubRel { pkid, reason }, None)
        }
        _ => {
            let reason = wire::PubCompReason::Success;
            wire::Packet::PubComp(wire::PubComp { pkid, reason }, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_packets_lose_their_properties() {
        assert_eq!(
            downstream(0x20, &[1, 0x00, 2, 0x24, 0x01]).unwrap(),
            Down::Packet(Bytes::from_static(&[0x20, 2, 1, 0]))
        );
        // Bad User Name or Password, Not Authorized, Server Busy.
        for (v5, v4) in [(0x86, 4), (0x87, 5), (0x89, 3), (0x84, 1), (0x85, 2)] {
            assert_eq!(
                downstream(0x20, &[0, v5, 0]).unwrap(),
                Down::Packet(Bytes::copy_from_slice(&[0x20, 2, 0, v4]))
            );
        }
        assert_eq!(
            downstream(0x40, &[0, 5, 0x10, 0]).unwrap(),
            Down::Packet(Bytes::from_static(&[0x40, 2, 0, 5]))
        );
        assert_eq!(
            downstream(0x62, &[0, 5, 0x92, 0]).unwrap(),
            Down::Packet(Bytes::from_static(&[0x62, 2, 0, 5]))
        );
        // Not Authorized and Implementation Specific Error are 0x80.
        assert_eq!(
            downstream(0x90, &[0, 5, 0, 1, 0x87, 2, 0x83]).unwrap(),
            Down::Packet(Bytes::from_static(&[0x90, 6, 0, 5, 1, 0x80, 2, 0x80]))
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
        assert!(downstream(0x40, &[0]).is_err());
        assert!(downstream(0x20, &[0]).is_err());
    }
}
