//! What the guard decides at CONNECT and CONNACK: the session and limits a
//! client asked for, the CONNECT rumqttd gets, and the CONNACK the client
//! gets. Pure functions over packets.
//!
//! The client's Receive Maximum, Maximum Packet Size and Topic Alias
//! Maximum are the guard's to honour ([`super::delivery`]), and its Session
//! Expiry Interval the guard's to keep ([`super::sessions`]): rumqttd gets
//! none of the first three (given a Topic Alias Maximum, it would alias by
//! filter).
//! The CONNACK announces what the guard enforces in turn.

use bytes::{BufMut, Bytes, BytesMut};

use super::delivery::ClientLimits;
use super::packet::{self, put_remaining_length, Connect, PacketError, Version};
use super::properties::{self, u16_property, u32_property};
use super::sessions::Expiry;

/// Topic aliases a client may set on one connection.
pub const CLIENT_ALIAS_MAX: u16 = 64;

/// MQTT 5 "Protocol Error".
const PROTOCOL_ERROR: u8 = 0x82;

/// What a client asked for in its CONNECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asked {
    pub expiry: Expiry,
    pub limits: ClientLimits,
}

/// The session and limits a CONNECT asks for, or the reason code refusing
/// it (a Receive Maximum or Maximum Packet Size of 0 is a protocol error).
pub fn asked(c: &Connect<'_>) -> Result<Asked, u8> {
    if c.version == Version::V4 {
        return Ok(Asked {
            expiry: if c.clean { Expiry(0) } else { Expiry::NEVER },
            limits: ClientLimits::DEFAULT,
        });
    }
    let mut asked = Asked {
        expiry: Expiry(0),
        limits: ClientLimits::DEFAULT,
    };
    for p in properties::walk(c.properties) {
        let p = p.map_err(|_| PROTOCOL_ERROR)?;
        let value = p.int();
        match p.id {
            properties::SESSION_EXPIRY => asked.expiry = Expiry(value),
            properties::RECEIVE_MAXIMUM if value == 0 => return Err(PROTOCOL_ERROR),
            properties::RECEIVE_MAXIMUM => asked.limits.receive_max = value as u16,
            properties::MAXIMUM_PACKET_SIZE if value == 0 => return Err(PROTOCOL_ERROR),
            properties::MAXIMUM_PACKET_SIZE => {
                asked.limits.max_packet = usize::try_from(value).unwrap_or(usize::MAX)
            }
            properties::TOPIC_ALIAS_MAXIMUM => asked.limits.alias_max = value as u16,
            _ => {}
        }
    }
    Ok(asked)
}

/// The properties rumqttd must not see: the guard honours them. (rumqttd
/// gets the Session Expiry Interval, which it only uses to cap the Will
/// Delay Interval, as MQTT 5 §3.1.3.2.2 says.)
fn guards(id: u8) -> bool {
    matches!(
        id,
        properties::RECEIVE_MAXIMUM
            | properties::MAXIMUM_PACKET_SIZE
            | properties::TOPIC_ALIAS_MAXIMUM
    )
}

/// The MQTT 5 CONNECT rumqttd gets for a client's.
pub fn upstream_connect(c: &Connect<'_>, clean: bool, keep_alive: u16) -> Bytes {
    let kept: Vec<&[u8]> = properties::walk(c.properties)
        .filter_map(Result::ok)
        .filter(|p| !guards(p.id))
        .map(|p| p.raw)
        .collect();
    packet::encode_connect(c, clean, keep_alive, &kept)
}

/// What the guard announces to MQTT 5 clients and enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// Unacknowledged QoS 1 and 2 publications a client may have.
    pub receive_max: u16,
    /// Largest packet accepted.
    pub max_packet: u32,
    /// The keep-alive the client must use instead of its own
    /// (`mqtt.max_keep_alive_s`), when it asked for more or for none.
    pub server_keep_alive: Option<u16>,
}

/// The keep-alive a client is held to, and whether its CONNACK must say
/// so (Server Keep Alive): an MQTT 5 client asking for more than `max`
/// seconds, or for none (0), gets `max`. 3.1.1 has no way to tell a
/// client, so 3.1.1 clients keep what they ask. `max` 0: no maximum.
pub fn keep_alive(version: Version, asked: u16, max: u16) -> (u16, Option<u16>) {
    if max == 0 || version != Version::V5 || (asked != 0 && asked <= max) {
        return (asked, None);
    }
    (max, Some(max))
}

/// The CONNACK an MQTT 5 client gets for rumqttd's (`body` after the
/// fixed header): rumqttd's properties but its limits, and the guard's.
pub fn connack(body: &[u8], offer: Offer) -> Result<Bytes, PacketError> {
    let head = body.get(..2).ok_or(PacketError::Malformed("CONNACK"))?;
    let (content, _) = properties::list(&body[2..])?;
    let mut props: Vec<&[u8]> = Vec::new();
    for p in properties::walk(content) {
        let p = p?;
        if !matches!(
            p.id,
            properties::TOPIC_ALIAS_MAXIMUM
                | properties::RECEIVE_MAXIMUM
                | properties::MAXIMUM_PACKET_SIZE
        ) {
            props.push(p.raw);
        }
    }
    let ours = [
        u16_property(properties::RECEIVE_MAXIMUM, offer.receive_max),
        u16_property(properties::TOPIC_ALIAS_MAXIMUM, CLIENT_ALIAS_MAX),
    ];
    let size = u32_property(properties::MAXIMUM_PACKET_SIZE, offer.max_packet);
    let server_keep_alive = offer
        .server_keep_alive
        .map(|k| u16_property(properties::SERVER_KEEP_ALIVE, k));
    if head[1] == 0 {
        props.extend(ours.iter().map(|p| &p[..]));
        props.push(&size);
        props.extend(server_keep_alive.iter().map(|p| &p[..]));
    }
    let mut b = BytesMut::new();
    b.put_slice(head);
    properties::put_list(&mut b, &props);
    let mut out = BytesMut::with_capacity(b.len() + 5);
    out.put_u8(0x20);
    put_remaining_length(&mut out, b.len());
    out.put_slice(&b);
    Ok(out.freeze())
}

