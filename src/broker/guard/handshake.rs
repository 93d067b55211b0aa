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

use bytes::Bytes;
use rumqttd::protocol as wire;

use super::delivery::ClientLimits;
use super::packet::{self, Connect, PacketError, Version};
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
pub fn asked(c: &Connect) -> Result<Asked, u8> {
    if c.version == Version::V4 {
        return Ok(Asked {
            expiry: if c.clean { Expiry(0) } else { Expiry::NEVER },
            limits: ClientLimits::DEFAULT,
        });
    }
    let default = ClientLimits::DEFAULT;
    let Some(p) = &c.properties else {
        return Ok(Asked {
            expiry: Expiry(0),
            limits: default,
        });
    };
    if p.receive_maximum == Some(0) || p.max_packet_size == Some(0) {
        return Err(PROTOCOL_ERROR);
    }
    Ok(Asked {
        expiry: Expiry(p.session_expiry_interval.unwrap_or(0)),
        limits: ClientLimits {
            receive_max: p.receive_maximum.unwrap_or(default.receive_max),
            max_packet: p.max_packet_size.map_or(default.max_packet, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
            alias_max: p.topic_alias_max.unwrap_or(default.alias_max),
        },
    })
}

/// The MQTT 5 CONNECT rumqttd gets for a client's. rumqttd does not see the
/// Receive Maximum, Maximum Packet Size and Topic Alias Maximum: the guard
/// honours them. (It gets the Session Expiry Interval, which it only uses
/// to cap the Will Delay Interval, as MQTT 5 §3.1.3.2.2 says.)
pub fn upstream_connect(c: &Connect, clean: bool, keep_alive: u16) -> Result<Bytes, PacketError> {
    let properties = c.properties.clone().map(|p| wire::ConnectProperties {
        receive_maximum: None,
        max_packet_size: None,
        topic_alias_max: None,
        ..p
    });
    packet::encode_connect(c, clean, keep_alive, properties)
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
    let wire::Packet::ConnAck(ack, properties) = packet::decode_body(0x20, body, "CONNACK")? else {
        return Err(PacketError::Malformed("CONNACK"));
    };
    let theirs = wire::ConnAckProperties {
        receive_max: None,
        topic_alias_max: None,
        max_packet_size: None,
        ..properties.unwrap_or_default()
    };
    // A refusal carries none of the guard's limits.
    let properties = match ack.code {
        wire::ConnectReturnCode::Success => wire::ConnAckProperties {
            receive_max: Some(offer.receive_max),
            topic_alias_max: Some(CLIENT_ALIAS_MAX),
            max_packet_size: Some(offer.max_packet),
            server_keep_alive: offer.server_keep_alive.or(theirs.server_keep_alive),
            ..theirs
        },
        _ => theirs,
    };
    let properties = (properties != wire::ConnAckProperties::default()).then_some(properties);
    Ok(packet::encode_for(
        Version::V5,
        wire::Packet::ConnAck(ack, properties),
    ))
}

/// The Session Expiry Interval an MQTT 5 DISCONNECT (`body` after the
/// fixed header) sets, if any.
pub fn disconnect_expiry(body: &[u8]) -> Option<u32> {
    match packet::decode_body(0xE0, body, "DISCONNECT").ok()? {
        wire::Packet::Disconnect(_, properties) => properties?.session_expiry_interval,
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::guard::packet::frame;

    /// An MQTT 5 CONNECT of client `c`, clean, with `props` (raw, without
    /// their length).
    fn v5_connect(props: &[u8]) -> Vec<u8> {
        let mut p = vec![0x10, 0, 0, 4, b'M', b'Q', b'T', b'T', 5, 0x02, 0, 60];
        p.push(props.len() as u8);
        p.extend(props);
        p.extend([0, 1, b'c']);
        p[1] = (p.len() - 2) as u8;
        p
    }

    #[test]
    fn the_guard_keeps_what_the_client_asked_and_rumqttd_never_sees_it() {
        let props = [
            &[0x11, 0, 0, 0, 30][..],        // session expiry 30
            &[0x21, 0, 2],                   // receive maximum 2
            &[0x27, 0, 0, 0, 64],            // maximum packet size 64
            &[0x22, 0, 5],                   // topic alias maximum 5
            &[0x26, 0, 1, b'k', 0, 1, b'v'], // user property
        ]
        .concat();
        let c = packet::connect(&v5_connect(&props)).unwrap();
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
        let up = upstream_connect(&c, false, 60).unwrap();
        let again = packet::connect(&up).unwrap();
        assert!(!again.clean);
        let p = again.properties.unwrap();
        assert_eq!(p.session_expiry_interval, Some(30));
        assert_eq!(p.user_properties, vec![("k".into(), "v".into())]);
        assert_eq!(
            (p.receive_maximum, p.max_packet_size, p.topic_alias_max),
            (None, None, None)
        );
        for zero in [&[0x21, 0, 0][..], &[0x27, 0, 0, 0, 0]] {
            let c = packet::connect(&v5_connect(zero)).unwrap();
            assert_eq!(asked(&c), Err(0x82));
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
        let Ok(wire::Packet::ConnAck(_, Some(p))) = packet::decode_body(0x20, body, "test") else {
            panic!("no properties in {out:?}");
        };
        assert_eq!(
            (p.receive_max, p.topic_alias_max, p.max_packet_size),
            (Some(100), Some(CLIENT_ALIAS_MAX), Some(1 << 20))
        );
        assert_eq!(
            p,
            wire::ConnAckProperties {
                receive_max: Some(100),
                topic_alias_max: Some(CLIENT_ALIAS_MAX),
                max_packet_size: Some(1 << 20),
                ..Default::default()
            }
        );
        // A refusal carries none of them.
        let out = connack(&[0, 0x87, 0], offer).unwrap();
        assert_eq!(&out[..], &[0x20, 3, 0, 0x87, 0]);
    }

    #[test]
    fn a_disconnect_may_change_the_expiry() {
        assert_eq!(disconnect_expiry(&[]), None);
        assert_eq!(disconnect_expiry(&[0]), None);
        assert_eq!(disconnect_expiry(&[0, 5, 0x11, 0, 0, 0, 7]), Some(7));
    }

    #[test]
    fn a_maximum_keep_alive_is_told_to_mqtt_5_clients_only() {
        assert_eq!(keep_alive(Version::V5, 120, 60), (60, Some(60)));
        assert_eq!(keep_alive(Version::V5, 0, 60), (60, Some(60)));
        assert_eq!(keep_alive(Version::V5, 60, 60), (60, None));
        assert_eq!(keep_alive(Version::V5, 30, 60), (30, None));
        assert_eq!(keep_alive(Version::V5, 120, 0), (120, None));
        assert_eq!(keep_alive(Version::V4, 120, 60), (120, None));
        assert_eq!(keep_alive(Version::V4, 0, 60), (0, None));
    }
}
