//! A property list in the tests' terms, and the byte-by-byte reader of a
//! PUBLISH's properties (see [`super::publication`] for why not rumqttc's).

use super::USER_PROPERTY;

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

/// A variable byte integer at the start of `buf`: its value and length.
pub(super) fn read_varint(buf: &[u8]) -> (usize, usize) {
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
pub(super) fn take<'a>(r: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, rest) = r.split_at(n);
    *r = rest;
    head
}

/// A big-endian integer of `n` bytes.
pub(super) fn int(r: &mut &[u8], n: usize) -> u32 {
    take(r, n).iter().fold(0, |acc, b| acc << 8 | u32::from(*b))
}

/// A length-prefixed string or binary data.
fn bytes<'a>(r: &mut &'a [u8]) -> &'a [u8] {
    let n = int(r, 2) as usize;
    take(r, n)
}

pub(super) fn text(r: &mut &[u8]) -> String {
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

    /// Panics unless every property is one of `allowed`: what a packet
    /// type carries is rumqttc's to encode, and a test that needs a property
    /// where MQTT 5 forbids it writes the bytes itself.
    pub(super) fn only(&self, allowed: &[u8], packet: &str) {
        for (id, _) in &self.0 {
            assert!(allowed.contains(id), "no property {id:#04x} in a {packet}");
        }
    }

    pub(super) fn u16_of(&self, id: u8) -> Option<u16> {
        self.get(id)
            .map(|v| u16::try_from(v).expect("a two-byte property"))
    }

    /// Adds `id` if `value` is there.
    pub(super) fn maybe(self, id: u8, value: Option<impl Into<u32>>) -> Props {
        match value {
            Some(v) => self.int(id, v.into()),
            None => self,
        }
    }

    pub(super) fn maybe_text(self, id: u8, value: Option<&[u8]>) -> Props {
        match value {
            Some(v) => {
                let mut props = self;
                props.0.push((id, Value::Bytes(v.to_vec())));
                props
            }
            None => self,
        }
    }

    pub(super) fn users_from(mut self, users: &[(String, String)]) -> Props {
        for (k, v) in users {
            self = self.user(k, v);
        }
        self
    }
}
