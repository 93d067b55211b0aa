//! A raw MQTT client for packets no library would send: exact bytes out,
//! whole packets in. Well-formed packets are written and read with
//! rumqttc's codec (`mqttbytes`, which the sidecar does not use); [`packet`],
//! [`string`], [`subscribe`] and [`publish`] write bytes as given, for the
//! reserved bits and raw properties tests send on purpose.

use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use rumqttc::mqttbytes::{v4, Protocol};
use rumqttc::v5::mqttbytes::v5 as wire;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::mqtt5::{self, Props};
use super::WAIT;

/// The length of the whole packet at the start of `buf`, once it is there.
pub fn whole_packet(buf: &[u8]) -> Option<usize> {
    let mut remaining = 0usize;
    for i in 0..4 {
        let byte = *buf.get(1 + i)?;
        remaining |= usize::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            let len = 2 + i + remaining;
            return (buf.len() >= len).then_some(len);
        }
    }
    None
}

pub fn string(s: &[u8]) -> Vec<u8> {
    let mut out = (s.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(s);
    out
}

pub fn packet(first: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    let mut n = body.len();
    loop {
        let mut byte = (n % 128) as u8;
        n /= 128;
        if n > 0 {
            byte |= 0x80;
        }
        out.push(byte);
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(body);
    out
}

/// A v4 packet as rumqttc writes it.
fn encoded4(packet: v4::Packet) -> Vec<u8> {
    let mut out = BytesMut::new();
    packet
        .write(&mut out, usize::MAX)
        .unwrap_or_else(|e| panic!("rumqttc cannot write {packet:?}: {e:?}"));
    out.to_vec()
}

/// A v5 packet as rumqttc writes it.
fn encoded5(packet: wire::Packet) -> Vec<u8> {
    let mut out = BytesMut::new();
    packet
        .write(&mut out, None)
        .unwrap_or_else(|e| panic!("rumqttc cannot write {packet:?}: {e:?}"));
    out.to_vec()
}

/// A CONNECT at protocol `level` 4 or 5; `login` as user name and password.
fn connect_packet(
    level: u8,
    client_id: &str,
    clean: bool,
    keep_alive: u16,
    login: Option<(&str, &str)>,
) -> Vec<u8> {
    match level {
        4 => encoded4(v4::Packet::Connect(v4::Connect {
            protocol: Protocol::V4,
            keep_alive,
            client_id: client_id.into(),
            clean_session: clean,
            last_will: None,
            login: login.map(|(u, p)| v4::Login::new(u, p)),
        })),
        5 => {
            let connect = wire::Connect {
                keep_alive,
                client_id: client_id.into(),
                clean_start: clean,
                properties: None,
            };
            let login = login.map(|(u, p)| wire::Login::new(u, p));
            encoded5(wire::Packet::Connect(connect, None, login))
        }
        _ => panic!("no MQTT protocol level {level}"),
    }
}

/// CONNECT as `user`/pw, clean session, keep-alive 60 s.
pub fn connect(level: u8, client_id: &str, user: &str) -> Vec<u8> {
    connect_packet(level, client_id, true, 60, Some((user, "pw")))
}

/// CONNECT as `user`/`password`, clean session, keep-alive 60 s.
pub fn connect_login(level: u8, client_id: &str, user: &str, password: &str) -> Vec<u8> {
    connect_packet(level, client_id, true, 60, Some((user, password)))
}

/// An MQTT 5 PUBLISH with an optional Topic Alias.
pub fn publish5(topic: &str, qos: u8, pkid: u16, alias: Option<u16>, payload: &[u8]) -> Vec<u8> {
    let props = match alias {
        Some(a) => Props::new().int(mqtt5::TOPIC_ALIAS, u32::from(a)),
        None => Props::new(),
    };
    mqtt5::publish(topic, qos, false, pkid, &props, payload)
}

pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub async fn open(addr: SocketAddr) -> Client {
        Client {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    /// Connects as `user` and reads the CONNACK.
    pub async fn connect(addr: SocketAddr, level: u8, user: &str) -> Client {
        let mut c = Client::open(addr).await;
        c.send(&connect(level, &format!("raw-{user}-{level}"), user))
            .await;
        let ack = c.recv().await.expect("CONNACK");
        assert_eq!((ack[0], ack[3]), (0x20, 0), "accepted: {ack:?}");
        c
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// The next whole packet, or `None` once the connection is closed.
    pub async fn recv(&mut self) -> Option<Vec<u8>> {
        tokio::time::timeout(WAIT, async {
            loop {
                if let Some(len) = whole_packet(&self.buf) {
                    return Some(self.buf.drain(..len).collect());
                }
                let mut chunk = [0u8; 4096];
                match self.stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await
        .expect("packet or close in time")
    }
}

/// CONNECT without credentials: `level` 4 or 5, `clean`, `keep_alive`
/// seconds.
pub fn connect_with(level: u8, client_id: &str, clean: bool, keep_alive: u16) -> Vec<u8> {
    connect_packet(level, client_id, clean, keep_alive, None)
}

/// A PUBLISH: MQTT 5 (`level` 5) with raw `properties` (without their
/// length), or 3.1.1 (properties ignored).
pub fn publish(
    level: u8,
    topic: &str,
    qos: u8,
    pkid: u16,
    properties: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let mut body = string(topic.as_bytes());
    if qos > 0 {
        body.extend(pkid.to_be_bytes());
    }
    if level == 5 {
        body.push(properties.len() as u8);
        body.extend_from_slice(properties);
    }
    body.extend_from_slice(payload);
    packet(0x30 | (qos << 1), &body)
}

/// A SUBSCRIBE of `filters`, each with its options byte as given (reserved
/// bits too, which no codec would write).
pub fn subscribe(level: u8, pkid: u16, filters: &[(&str, u8)]) -> Vec<u8> {
    let mut body = pkid.to_be_bytes().to_vec();
    if level == 5 {
        body.push(0);
    }
    for (filter, options) in filters {
        body.extend(string(filter.as_bytes()));
        body.push(*options);
    }
    packet(0x82, &body)
}

/// An UNSUBSCRIBE of `filters`.
pub fn unsubscribe(level: u8, pkid: u16, filters: &[&str]) -> Vec<u8> {
    let filters: Vec<String> = filters.iter().map(|f| f.to_string()).collect();
    match level {
        4 => encoded4(v4::Packet::Unsubscribe(v4::Unsubscribe {
            pkid,
            topics: filters,
        })),
        _ => encoded5(wire::Packet::Unsubscribe(wire::Unsubscribe {
            pkid,
            filters,
            properties: None,
        })),
    }
}

/// The topic and payload of a PUBLISH packet, properties skipped.
pub fn published(level: u8, p: &[u8]) -> (String, Vec<u8>) {
    let mut buf = BytesMut::from(p);
    let (topic, payload): (String, Bytes) = match level {
        4 => match v4::Packet::read(&mut buf, usize::MAX) {
            Ok(v4::Packet::Publish(publish)) => (publish.topic, publish.payload),
            other => panic!("a PUBLISH: {p:?} ({other:?})"),
        },
        // See [`mqtt5::publication`] for why not rumqttc.
        _ => {
            let publish = mqtt5::publication(p);
            (publish.topic, publish.payload.into())
        }
    };
    (topic, payload.to_vec())
}

impl Client {
    /// Connects with [`connect_with`] and asserts the CONNACK accepts.
    pub async fn connect_clean(addr: SocketAddr, level: u8, client_id: &str) -> Client {
        let mut c = Client::open(addr).await;
        c.send(&connect_with(level, client_id, true, 60)).await;
        let ack = c.recv().await.expect("CONNACK");
        assert_eq!((ack[0], ack[3]), (0x20, 0), "accepted: {ack:?}");
        c
    }

    /// Sends PINGREQ and returns every packet before the PINGRESP: proof
    /// that nothing else was owed.
    pub async fn until_pong(&mut self) -> Vec<Vec<u8>> {
        self.send(&[0xC0, 0]).await;
        let mut before = Vec::new();
        loop {
            let p = self.recv().await.expect("PINGRESP");
            if p == [0xD0, 0] {
                return before;
            }
            before.push(p);
        }
    }

    /// Reads until the connection closes; the packets sent before that.
    pub async fn until_closed(&mut self) -> Vec<Vec<u8>> {
        let mut last = Vec::new();
        while let Some(p) = self.recv().await {
            last.push(p);
        }
        last
    }
}

impl Client {
    /// Reads until a PINGRESP (true) or the end of the connection (false).
    pub async fn until_closed_or_pong(&mut self) -> bool {
        while let Some(p) = self.recv().await {
            if p == [0xD0, 0] {
                return true;
            }
        }
        false
    }
}

/// A clean CONNECT at protocol `level` 4 or 5, keep-alive 60 s, with
/// `login` as user name and password and a QoS 0 last will `(topic,
/// payload, retain)`.
pub fn connect_will(
    level: u8,
    client_id: &str,
    login: Option<(&str, &str)>,
    will: Option<(&str, &[u8], bool)>,
) -> Vec<u8> {
    match level {
        4 => encoded4(v4::Packet::Connect(v4::Connect {
            protocol: Protocol::V4,
            keep_alive: 60,
            client_id: client_id.into(),
            clean_session: true,
            last_will: will.map(|(t, p, retain)| {
                v4::LastWill::new(t, p.to_vec(), rumqttc::QoS::AtMostOnce, retain)
            }),
            login: login.map(|(u, p)| v4::Login::new(u, p)),
        })),
        _ => {
            let connect = wire::Connect {
                keep_alive: 60,
                client_id: client_id.into(),
                clean_start: true,
                properties: None,
            };
            let will = will.map(|(t, p, retain)| wire::LastWill {
                topic: Bytes::copy_from_slice(t.as_bytes()),
                message: Bytes::copy_from_slice(p),
                qos: rumqttc::v5::mqttbytes::QoS::AtMostOnce,
                retain,
                properties: None,
            });
            let login = login.map(|(u, p)| wire::Login::new(u, p));
            encoded5(wire::Packet::Connect(connect, will, login))
        }
    }
}
