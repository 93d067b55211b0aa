//! Tests of `connect.rs`: CONNECT through rumqttd's codec (patch 24) and
//! back.

use bytes::Bytes;
use rumqttd::protocol as wire;

use super::super::tests::packet;
use super::*;

/// A CONNECT from its body's parts.
fn raw_connect(parts: &[&[u8]]) -> Bytes {
    packet(0x10, &parts.concat())
}

#[test]
fn connect_v4_with_credentials_and_will() {
    let p = raw_connect(&[
        &[0, 4, b'M', b'Q', b'T', b'T', 4, 0b1100_0110, 0, 60],
        &[0, 2, b'i', b'd'],
        &[0, 1, b'w', 0, 2, b'x', b'y'],
        &[0, 5, b'a', b'l', b'i', b'c', b'e'],
        // A binary password (rumqttd patch 24).
        &[0, 2, 0xFF, 0x00],
    ]);
    let c = connect(&p).unwrap();
    assert_eq!(
        (c.version, c.clean, c.keep_alive, c.client_id.as_str()),
        (Version::V4, true, 60, "id")
    );
    let will = c.will.as_ref().unwrap();
    assert_eq!(
        (will.topic.as_str(), &will.will.message[..]),
        ("w", &b"xy"[..])
    );
    assert_eq!(c.username(), Some("alice"));
    assert_eq!(c.password(), Some(&[0xFF, 0x00][..]));
}

#[test]
fn a_missing_user_name_is_not_an_empty_one() {
    let head = [0, 4, b'M', b'Q', b'T', b'T', 5, 0, 0, 60, 0, 0, 1, b'c'];
    let c = connect(&raw_connect(&[&head])).unwrap();
    assert_eq!((c.username(), c.password()), (None, None));
    let mut with = head;
    with[7] = 0x80;
    let c = connect(&raw_connect(&[&with, &[0, 0]])).unwrap();
    assert_eq!((c.username(), c.password()), (Some(""), None));
    with[7] = 0x40;
    let c = connect(&raw_connect(&[&with, &[0, 0]])).unwrap();
    assert_eq!((c.username(), c.password()), (None, Some(&[][..])));
    // The empty ones survive the re-encoding as MQTT 5.
    let again = connect(&encode_connect(&c, true, 60, None).unwrap()).unwrap();
    assert_eq!((again.username(), again.password()), (None, Some(&[][..])));
}

#[test]
fn connect_flags_follow_the_rules() {
    // Reserved bit 0; will QoS or retain without a will; will QoS 3; a
    // 3.1.1 password without a user name (MQTT 5 allows it).
    for (level, flags, ok) in [
        (4, 0x02, true),
        (4, 0x03, false),
        (5, 0x01, false),
        (4, 0x08, false),
        (5, 0x20, false),
        (4, 0x1C, false),
        (4, 0x40, false),
        (5, 0x40, true),
        (4, 0xC0, true),
    ] {
        let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', level, flags, 0, 60];
        if level == 5 {
            body.push(0);
        }
        body.extend([0, 1, b'c']);
        if flags & 0x04 != 0 {
            if level == 5 {
                body.push(0);
            }
            body.extend([0, 1, b'w', 0, 0]);
        }
        body.extend(if flags & 0x80 != 0 {
            &[0, 1, b'u'][..]
        } else {
            &[]
        });
        body.extend(if flags & 0x40 != 0 {
            &[0, 1, b'p'][..]
        } else {
            &[]
        });
        assert_eq!(
            connect(&packet(0x10, &body)).is_ok(),
            ok,
            "level {level} flags {flags:#x}"
        );
    }
}

#[test]
fn connect_re_encodes_as_mqtt5_with_the_guards_choices() {
    // 3.1.1 with a will and credentials, keep-alive 0.
    let p = raw_connect(&[
        &[0, 4, b'M', b'Q', b'T', b'T', 4, 0b1100_0110, 0, 0],
        &[0, 2, b'i', b'd', 0, 1, b'w', 0, 2, b'x', b'y'],
        &[0, 1, b'u', 0, 1, b'p'],
    ]);
    let c = connect(&p).unwrap();
    let expiry = wire::ConnectProperties {
        session_expiry_interval: Some(9),
        receive_maximum: None,
        max_packet_size: None,
        topic_alias_max: None,
        request_response_info: None,
        request_problem_info: None,
        user_properties: Vec::new(),
        authentication_method: None,
        authentication_data: None,
    };
    let v5 = encode_connect(&c, false, 300, Some(expiry.clone())).unwrap();
    let again = connect(&v5).unwrap();
    assert_eq!(again.version, Version::V5);
    assert!(!again.clean);
    assert_eq!(again.keep_alive, 300);
    assert_eq!(again.properties, Some(expiry));
    assert_eq!(
        again.will.as_ref().map(|w| &w.will),
        c.will.as_ref().map(|w| &w.will)
    );
    assert_eq!(
        (again.client_id.as_str(), again.username(), again.password()),
        ("id", Some("u"), Some(&b"p"[..]))
    );
    // Without a will or credentials, clean.
    let c = connect(&raw_connect(&[&[
        0, 4, b'M', b'Q', b'T', b'T', 4, 0, 0, 60, 0, 1, b'c',
    ]]))
    .unwrap();
    let v5 = encode_connect(&c, true, 60, None).unwrap();
    assert_eq!(
        &v5[2..],
        &[0, 4, b'M', b'Q', b'T', b'T', 5, 2, 0, 60, 0, 0, 1, b'c']
    );
}

#[test]
fn connect_v5_reads_properties_and_the_will() {
    let p = raw_connect(&[
        &[0, 4, b'M', b'Q', b'T', b'T', 5, 0b1000_0110, 0, 60],
        &[5, 0x11, 0, 0, 0, 10],
        &[0, 1, b'c'],
        &[2, 0x01, 1, 0, 1, b'w', 0, 0],
        &[0, 1, b'u'],
    ]);
    let c = connect(&p).unwrap();
    assert_eq!(c.version, Version::V5);
    assert_eq!(
        c.properties
            .as_ref()
            .and_then(|p| p.session_expiry_interval),
        Some(10)
    );
    let will = c.will.as_ref().unwrap();
    assert_eq!(will.topic, "w");
    assert_eq!(
        will.properties
            .as_ref()
            .and_then(|p| p.payload_format_indicator),
        Some(1)
    );
    assert_eq!(
        (c.client_id.as_str(), c.username(), c.password()),
        ("c", Some("u"), None)
    );
    // A will topic with a control character is malformed, as any topic.
    let p = raw_connect(&[
        &[0, 4, b'M', b'Q', b'T', b'T', 4, 0b0000_0110, 0, 60],
        &[0, 1, b'c', 0, 2, b'w', b'\n', 0, 0],
    ]);
    assert!(connect(&p).is_err());
}

#[test]
fn other_protocols_are_named() {
    let b = [0, 6, b'M', b'Q', b'I', b's', b'd', b'p', 3, 2, 0, 60, 0, 0];
    assert_eq!(
        connect(&packet(0x10, &b)),
        Err(PacketError::Protocol {
            name: "MQIsdp".into(),
            level: 3
        })
    );
}
