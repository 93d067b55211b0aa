//! A raw MQTT 5 kit for the features the guard emulates in front of
//! rumqttd (expiry, topic aliases, flow control, packet size limits): every
//! property written and read byte by byte, with no client library in
//! between that could resolve an alias, drop an expired message or hold
//! back an acknowledgement on the test's behalf. Framing, sending and
//! receiving are [`super::raw_mqtt`]'s; this adds only what MQTT 5 puts
//! inside the packets.

use std::net::SocketAddr;
use std::time::Duration;

use super::raw_mqtt::{packet, string, Client};

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

// First bytes of the acknowledgements (PUBREL has its required flags).
pub const PUBACK: u8 = 0x40;
pub const PUBREC: u8 = 0x50;
pub const PUBREL: u8 = 0x62;
pub const PUBCOMP: u8 = 0x70;

/// A property's value: every integer width as `Int`, strings and binary
/// data as `Bytes`, a user property as `Pair`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Int(u32),
    Bytes(Vec<u8>),
    Pair(String, String),
}

/// How the specification encodes a property's value: an integer of 1, 2
/// or 4 bytes, a variable byte integer, a string or binary data, a pair.
enum Kind {
    Int(usize),
    VarInt,
    Bytes,
    Pair,
}

/// Every property MQTT 5 defines; anything else is a test or server bug.
fn kind(id: u8) -> Kind {
    match id {
        0x01 | 0x17 | 0x19 | 0x24 | 0x25 | 0x28 | 0x29 | 0x2A => Kind::Int(1),
        0x13 | 0x21 | 0x22 | 0x23 => Kind::Int(2),
        0x02 | 0x11 | 0x18 | 0x27 => Kind::Int(4),
        0x0B => Kind::VarInt,
        0x26 => Kind::Pair,
        0x03 | 0x08 | 0x09 | 0x12 | 0x15 | 0x16 | 0x1A | 0x1C | 0x1F => Kind::Bytes,
        _ => panic!("property {id:#04x} does not exist in MQTT 5"),
    }
}

fn varint(mut n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while n >= 128 {
        out.push((n % 128) as u8 | 0x80);
        n /= 128;
    }
    out.push(n as u8);
    out
}

/// A variable byte integer at the start of `buf`: its value and length.
fn read_varint(buf: &[u8]) -> (usize, usize) {
    let mut n = 0;
    for (i, byte) in buf.iter().take(4).enumerate() {
        n |= usize::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            return (n, i + 1);
        }
    }
    panic!("a variable byte integer longer than 4 bytes: {buf:?}")
}

/// The next `n` bytes of `r`, which moves past them.
fn take<'a>(r: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, rest) = r.split_at(n);
    *r = rest;
    head
}

/// A big-endian integer of `n` bytes.
fn int(r: &mut &[u8], n: usize) -> u32 {
    take(r, n).iter().fold(0, |acc, b| acc << 8 | u32::from(*b))
}

/// A length-prefixed string or binary data.
fn bytes<'a>(r: &mut &'a [u8]) -> &'a [u8] {
    let n = int(r, 2) as usize;
    take(r, n)
}

fn text(r: &mut &[u8]) -> String {
    String::from_utf8(bytes(r).to_vec()).expect("UTF-8")
}

/// A property list in wire order. Repeats stay repeated: user properties
/// and subscription identifiers may occur several times, and the order of
/// user properties is something a server must keep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Props(pub Vec<(u8, Value)>);

impl Props {
    pub fn new() -> Props {
        Props::default()
    }

    /// Adds an integer property of any width.
    pub fn int(mut self, id: u8, v: u32) -> Props {
        self.0.push((id, Value::Int(v)));
        self
    }

    /// Adds a string (or binary) property.
    pub fn text(mut self, id: u8, v: &str) -> Props {
        self.0.push((id, Value::Bytes(v.as_bytes().to_vec())));
        self
    }

    pub fn user(mut self, key: &str, value: &str) -> Props {
        self.0
            .push((USER_PROPERTY, Value::Pair(key.into(), value.into())));
        self
    }

    /// The first integer property `id`.
    pub fn get(&self, id: u8) -> Option<u32> {
        self.all(id).into_iter().next()
    }

    /// Every integer property `id` (subscription identifiers), in order.
    pub fn all(&self, id: u8) -> Vec<u32> {
        self.0
            .iter()
            .filter_map(|(i, v)| match v {
                Value::Int(n) if *i == id => Some(*n),
                _ => None,
            })
            .collect()
    }

