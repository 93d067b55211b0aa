//! Tests of `packet.rs`: wire forms, rumqttd's decoder behind the guard,
//! and no panics on any input.

use bytes::Bytes;
use rumqttd::protocol as wire;

use super::codec::decode;
use super::*;
use proptest::prelude::*;

fn body(packet: &[u8]) -> (Header, &[u8]) {
    let h = frame(packet, usize::MAX).unwrap().unwrap();
    (h, &packet[h.header_len..h.size()])
}

#[test]
fn frames_need_the_whole_packet() {
    assert_eq!(frame(&[], 100), Ok(None));
    assert_eq!(frame(&[0x30], 100), Ok(None));
    assert_eq!(frame(&[0x30, 3, 0, 1], 100), Ok(None));
    let h = frame(&[0x30, 3, 0, 1, b'a', 0xC0], 100).unwrap().unwrap();
    assert_eq!((h.kind(), h.header_len, h.size()), (3, 2, 5));
    // 200 = 0xC8 0x01
    let mut big = vec![0x30, 0xC8, 0x01];
    big.resize(203, 0);
    assert_eq!(frame(&big, 1000).unwrap().unwrap().size(), 203);
    assert_eq!(frame(&big[..100], 1000), Ok(None));
}

#[test]
fn oversized_packets_fail_at_their_header() {
    assert_eq!(
        frame(&[0x30, 0xFF, 0x7F], 1000),
        Err(PacketError::TooLarge {
            size: 16386,
            limit: 1000
        })
    );
    assert_eq!(
        frame(&[0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01], usize::MAX),
        Err(PacketError::RemainingLength)
    );
}

/// A whole packet from its first byte and body.
pub(super) fn packet(first: u8, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(body.len() + 5);
    out.put_u8(first);
    put_remaining_length(&mut out, body.len());
    out.put_slice(body);
    out.freeze()
}

#[test]
fn publish_v5_finds_the_topic_alias_among_other_properties() {
    // QoS 1, topic "", pkid 7, properties: user property, topic alias 3.
    let mut b = vec![0, 0, 0, 7];
    let props = [0x26, 0, 1, b'k', 0, 1, b'v', 0x23, 0, 3];
    b.push(props.len() as u8);
    b.extend(props);
    b.extend(b"payload");
    let p = publish(0x32, &b, Version::V5).unwrap();
    assert_eq!((p.qos, p.pkid, p.topic, p.alias), (1, 7, "", Some(3)));
    let p = publish(0x30, &[0, 1, b'a', b'x'], Version::V4).unwrap();
    assert_eq!((p.qos, p.pkid, p.topic, p.alias), (0, 0, "a", None));
    assert!(publish(0x36, &[0, 1, b'a', 0, 1], Version::V4).is_err());
}

/// A SUBSCRIBE written byte by byte: pkid 9, MQTT 5 properties
/// `props` (their length first), each filter with its options byte.
fn raw_subscribe(version: Version, props: &[u8], filters: &[(&str, u8)]) -> Vec<u8> {
    let mut body = vec![0, 9];
    if version == Version::V5 {
        body.extend_from_slice(props);
    }
    for (filter, options) in filters {
        body.extend((filter.len() as u16).to_be_bytes());
        body.extend(filter.as_bytes());
        body.push(*options);
    }
    packet(0x82, &body).to_vec()
}

fn paths(s: &Subscribe) -> Vec<(&str, wire::QoS)> {
    s.filters.iter().map(|f| (f.path.as_str(), f.qos)).collect()
}

#[test]
fn subscribe_round_trips_with_fewer_filters() {
    use wire::QoS::{AtLeastOnce, AtMostOnce};
    for version in [Version::V4, Version::V5] {
        let props: &[u8] = &[2, 0x0B, 5];
        let raw = raw_subscribe(version, props, &[("a/#", 1), ("b", 0)]);
        let s = subscribe(&raw, version).unwrap();
        assert_eq!(s.pkid, 9);
        assert_eq!(paths(&s), vec![("a/#", AtLeastOnce), ("b", AtMostOnce)]);
        let again = encode_subscribe(s.pkid, s.properties.clone(), s.filters[1..].to_vec());
        let s2 = subscribe(&again.unwrap(), Version::V5).unwrap();
        assert_eq!(paths(&s2), vec![("b", AtMostOnce)]);
        if version == Version::V5 {
            assert_eq!(s2.properties.and_then(|p| p.id), Some(5));
        }
    }
    // MQTT 5 options survive the round trip: no local, retain as
    // published, retain handling 2.
    let raw = raw_subscribe(Version::V5, &[0], &[("c", 0x2E)]);
    let s = subscribe(&raw, Version::V5).unwrap();
    let again = encode_subscribe(s.pkid, None, s.filters).unwrap();
    assert_eq!(again[again.len() - 1], 0x2E);
}

