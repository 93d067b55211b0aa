//! Every packet but PUBLISH, read and written with rumqttd's codec
//! (`rumqttd::protocol`, patched where it was lenient or fell short: see
//! `vendor/rumqttd/PATCHES.md`); the guard adds its own policy on what they
//! hold (control characters in filters).

use bytes::{BufMut, Bytes, BytesMut};
use rumqttd::protocol::{self as wire, v4::V4, v5::V5, Protocol};

use super::{has_control, merge_codes, put_remaining_length, PacketError, Version};

/// Decodes one whole packet (fixed header included) with rumqttd's codec.
pub(in crate::broker::guard) fn decode(
    version: Version,
    raw: &[u8],
    what: &'static str,
) -> Result<wire::Packet, PacketError> {
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
pub(super) fn encode(packet: wire::Packet, what: &'static str) -> Result<Bytes, PacketError> {
    let mut out = BytesMut::new();
    match V5.write(packet, &mut out) {
        Ok(_) => Ok(out.freeze()),
        Err(e) => Err(PacketError::Codec {
            what,
            why: e.to_string(),
        }),
    }
}

/// Filters with control characters are malformed (see `Reader::topic`).
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

/// Decodes one packet the broker sent in MQTT 5 from its first byte and
/// body (reassembled: the rare packets this serves are not worth a second
/// reader).
pub(in crate::broker::guard) fn decode_body(
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
pub(in crate::broker::guard) fn encode_for(version: Version, packet: wire::Packet) -> Bytes {
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

/// An MQTT 5 CONNACK refusing the connection with reason code `code` and
/// a Reason String saying why.
pub fn connack_because(code: u8, reason: &str) -> Bytes {
    let connack = wire::ConnAck {
        session_present: false,
        code: wire::ConnectReturnCode::from_v5(code)
            .unwrap_or(wire::ConnectReturnCode::ServiceUnavailable),
    };
    let properties = wire::ConnAckProperties {
        reason_string: Some(reason.to_owned()),
        ..Default::default()
    };
    encode_for(
        Version::V5,
        wire::Packet::ConnAck(connack, Some(properties)),
    )
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