    /// The string property `id`.
    pub fn text_of(&self, id: u8) -> Option<String> {
        self.0.iter().find_map(|(i, v)| match v {
            Value::Bytes(b) if *i == id => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
    }

    /// The user properties, in order.
    pub fn users(&self) -> Vec<(String, String)> {
        self.0
            .iter()
            .filter_map(|(_, v)| match v {
                Value::Pair(k, v) => Some((k.clone(), v.clone())),
                _ => None,
            })
            .collect()
    }

    /// The distinct identifiers present, sorted: what a server added.
    pub fn ids(&self) -> Vec<u8> {
        let mut ids: Vec<u8> = self.0.iter().map(|(i, _)| *i).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The list with its length in front, as it goes into a packet.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        for (id, value) in &self.0 {
            body.push(*id);
            match (kind(*id), value) {
                (Kind::Int(n), Value::Int(v)) => body.extend(&v.to_be_bytes()[4 - n..]),
                (Kind::VarInt, Value::Int(v)) => body.extend(varint(*v as usize)),
                (Kind::Bytes, Value::Bytes(b)) => body.extend(string(b)),
                (Kind::Pair, Value::Pair(k, v)) => {
                    body.extend(string(k.as_bytes()));
                    body.extend(string(v.as_bytes()));
                }
                _ => panic!("property {id:#04x} cannot hold {value:?}"),
            }
        }
        let mut out = varint(body.len());
        out.extend(body);
        out
    }

    /// The length-prefixed list at the start of `r`, which moves past it.
    pub fn decode(r: &mut &[u8]) -> Props {
        let (len, used) = read_varint(r);
        take(r, used);
        let mut list = take(r, len);
        let mut props = Props::new();
        while !list.is_empty() {
            let id = take(&mut list, 1)[0];
            let value = match kind(id) {
                Kind::Int(n) => Value::Int(int(&mut list, n)),
                Kind::VarInt => {
                    let (v, used) = read_varint(list);
                    take(&mut list, used);
                    Value::Int(v as u32)
                }
                Kind::Bytes => Value::Bytes(bytes(&mut list).to_vec()),
                Kind::Pair => Value::Pair(text(&mut list), text(&mut list)),
            };
            props.0.push((id, value));
        }
        props
    }
}

/// CONNECT at protocol level 5 without credentials, keep-alive 60 s.
pub fn connect(client_id: &str, clean_start: bool, props: &Props) -> Vec<u8> {
    let mut body = string(b"MQTT");
    body.extend([5, if clean_start { 0x02 } else { 0 }, 0, 60]);
    body.extend(props.encode());
    body.extend(string(client_id.as_bytes()));
    packet(0x10, &body)
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
    let mut body = string(topic.as_bytes());
    if qos > 0 {
        body.extend(pkid.to_be_bytes());
    }
    body.extend(props.encode());
    body.extend_from_slice(payload);
    packet(0x30 | (qos << 1) | u8::from(retain), &body)
}

/// Subscription options (3.8.3.1): maximum QoS, No Local, Retain As
/// Published, Retain Handling.
pub fn options(qos: u8, no_local: bool, retain_as_published: bool, retain_handling: u8) -> u8 {
    qos | u8::from(no_local) << 2 | u8::from(retain_as_published) << 3 | retain_handling << 4
}

/// SUBSCRIBE of `filters`, each with its options byte.
pub fn subscribe(pkid: u16, props: &Props, filters: &[(&str, u8)]) -> Vec<u8> {
    let mut body = pkid.to_be_bytes().to_vec();
    body.extend(props.encode());
    for (filter, options) in filters {
        body.extend(string(filter.as_bytes()));
        body.push(*options);
    }
    packet(0x82, &body)
}

/// PUBACK, PUBREC, PUBREL or PUBCOMP (`first`), reason Success.
pub fn ack(first: u8, pkid: u16) -> Vec<u8> {
    packet(first, &pkid.to_be_bytes())
}

/// DISCONNECT with a reason code and properties (Session Expiry Interval).
pub fn disconnect(reason: u8, props: &Props) -> Vec<u8> {
    let mut body = vec![reason];
    body.extend(props.encode());
    packet(0xE0, &body)
}

/// The variable header and payload of a packet.
fn body(p: &[u8]) -> &[u8] {
    let (_, used) = read_varint(&p[1..]);
    &p[1 + used..]
}

#[derive(Debug)]
pub struct Connack {
    pub session_present: bool,
    pub reason: u8,
    pub props: Props,
}

pub fn connack(p: &[u8]) -> Connack {
    assert_eq!(p[0], 0x20, "a CONNACK: {p:?}");
    let mut r = body(p);
    let flags = take(&mut r, 2);
    Connack {
        session_present: flags[0] & 1 == 1,
        reason: flags[1],
        props: Props::decode(&mut r),
    }
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

pub fn publication(p: &[u8]) -> Publish {
    assert_eq!(p[0] >> 4, 3, "a PUBLISH: {p:?}");
    let qos = (p[0] >> 1) & 3;
    let mut r = body(p);
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
    assert_eq!(p[0], 0xE0, "a DISCONNECT: {p:?}");
    body(p).first().copied().unwrap_or(0)
}

/// An acknowledgement's packet identifier and reason code (0 if omitted).
pub fn ack_of(p: &[u8]) -> (u16, u8) {
    let mut r = body(p);
    (int(&mut r, 2) as u16, r.first().copied().unwrap_or(0))
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
        let ack = self.recv().await.expect("SUBACK");
        assert_eq!((ack[0], ack_of(&ack).0), (0x90, pkid), "SUBACK: {ack:?}");
        ack[ack.len() - filters.len()..].to_vec()
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