#[test]
fn subscribe_options_reserved_bits() {
    for (version, options, ok) in [
        (Version::V4, 2, true),
        (Version::V4, 3, false),
        (Version::V4, 0x04, false),
        (Version::V5, 0x2E, true),
        (Version::V5, 0x30, false),
        (Version::V5, 0x40, false),
        (Version::V5, 0x03, false),
    ] {
        let raw = raw_subscribe(version, &[0], &[("t", options)]);
        assert_eq!(
            subscribe(&raw, version).is_ok(),
            ok,
            "{version:?} {options:#x}"
        );
    }
}

#[test]
fn unsubscribe_needs_a_filter_and_round_trips() {
    for version in [Version::V4, Version::V5] {
        let props: &[u8] = if version == Version::V5 { &[0] } else { &[] };
        let mut body = vec![0, 3];
        body.extend_from_slice(props);
        assert!(unsubscribe(&packet(0xA2, &body), version).is_err());
        body.extend([0, 3, b'a', b'/', b'b']);
        let u = unsubscribe(&packet(0xA2, &body), version).unwrap();
        assert_eq!((u.pkid, u.filters.clone()), (3, vec!["a/b".to_string()]));
        let again = encode_unsubscribe(u.pkid, u.properties, u.filters).unwrap();
        assert_eq!(&again[..], &[0xA2, 8, 0, 3, 0, 0, 3, b'a', b'/', b'b']);
    }
}

#[test]
fn topics_and_filters_with_control_characters_are_malformed() {
    assert!(publish(0x30, &[0, 3, b'a', b'\t', b'b', b'x'], Version::V4).is_err());
    assert!(publish(0x30, &[0, 3, b'a', b'-', b'b', b'x'], Version::V4).is_ok());
    for filter in ["a\nb", "a\rb", "\u{7f}", "a\u{85}"] {
        let raw = raw_subscribe(Version::V4, &[], &[(filter, 1)]);
        assert!(subscribe(&raw, Version::V4).is_err(), "{filter:?}");
        let mut body = vec![0, 1];
        body.extend((filter.len() as u16).to_be_bytes());
        body.extend(filter.as_bytes());
        assert!(unsubscribe(&packet(0xA2, &body), Version::V4).is_err());
    }
}

#[test]
fn control_characters_are_found_as_char_is_control_finds_them() {
    // Every char of every UTF-8 length, alone and between others.
    for c in (0..=0x10FFFF).filter_map(char::from_u32) {
        for s in [c.to_string(), format!("a{c}é")] {
            assert_eq!(has_control(&s), s.chars().any(char::is_control), "{c:?}");
        }
    }
}

#[test]
fn suback_codes_are_merged_in_place() {
    let plan = [Some(0x87), None, Some(0x97), None];
    assert_eq!(merge_codes(&plan, &[1, 0], 0x80), vec![0x87, 1, 0x97, 0]);
    assert_eq!(merge_codes(&plan, &[1], 0x80), vec![0x87, 1, 0x97, 0x80]);
    let encoded = encode_suback(Version::V5, 4, None, &[0x87, 1]);
    assert_eq!(&encoded[..], &[0x90, 5, 0, 4, 0, 0x87, 1]);
    assert_eq!(
        &encode_suback(Version::V4, 4, None, &[0x80])[..],
        &[0x90, 3, 0, 4, 0x80]
    );
    // The broker granted QoS 1 and 0 of the two it got.
    let broker = [0, 4, 0, 1, 0];
    let plan = [None, Some(0x87), None];
    assert_eq!(
        &suback_reply(Version::V5, &broker, &plan, 0x80).unwrap()[..],
        &[0x90, 6, 0, 4, 0, 1, 0x87, 0]
    );
    assert_eq!(
        &suback_reply(Version::V4, &broker, &plan, 0x80).unwrap()[..],
        &[0x90, 5, 0, 4, 1, 0x80, 0]
    );
    assert!(suback_reply(Version::V5, &[0, 4], &plan, 0x80).is_err());
}