/// The Session Expiry Interval an MQTT 5 DISCONNECT sets, if any.
pub fn disconnect_expiry(body: &[u8]) -> Option<u32> {
    let (content, _) = properties::list(body.get(1..)?).ok()?;
    properties::walk(content)
        .filter_map(Result::ok)
        .find(|p| p.id == properties::SESSION_EXPIRY)
        .map(|p| p.int())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::guard::packet::frame;

    fn v5_connect(props: &[u8]) -> Vec<u8> {
        let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 5, 0x02, 0, 60];
        body.push(props.len() as u8);
        body.extend(props);
        body.extend([0, 1, b'c']);
        body
    }

    #[test]
    fn the_guard_keeps_what_the_client_asked_and_rumqttd_never_sees_it() {
        let mut props = u32_property(properties::SESSION_EXPIRY, 30).to_vec();
        props.extend(u16_property(properties::RECEIVE_MAXIMUM, 2));
        props.extend(u32_property(properties::MAXIMUM_PACKET_SIZE, 64));
        props.extend(u16_property(properties::TOPIC_ALIAS_MAXIMUM, 5));
        props.extend([properties::USER_PROPERTY, 0, 1, b'k', 0, 1, b'v']);
        let body = v5_connect(&props);
        let c = packet::connect(&body).unwrap();
        assert_eq!(
            asked(&c),
            Ok(Asked {
                expiry: Expiry(30),
                limits: ClientLimits {
                    max_packet: 64,
                    receive_max: 2,
                    alias_max: 5
                }
            })
        );
        let up = upstream_connect(&c, false, 60);
        let h = frame(&up, usize::MAX).unwrap().unwrap();
        let again = packet::connect(&up[h.header_len..]).unwrap();
        assert!(!again.clean);
        let mut kept = u32_property(properties::SESSION_EXPIRY, 30).to_vec();
        kept.extend([properties::USER_PROPERTY, 0, 1, b'k', 0, 1, b'v']);
        assert_eq!(again.properties, &kept[..]);
        for zero in [
            u16_property(properties::RECEIVE_MAXIMUM, 0).to_vec(),
            u32_property(properties::MAXIMUM_PACKET_SIZE, 0).to_vec(),
        ] {
            let body = v5_connect(&zero);
            assert_eq!(asked(&packet::connect(&body).unwrap()), Err(0x82));
        }
    }

    #[test]
    fn the_connack_announces_the_guards_limits_instead_of_rumqttds() {
        // rumqttd: session present, success, Topic Alias Maximum 4096.
        let theirs = [1, 0, 3, 0x22, 0x10, 0x00];
        let offer = Offer {
            receive_max: 100,
            max_packet: 1 << 20,
            server_keep_alive: None,
        };
        let out = connack(&theirs, offer).unwrap();
        let h = frame(&out, usize::MAX).unwrap().unwrap();
        let body = &out[h.header_len..];
        assert_eq!(&body[..2], &[1, 0]);
        let (content, _) = properties::list(&body[2..]).unwrap();
        let props: Vec<(u8, u32)> = properties::all(content)
            .unwrap()
            .iter()
            .map(|p| (p.id, p.int()))
            .collect();
        assert_eq!(
            props,
            [
                (0x21, 100),
                (0x22, u32::from(CLIENT_ALIAS_MAX)),
                (0x27, 1 << 20)
            ]
        );
        // A refusal carries none of them.
        let out = connack(&[0, 0x87, 0], offer).unwrap();
        assert_eq!(&out[..], &[0x20, 3, 0, 0x87, 0]);
    }

    #[test]
    fn a_disconnect_may_change_the_expiry() {
        assert_eq!(disconnect_expiry(&[]), None);
        assert_eq!(disconnect_expiry(&[0]), None);
        let mut body = vec![0, 5];
        body.extend(u32_property(properties::SESSION_EXPIRY, 7));
        assert_eq!(disconnect_expiry(&body), Some(7));
    }
    #[test]
    fn a_maximum_keep_alive_is_told_to_mqtt_5_clients_only() {
        use super::keep_alive;
        assert_eq!(keep_alive(Version::V5, 120, 60), (60, Some(60)));
        assert_eq!(keep_alive(Version::V5, 0, 60), (60, Some(60)));
        assert_eq!(keep_alive(Version::V5, 60, 60), (60, None));
        assert_eq!(keep_alive(Version::V5, 30, 60), (30, None));
        assert_eq!(keep_alive(Version::V5, 120, 0), (120, None));
        assert_eq!(keep_alive(Version::V4, 120, 60), (120, None));
        assert_eq!(keep_alive(Version::V4, 0, 60), (0, None));
    }
}
