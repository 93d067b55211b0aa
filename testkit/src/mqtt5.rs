//! An MQTT 5 kit for the features the guard emulates in front of rumqttd
//! (expiry, topic aliases, flow control, packet size limits): packet by
//! packet, with no client between that could resolve an alias, drop an
//! expired message or hold back an acknowledgement on the test's behalf.
//! Packets are written and read with rumqttc's codec (`mqttbytes`), which
//! the sidecar does not use, so a bug in the sidecar's codec cannot hide
//! itself by being in the tests' too. Framing, sending and receiving are
//! [`super::raw_mqtt`]'s; properties are [`Props`], in the tests' terms.

mod codes;
mod props;

use props::{int, read_varint, text};
pub use props::{Props, Value};

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rumqttc::v5::mqttbytes::v5 as wire;
use rumqttc::v5::mqttbytes::QoS;

use super::raw_mqtt::Client;

// Property identifiers (MQTT 5, 2.2.2.2), as the tests name them.
pub const PAYLOAD_FORMAT: u8 = 0x01;
pub const MESSAGE_EXPIRY: u8 = 0x02;
pub const CONTENT_TYPE: u8 = 0x03;
pub const SUBSCRIPTION_ID: u8 = 0x0B;
pub const SESSION_EXPIRY: u8 = 0x11;
pub const RECEIVE_MAXIMUM: u8 = 0x21;
pub const TOPIC_ALIAS_MAXIMUM: u8 = 0x22;
pub const TOPIC_ALIAS: u8 = 0x23;
pub const USER_PROPERTY: u8 = 0x26;
pub const MAXIMUM_PACKET_SIZE: u8 = 0x27;
const SERVER_KEEP_ALIVE: u8 = 0x13;

// First bytes of the acknowledgements (PUBREL has its required flags).
pub const PUBACK: u8 = 0x40;
pub const PUBREC: u8 = 0x50;
pub const PUBREL: u8 = 0x62;
pub const PUBCOMP: u8 = 0x70;

/// Encodes with rumqttc; a test packet it cannot write is a test bug.
fn encoded(packet: wire::Packet) -> Vec<u8> {
    let mut out = BytesMut::new();
    packet
        .write(&mut out, None)
        .unwrap_or_else(|e| panic!("rumqttc cannot write {packet:?}: {e:?}"));
    out.to_vec()
}

/// Decodes one whole packet with rumqttc.
fn decoded(p: &[u8]) -> wire::Packet {
    wire::Packet::read(&mut BytesMut::from(p), None)
        .unwrap_or_else(|e| panic!("rumqttc cannot read {p:?}: {e:?}"))
}

fn qos(n: u8) -> QoS {
    rumqttc::v5::mqttbytes::qos(n).unwrap_or_else(|| panic!("no QoS {n}"))
}

/// CONNECT at protocol level 5 without credentials, keep-alive 60 s.
pub fn connect(client_id: &str, clean_start: bool, props: &Props) -> Vec<u8> {
    props.only(
        &[
            SESSION_EXPIRY,
            RECEIVE_MAXIMUM,
            MAXIMUM_PACKET_SIZE,
            TOPIC_ALIAS_MAXIMUM,
            USER_PROPERTY,
        ],
        "CONNECT",
    );
    let properties = (!props.0.is_empty()).then(|| wire::ConnectProperties {
        session_expiry_interval: props.get(SESSION_EXPIRY),
        receive_maximum: props.u16_of(RECEIVE_MAXIMUM),
        max_packet_size: props.get(MAXIMUM_PACKET_SIZE),
        topic_alias_max: props.u16_of(TOPIC_ALIAS_MAXIMUM),
        user_properties: props.users(),
        ..wire::ConnectProperties::new()
    });
    let connect = wire::Connect {
        keep_alive: 60,
        client_id: client_id.into(),
        clean_start,
        properties,
    };
    encoded(wire::Packet::Connect(connect, None, None))
}