#[test]
fn shared_subscriptions_are_checked_by_their_filter() {
    assert_eq!(shared_filter("$share/g/a/b"), "a/b");
    assert_eq!(shared_filter("$share/g"), "$share/g");
    assert_eq!(shared_filter("a/#"), "a/#");
}

#[test]
fn acks_have_their_wire_form() {
    assert_eq!(&connack(Version::V4, 5)[..], &[0x20, 2, 0, 5]);
    assert_eq!(&connack(Version::V5, 0x87)[..], &[0x20, 3, 0, 0x87, 0]);
    assert_eq!(&puback(Version::V4, 258, 0x87)[..], &[0x40, 2, 1, 2]);
    assert_eq!(&puback(Version::V5, 258, 0x87)[..], &[0x40, 3, 1, 2, 0x87]);
    assert_eq!(&puback(Version::V5, 258, 0)[..], &[0x40, 2, 1, 2]);
    assert_eq!(&pubrec(1, 0x87)[..], &[0x50, 3, 0, 1, 0x87]);
    assert_eq!(&pubcomp(1)[..], &[0x70, 2, 0, 1]);
    assert_eq!(&disconnect(0x95)[..], &[0xE0, 1, 0x95]);
    assert_eq!(&disconnect(0)[..], &[0xE0, 0]);
    assert_eq!(
        &encode_unsuback(Version::V4, 3, &[0x11])[..],
        &[0xB0, 2, 0, 3]
    );
    assert_eq!(
        &encode_unsuback(Version::V5, 3, &[0x11, 0])[..],
        &[0xB0, 5, 0, 3, 0, 0x11, 0]
    );
    let mut long = BytesMut::new();
    put_remaining_length(&mut long, 16384);
    assert_eq!(&long[..], &[0x80, 0x80, 0x01]);
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = frame(&bytes, 256);
        let _ = connect(&bytes);
        let _ = connect(&packet(0x10, &bytes));
        for level in [4, 5] {
            let head = [0, 4, b'M', b'Q', b'T', b'T', level];
            let _ = connect(&packet(0x10, &[&head[..], &bytes].concat()));
        }
        for version in [Version::V4, Version::V5] {
            if let Some(&first) = bytes.first() {
                let _ = publish(first, &bytes[1..], version);
            }
            let _ = subscribe(&bytes, version);
            let _ = unsubscribe(&bytes, version);
            let _ = suback_reply(version, &bytes, &[None, Some(0x87)], 0x80);
            // Every packet type through rumqttd's decoder, past its
            // framing: a CONNACK or UNSUBACK once panicked it (patch 16).
            for kind in 0..16u8 {
                for flags in [0, 2] {
                    let _ = decode(version, &packet(kind << 4 | flags, &bytes), "any");
                }
            }
        }
        let _ = pubrel(&bytes);
        let _ = super::super::v4::downstream(0x20, &bytes);
        let _ = super::super::v4::downstream(0x90, &bytes);
        let _ = super::super::v4::downstream(0xB0, &bytes);
        let _ = super::super::handshake::disconnect_expiry(&bytes);
        let _ = suback_pkid(&bytes);
    }

    #[test]
    fn framing_a_stream_consumes_whole_packets(
        bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..10),
        cut in 0usize..2000,
    ) {
        let mut stream = Vec::new();
        for b in &bodies {
            stream.extend_from_slice(&packet(0x30, b));
        }
        let cut = cut.min(stream.len());
        let mut pos = 0;
        let mut seen = 0;
        while let Some(h) = frame(&stream[pos..cut], usize::MAX).unwrap() {
            prop_assert_eq!(h.remaining, bodies[seen].len());
            pos += h.size();
            seen += 1;
        }
        prop_assert!(pos <= cut);
    }

    #[test]
    fn truncated_packets_are_errors_not_panics(
        filters in proptest::collection::vec(("[a-z/#+]{0,10}", 0u8..3), 1..5),
        cut in 0usize..100,
    ) {
        let filters: Vec<(&str, u8)> = filters.iter().map(|(f, o)| (f.as_str(), *o)).collect();
        for version in [Version::V4, Version::V5] {
            let raw = raw_subscribe(version, &[0], &filters);
            let (h, b) = body(&raw);
            let decoded = subscribe(&raw, version).unwrap();
            let got: Vec<(&str, u8)> =
                decoded.filters.iter().map(|f| (f.path.as_str(), f.qos as u8)).collect();
            prop_assert_eq!(got, filters.clone());
            let _ = subscribe(&packet(0x82, &b[..cut.min(h.remaining)]), version);
        }
    }
}