/// PUBLISH; `topic` may be empty when `props` carry a Topic Alias.
pub fn publish(
    topic: &str,
    qos: u8,
    retain: bool,
    pkid: u16,
    props: &Props,
    payload: &[u8],
) -> Vec<u8> {
    props.only(
        &[
            PAYLOAD_FORMAT,
            MESSAGE_EXPIRY,
            CONTENT_TYPE,
            TOPIC_ALIAS,
            USER_PROPERTY,
        ],
        "PUBLISH",
    );
    let properties = (!props.0.is_empty()).then(|| wire::PublishProperties {
        payload_format_indicator: props.get(PAYLOAD_FORMAT).map(|v| v as u8),
        message_expiry_interval: props.get(MESSAGE_EXPIRY),
        topic_alias: props.u16_of(TOPIC_ALIAS),
        user_properties: props.users(),
        content_type: props.text_of(CONTENT_TYPE),
        ..Default::default()
    });
    encoded(wire::Packet::Publish(wire::Publish {
        dup: false,
        qos: self::qos(qos),
        retain,
        topic: Bytes::copy_from_slice(topic.as_bytes()),
        pkid,
        payload: Bytes::copy_from_slice(payload),
        properties,
    }))
}

/// Subscription options (3.8.3.1): maximum QoS, No Local, Retain As
/// Published, Retain Handling.
pub fn options(qos: u8, no_local: bool, retain_as_published: bool, retain_handling: u8) -> u8 {
    qos | u8::from(no_local) << 2 | u8::from(retain_as_published) << 3 | retain_handling << 4
}

/// A filter with its options byte as rumqttc holds it.
fn filter(path: &str, options: u8) -> wire::Filter {
    wire::Filter {
        path: path.into(),
        qos: qos(options & 0x03),
        nolocal: options & 0x04 != 0,
        preserve_retain: options & 0x08 != 0,
        retain_forward_rule: match (options >> 4) & 0x03 {
            0 => wire::RetainForwardRule::OnEverySubscribe,
            1 => wire::RetainForwardRule::OnNewSubscribe,
            2 => wire::RetainForwardRule::Never,
            _ => panic!("no retain handling 3 (options {options:#04x})"),
        },
    }
}

/// SUBSCRIBE of `filters`, each with its options byte.
pub fn subscribe(pkid: u16, props: &Props, filters: &[(&str, u8)]) -> Vec<u8> {
    props.only(&[SUBSCRIPTION_ID, USER_PROPERTY], "SUBSCRIBE");
    let properties = (!props.0.is_empty()).then(|| wire::SubscribeProperties {
        id: props.get(SUBSCRIPTION_ID).map(|id| id as usize),
        user_properties: props.users(),
    });
    encoded(wire::Packet::Subscribe(wire::Subscribe {
        pkid,
        filters: filters.iter().map(|(f, o)| filter(f, *o)).collect(),
        properties,
    }))
}

/// UNSUBSCRIBE of one filter.
pub fn unsubscribe(pkid: u16, filter: &str) -> Vec<u8> {
    encoded(wire::Packet::Unsubscribe(wire::Unsubscribe {
        pkid,
        filters: vec![filter.to_owned()],
        properties: None,
    }))
}

/// PUBACK, PUBREC, PUBREL or PUBCOMP (`first`), reason Success.
pub fn ack(first: u8, pkid: u16) -> Vec<u8> {
    encoded(match first {
        PUBACK => wire::Packet::PubAck(wire::PubAck::new(pkid, None)),
        PUBREC => wire::Packet::PubRec(wire::PubRec::new(pkid, None)),
        PUBREL => wire::Packet::PubRel(wire::PubRel::new(pkid, None)),
        PUBCOMP => wire::Packet::PubComp(wire::PubComp::new(pkid, None)),
        _ => panic!("{first:#04x} is no acknowledgement of a publication"),
    })
}

/// DISCONNECT with a reason code and properties (Session Expiry Interval).
pub fn disconnect(reason: u8, props: &Props) -> Vec<u8> {
    props.only(&[SESSION_EXPIRY, USER_PROPERTY], "DISCONNECT");
    let properties = (!props.0.is_empty()).then(|| wire::DisconnectProperties {
        session_expiry_interval: props.get(SESSION_EXPIRY),
        reason_string: None,
        user_properties: props.users(),
        server_reference: None,
    });
    encoded(wire::Packet::Disconnect(wire::Disconnect {
        reason_code: reason.try_into().expect("a DISCONNECT reason code"),
        properties,
    }))
}

#[derive(Debug)]
pub struct Connack {
    pub session_present: bool,
    pub reason: u8,
    pub props: Props,
}

pub fn connack(p: &[u8]) -> Connack {
    let wire::Packet::ConnAck(ack) = decoded(p) else {
        panic!("a CONNACK: {p:?}")
    };
    let props = ack.properties.map_or_else(Props::new, connack_props);
    Connack {
        session_present: ack.session_present,
        reason: codes::connect(ack.code),
        props,
    }
}

/// A CONNACK's properties, in the order of their identifiers.
fn connack_props(p: wire::ConnAckProperties) -> Props {
    Props::new()
        .maybe(SESSION_EXPIRY, p.session_expiry_interval)
        .maybe_text(
            0x12,
            p.assigned_client_identifier.as_deref().map(str::as_bytes),
        )
        .maybe(SERVER_KEEP_ALIVE, p.server_keep_alive)
        .maybe_text(0x15, p.authentication_method.as_deref().map(str::as_bytes))
        .maybe_text(0x16, p.authentication_data.as_deref())
        .maybe_text(0x1A, p.response_information.as_deref().map(str::as_bytes))
        .maybe_text(0x1C, p.server_reference.as_deref().map(str::as_bytes))
        .maybe_text(0x1F, p.reason_string.as_deref().map(str::as_bytes))
        .maybe(RECEIVE_MAXIMUM, p.receive_max)
        .maybe(TOPIC_ALIAS_MAXIMUM, p.topic_alias_max)
        .maybe(0x24, p.max_qos)
        .maybe(0x25, p.retain_available)
        .users_from(&p.user_properties)
        .maybe(MAXIMUM_PACKET_SIZE, p.max_packet_size)
        .maybe(0x28, p.wildcard_subscription_available)
        .maybe(0x29, p.subscription_identifiers_available)
        .maybe(0x2A, p.shared_subscription_available)
}

#[derive(Debug, Clone)]
pub struct Publish {
    pub qos: u8,
    pub retain: bool,
    pub dup: bool,
    pub topic: String,
    pub pkid: Option<u16>,
    pub props: Props,
    pub payload: Vec<u8>,
}

/// A PUBLISH, read byte by byte: rumqttc 0.25 miscounts a PUBLISH's
/// Subscription Identifiers (each one byte more than it takes), and so
/// misreads any delivery with one and loses the payload's first bytes after
/// several.
pub fn publication(p: &[u8]) -> Publish {
    assert_eq!(p[0] >> 4, 3, "a PUBLISH: {p:?}");
    let qos = (p[0] >> 1) & 3;
    let (len, used) = read_varint(&p[1..]);
    let mut r = &p[1 + used..];
    assert_eq!(r.len(), len, "one whole PUBLISH: {p:?}");
    Publish {
        qos,
        retain: p[0] & 1 == 1,
        dup: p[0] & 8 == 8,
        topic: text(&mut r),
        pkid: (qos > 0).then(|| int(&mut r, 2) as u16),
        props: Props::decode(&mut r),
        payload: r.to_vec(),
    }
}

/// A DISCONNECT's reason code (0 when the packet omits it).
pub fn disconnect_reason(p: &[u8]) -> u8 {
    // A reason code alone, without a property length, is a whole DISCONNECT
    // (MQTT 5 3.14.2.2.1), which rumqttc 0.25 reads as cut short (rumqttd had
    // the same bug: its patch 11). Given the empty property list it implies:
    let whole;
    let p = match p {
        [0xE0, 1, reason] => {
            whole = [0xE0, 2, *reason, 0];
            &whole[..]
        }
        _ => p,
    };
    let wire::Packet::Disconnect(d) = decoded(p) else {
        panic!("a DISCONNECT: {p:?}")
    };
    d.reason_code as u8
}

/// An acknowledgement's packet identifier and reason code (0 if omitted).
pub fn ack_of(p: &[u8]) -> (u16, u8) {
    match decoded(p) {
        wire::Packet::PubAck(a) => (a.pkid, codes::puback(a.reason)),
        wire::Packet::PubRec(a) => (a.pkid, codes::pubrec(a.reason)),
        wire::Packet::PubRel(a) => (a.pkid, codes::pubrel(a.reason)),
        wire::Packet::PubComp(a) => (a.pkid, codes::pubcomp(a.reason)),
        other => panic!("an acknowledgement of a publication: {other:?}"),
    }
}

/// A SUBACK's packet identifier and reason codes.
pub fn suback(p: &[u8]) -> (u16, Vec<u8>) {
    let wire::Packet::SubAck(ack) = decoded(p) else {
        panic!("a SUBACK: {p:?}")
    };
    (
        ack.pkid,
        ack.return_codes.into_iter().map(codes::subscribe).collect(),
    )
}

/// Connects and asserts the CONNACK accepts; the client and its CONNACK.
pub async fn connect5(addr: SocketAddr, id: &str, clean: bool, props: &Props) -> (Client, Connack) {
    let mut c = Client::open(addr).await;
    c.send(&connect(id, clean, props)).await;
    let ack = connack(&c.recv().await.expect("CONNACK"));
    assert_eq!(ack.reason, 0, "accepted: {ack:?}");
    (c, ack)
}

/// What a test does with a connected MQTT 5 [`Client`]; each wait is
/// bounded by `raw_mqtt`'s.
impl Client {
    /// The next PUBLISH, acknowledged (PUBACK or PUBREC) if `acknowledge`. PUBRELs
    /// of earlier QoS 2 deliveries are completed on the way; any other
    /// packet fails the test.
    pub async fn next_publish(&mut self, acknowledge: bool) -> Publish {
        loop {
            let p = self.recv().await.expect("a PUBLISH, not the end");
            if p[0] == PUBREL {
                self.send(&ack(PUBCOMP, ack_of(&p).0)).await;
                continue;
            }
            let publish = publication(&p);
            match (acknowledge, publish.pkid, publish.qos) {
                (true, Some(id), 1) => self.send(&ack(PUBACK, id)).await,
                (true, Some(id), 2) => self.send(&ack(PUBREC, id)).await,
                _ => {}
            }
            return publish;
        }
    }

    /// Sends a PUBLISH and completes its handshake (nothing for QoS 0),
    /// asserting success; the reason code of the PUBACK or PUBREC.
    pub async fn publish_acked(&mut self, publish: &[u8]) -> u8 {
        let sent = publication(publish);
        self.send(publish).await;
        let Some(pkid) = sent.pkid else { return 0 };
        let first = self.recv().await.expect("an acknowledgement");
        let expected = if sent.qos == 1 { PUBACK } else { PUBREC };
        assert_eq!(first[0], expected, "acknowledged: {first:?}");
        let (id, reason) = ack_of(&first);
        assert_eq!(id, pkid, "{first:?}");
        assert!(reason < 0x80, "accepted: {first:?}");
        if sent.qos == 2 {
            self.send(&ack(PUBREL, pkid)).await;
            let comp = self.recv().await.expect("PUBCOMP");
            assert_eq!((comp[0], ack_of(&comp)), (PUBCOMP, (pkid, 0)), "{comp:?}");
        }
        reason
    }

    /// SUBSCRIBE, then the SUBACK's reason codes.
    pub async fn subscribe_ok(&mut self, pkid: u16, filters: &[(&str, u8)]) -> Vec<u8> {
        self.send(&subscribe(pkid, &Props::new(), filters)).await;
        let (id, codes) = suback(&self.recv().await.expect("SUBACK"));
        assert_eq!(id, pkid, "SUBACK: {codes:?}");
        codes
    }

    /// Waits `d`, then every packet that came before the answer to a
    /// PINGREQ, PUBRELs completed and left out: what arrived unasked.
    pub async fn quiet(&mut self, d: Duration) -> Vec<Vec<u8>> {
        tokio::time::sleep(d).await;
        self.send(&[0xC0, 0]).await;
        let mut unasked = Vec::new();
        loop {
            let p = self.recv().await.expect("PINGRESP");
            match p[0] {
                0xD0 => return unasked,
                PUBREL => self.send(&ack(PUBCOMP, ack_of(&p).0)).await,
                _ => unasked.push(p),
            }
        }
    }

    /// DISCONNECT with `props`; waits for the server to close.
    pub async fn bye(&mut self, props: &Props) {
        self.send(&disconnect(0, props)).await;
        let mut after = self.until_closed().await;
        after.retain(|p| p[0] != PUBREL);
        assert!(after.is_empty(), "nothing after DISCONNECT: {after:?}");
    }
}
