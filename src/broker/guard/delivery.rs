//! The broker's publications on their way to one client: what MQTT
//! promises a subscriber that rumqttd 0.20 does not keep.
//!
//! - **QoS**: a subscriber gets min(published, granted) (MQTT 5 §3.8.4,
//!   3.1.1 §3.3.5). The vendored rumqttd caps it itself now; a marker's QoS
//!   is still honoured (the guard acknowledges to the broker, on the
//!   client's behalf, what it delivers lower).
//! - **Message Expiry**: an expired publication is not delivered; one that
//!   is gets the time it has left (§3.3.2.3.3).
//! - **Maximum Packet Size** (the client's): larger publications are not
//!   sent (§3.1.2.11.4).
//! - **Receive Maximum** (the client's): no more unacknowledged QoS 1 and 2
//!   publications than it asked for; the rest wait here, in order
//!   (§4.9). rumqttd's own window bounds how many wait.
//! - **Topic Aliases** (broker to client): per topic, up to the client's
//!   Topic Alias Maximum. rumqttd keys them by subscription filter, so a
//!   wildcard subscriber would get every topic of the filter under one
//!   alias; the guard never lets rumqttd alias.
//!
//! rumqttd accepts acknowledgements only in the order it sent the
//! publications (PUBACK/PUBREC), and PUBCOMPs only in the order of the
//! PUBRECs; anything else ends the connection. So every acknowledgement,
//! the client's and the guard's own, goes to the broker through two queues
//! here that release them in that order.
//!
//! Pure state: the connection feeds it packets and writes what it returns.

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};

use super::packet::{self, put_remaining_length, PacketError, Version};
use super::properties::{self, Marker};
use super::sparse::Sparse;

/// What the client declared it can take (MQTT 5 CONNECT properties).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// Largest packet, fixed header included.
    pub max_packet: usize,
    /// Unacknowledged QoS 1 and 2 publications at once.
    pub receive_max: u16,
    /// Topic aliases the guard may set; 0 for none.
    pub alias_max: u16,
}

impl ClientLimits {
    /// An MQTT 3.1.1 client's, or an MQTT 5 client's that said nothing.
    pub const DEFAULT: ClientLimits = ClientLimits {
        max_packet: usize::MAX,
        receive_max: u16::MAX,
        alias_max: 0,
    };
}

/// Publications the guard did not deliver, by reason.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Undelivered {
    pub expired: u64,
    pub too_large: u64,
}

#[derive(Debug)]
pub struct Delivery {
    version: Version,
    limits: ClientLimits,
    /// Topic aliases set for the client, by topic (its bytes: the topic
    /// is never read as text here, see [`FromBroker`]).
    aliases: Sparse<Box<[u8]>, u16>,
    /// QoS 1 and 2 publications sent and not yet acknowledged.
    inflight: u16,
    /// Held publications and PUBCOMPs owed: few clients ever have any.
    seldom: Option<Box<Seldom>>,
    /// QoS 2 publications the client got at QoS 1: its PUBACK becomes the
    /// broker's PUBREC.
    relabelled: Sparse<u16, ()>,
    /// First acknowledgements (PUBACK, PUBREC) owed, in the order the
    /// broker sent the publications.
    acks: VecDeque<Owed>,
    /// What the broker gets next, in the order it requires.
    to_broker: BytesMut,
    pub undelivered: Undelivered,
}

/// What [`Delivery`] makes room for at first use: an empty queue is 32
/// bytes of every idle client's task (issue 48).
#[derive(Debug, Default)]
struct Seldom {
    /// Publications waiting for the client's Receive Maximum, with their
    /// QoS, in the order the broker sent them.
    held: VecDeque<(u8, Bytes)>,
    /// PUBCOMPs owed, in the order of the PUBRECs.
    comps: VecDeque<Owed>,
}

/// One acknowledgement owed to the broker.
#[derive(Debug)]
struct Owed {
    pkid: u16,
    /// The guard's own (the client got the publication lower or not at
    /// all): the broker's PUBREL is the guard's to answer.
    ours: bool,
    /// The packet, once there is one.
    ack: Option<Bytes>,
}

/// A PUBLISH from the broker, read without the checks a client's gets: its
/// topic was checked when the publication came in (the guard's
/// [`super::inspect`]; the sidecar's own are its code's), and the guard
/// only copies it, so it stays bytes. Reading it as UTF-8 and looking for
/// control characters at every delivery was most of the guard's cost of
/// reading one (issue 32).
struct FromBroker<'a> {
    qos: u8,
    /// 0 at QoS 0.
    pkid: u16,
    topic: &'a [u8],
    /// The property list's content (its length field left out).
    properties: &'a [u8],
    payload: &'a [u8],
}

impl<'a> FromBroker<'a> {
    fn read(first: u8, body: &'a [u8]) -> Result<FromBroker<'a>, PacketError> {
        let malformed = PacketError::Malformed("PUBLISH");
        let qos = (first >> 1) & 0x03;
        if qos == 3 {
            return Err(malformed);
        }
        let take = |buf: &'a [u8], n: usize| match buf.len() >= n {
            true => Ok(buf.split_at(n)),
            false => Err(PacketError::Malformed("PUBLISH")),
        };
        let (len, rest) = take(body, 2)?;
        let (topic, rest) = take(rest, usize::from(u16::from_be_bytes([len[0], len[1]])))?;
        let (pkid, rest) = match qos {
            0 => (0, rest),
            _ => {
                let (id, rest) = take(rest, 2)?;
                (u16::from_be_bytes([id[0], id[1]]), rest)
            }
        };
        let (properties, used) = properties::list(rest)?;
        Ok(FromBroker {
            qos,
            pkid,
            topic,
            properties,
            payload: &rest[used..],
        })
    }
}

/// Bytes of a variable byte integer.
pub(super) fn varint_len(n: usize) -> usize {
    match n {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

impl Delivery {
    pub fn new(version: Version, limits: ClientLimits) -> Delivery {
        let limits = match version {
            Version::V4 => ClientLimits::DEFAULT,
            Version::V5 => limits,
        };
        Delivery {
            version,
            limits,
            aliases: Sparse::default(),
            inflight: 0,
            seldom: None,
            relabelled: Sparse::default(),
            acks: VecDeque::new(),
            to_broker: BytesMut::new(),
            undelivered: Undelivered::default(),
        }
    }

    /// One PUBLISH from the broker (`raw` is the whole packet, whose body
    /// starts at `header_len`): what the client gets goes to `client`,
    /// what the broker is owed waits in [`Delivery::take_owed`].
    pub fn publish(
        &mut self,
        raw: &[u8],
        header_len: usize,
        now_ms: u64,
        client: &mut BytesMut,
    ) -> Result<(), PacketError> {
        let first = raw[0];
        let p = FromBroker::read(first, &raw[header_len..])?;
        let mut marker = None;
        let mut plain = true;
        for prop in properties::walk(p.properties) {
            let prop = prop?;
            if let Some(m) = prop.marker() {
                marker = Some(m);
                plain = false;
            } else if prop.id == properties::TOPIC_ALIAS {
                plain = false;
            }
        }
        let as_it_came = plain && self.version == Version::V5 && self.limits.alias_max == 0;
        self.deliver(first, &p, marker, as_it_came.then_some(raw), now_ms, client);
        Ok(())
    }

    /// One publication the broker's link handed over unwritten, for an
    /// MQTT 3.1.1 client (which gets none of its properties but the
    /// guard's marker's say): as [`Delivery::publish`], without writing
    /// it as MQTT 5 first and reading that back (issue 32).
    pub fn publish_unwritten(
        &mut self,
        p: &rumqttd::Publication,
        now_ms: u64,
        client: &mut BytesMut,
    ) {
        debug_assert_eq!(self.version, Version::V4);
        let first = 0x30 | u8::from(p.dup()) << 3 | p.qos() << 1 | u8::from(p.retain());
        let marker = p
            .properties
            .as_ref()
            .and_then(|props| Marker::among(&props.user_properties));
        let from = FromBroker {
            qos: p.qos(),
            pkid: p.pkid(),
            topic: p.topic(),
            properties: &[],
            payload: p.payload(),
        };
        self.deliver(first, &from, marker, None, now_ms, client);
    }

    /// What the client gets for `p` goes to `client` (`raw` when it goes
    /// as it came); what the broker is owed waits in
    /// [`Delivery::take_owed`].
    fn deliver(
        &mut self,
        first: u8,
        p: &FromBroker<'_>,
        marker: Option<Marker>,
        raw: Option<&[u8]>,
        now_ms: u64,
        client: &mut BytesMut,
    ) {
        if p.qos > 0 {
            self.acks.push_back(Owed {
                pkid: p.pkid,
                ours: false,
                ack: None,
            });
        }
        if let Some(at) = marker.as_ref().and_then(|m| m.expires_at_ms) {
            if at <= now_ms {
                self.undelivered.expired += 1;
                self.ack_for_client(p.qos, p.pkid);
                return;
            }
        }
        let qos = p.qos.min(marker.as_ref().map_or(2, |m| m.qos));
        // Written straight into the client's buffer, and taken back out if
        // it is too large or must wait.
        let start = client.len();
        let mut new_alias = None;
        match raw {
            Some(raw) if qos == p.qos => client.extend_from_slice(raw),
            _ => {
                let expires_at_ms = marker.as_ref().and_then(|m| m.expires_at_ms);
                new_alias = self.encode(first, qos, p, expires_at_ms, now_ms, client);
            }
        }
        if client.len() - start > self.limits.max_packet {
            client.truncate(start);
            self.undelivered.too_large += 1;
            self.ack_for_client(p.qos, p.pkid);
            return;
        }
        if let Some(alias) = new_alias {
            self.aliases.insert(p.topic.into(), alias);
        }
        match (p.qos, qos) {
            (_, 0) => self.ack_for_client(p.qos, p.pkid),
            (2, 1) => {
                self.relabelled.insert(p.pkid, ());
            }
            _ => {}
        }
        let none_held = self.seldom.as_ref().is_none_or(|s| s.held.is_empty());
        if none_held && (qos == 0 || self.inflight < self.limits.receive_max) {
            if qos > 0 {
                self.inflight += 1;
            }
        } else {
            let held = client.split_off(start).freeze();
            self.seldom().held.push_back((qos, held));
        }
    }

    /// Appends the client packet for `p`, at `qos`, with the properties it
    /// gets, to `out`; returns the topic alias it sets, if new.
    fn encode(
        &self,
        first: u8,
        qos: u8,
        p: &FromBroker<'_>,
        expires_at_ms: Option<u64>,
        now_ms: u64,
        out: &mut BytesMut,
    ) -> Option<u16> {
        let v5 = self.version == Version::V5;
        let kept = |prop: &properties::Property<'_>| {
            !(prop.id == properties::TOPIC_ALIAS
                || prop.user_key() == Some(properties::MARKER_KEY)
                || (prop.id == properties::MESSAGE_EXPIRY && expires_at_ms.is_some()))
        };
        let expiry = expires_at_ms.map(|at| {
            let left = at.saturating_sub(now_ms).div_ceil(1000).max(1);
            properties::u32_property(
                properties::MESSAGE_EXPIRY,
                u32::try_from(left).unwrap_or(u32::MAX),
            )
        });
        let alias = if v5 { self.alias(p.topic) } else { None };
        let alias_property =
            alias.map(|(a, _)| properties::u16_property(properties::TOPIC_ALIAS, a));
        let topic = match alias {
            Some((_, true)) => &[][..],
            _ => p.topic,
        };
        let props_len = if v5 {
            properties::walk(p.properties)
                .filter_map(Result::ok)
                .filter(kept)
                .map(|prop| prop.raw.len())
                .sum::<usize>()
                + expiry.map_or(0, |e| e.len())
                + alias_property.map_or(0, |a| a.len())
        } else {
            0
        };
        let pkid_len = if qos > 0 { 2 } else { 0 };
        let props_field = if v5 {
            varint_len(props_len) + props_len
        } else {
            0
        };
        let remaining = 2 + topic.len() + pkid_len + props_field + p.payload.len();
        // DUP only where there is a packet identifier; retain as sent.
        let flags = (first & 0x01) | (qos << 1) | if qos > 0 { first & 0x08 } else { 0 };
        out.reserve(remaining + 5);
        out.put_u8(0x30 | flags);
        put_remaining_length(out, remaining);
        // The topic comes from a decoded packet, so it fits in 16 bits.
        out.put_u16(topic.len() as u16);
        out.put_slice(topic);
        if qos > 0 {
            out.put_u16(p.pkid);
        }
        if v5 {
            put_remaining_length(out, props_len);
            for prop in properties::walk(p.properties)
                .filter_map(Result::ok)
                .filter(kept)
            {
                out.put_slice(prop.raw);
            }
            if let Some(e) = expiry {
                out.put_slice(&e);
            }
            if let Some(a) = alias_property {
                out.put_slice(&a);
            }
        }
        out.put_slice(p.payload);
        alias.and_then(|(a, known)| (!known).then_some(a))
    }

    /// The alias for `topic`, and whether the client already knows it; a
    /// new one (not yet recorded) while there are any left.
    fn alias(&self, topic: &[u8]) -> Option<(u16, bool)> {
        if self.limits.alias_max == 0 || topic.is_empty() {
            return None;
        }
        if let Some(&a) = self.aliases.get(topic) {
            return Some((a, true));
        }
        let next = u16::try_from(self.aliases.len() + 1).ok()?;
        (next <= self.limits.alias_max).then_some((next, false))
    }

    /// A publication the client does not acknowledge (it got it at QoS 0,
    /// or not at all): the guard does, in its turn.
    fn ack_for_client(&mut self, qos: u8, pkid: u16) {
        let ack = match qos {
            1 => packet::puback(Version::V5, pkid, 0),
            2 => packet::pubrec(pkid, 0),
            _ => return,
        };
        self.settle_ack(pkid, true, &ack);
    }

    /// Fills in the first acknowledgement of `pkid` and releases what is
    /// due. One the broker is not waiting for goes as it is.
    fn settle_ack(&mut self, pkid: u16, ours: bool, ack: &[u8]) {
        let Some(at) = self
            .acks
            .iter()
            .position(|o| o.pkid == pkid && o.ack.is_none())
        else {
            self.to_broker.extend_from_slice(ack);
            return;
        };
        if at > 0 {
            // Out of the broker's order: it waits for those before it.
            self.acks[at].ours = ours;
            self.acks[at].ack = Some(Bytes::copy_from_slice(ack));
            return;
        }
        self.acks.pop_front();
        self.release_ack(pkid, ours, ack);
        while self.acks.front().is_some_and(|o| o.ack.is_some()) {
            if let Some(Owed {
                pkid,
                ours,
                ack: Some(ack),
            }) = self.acks.pop_front()
            {
                self.release_ack(pkid, ours, &ack);
            }
        }
    }

    fn release_ack(&mut self, pkid: u16, ours: bool, ack: &[u8]) {
        // A successful PUBREC is followed by the broker's PUBREL.
        if ack.first().map(|b| b >> 4) == Some(packet::PUBREC)
            && ack.get(4).is_none_or(|&reason| reason < 0x80)
        {
            self.seldom().comps.push_back(Owed {
                pkid,
                ours,
                ack: None,
            });
        }
        self.to_broker.extend_from_slice(ack);
    }

    /// Fills in the PUBCOMP of `pkid` and releases what is due; false when
    /// the broker waits for no such PUBCOMP.
    fn settle_comp(&mut self, pkid: u16, ours: bool, comp: &[u8]) -> bool {
        let Some(seldom) = self.seldom.as_deref_mut() else {
            return false;
        };
        let comps = &mut seldom.comps;
        let Some(at) = comps
            .iter()
            .position(|o| o.pkid == pkid && o.ours == ours && o.ack.is_none())
        else {
            return false;
        };
        if at > 0 {
            comps[at].ack = Some(Bytes::copy_from_slice(comp));
            return true;
        }
        comps.pop_front();
        self.to_broker.extend_from_slice(comp);
        while comps.front().is_some_and(|o| o.ack.is_some()) {
            if let Some(Owed { ack: Some(ack), .. }) = comps.pop_front() {
                self.to_broker.extend_from_slice(&ack);
            }
        }
        true
    }

    /// A PUBREL from the broker: true when it answers the guard's PUBREC
    /// (the client never sees it, the guard owes the PUBCOMP).
    pub fn broker_pubrel(&mut self, pkid: u16) -> bool {
        self.settle_comp(pkid, true, &packet::pubcomp(pkid))
    }

    /// An acknowledgement from the client (PUBACK, PUBREC or PUBCOMP, the
    /// whole packet): frees its slot, and goes to the broker in its turn,
    /// as the PUBREC the broker waits for when the client got at QoS 1 what
    /// the broker sent at QoS 2.
    pub fn client_ack(&mut self, raw: &[u8], header_len: usize) {
        let kind = raw[0] >> 4;
        let body = &raw[header_len..];
        let (Some(&hi), Some(&lo)) = (body.first(), body.get(1)) else {
            self.to_broker.extend_from_slice(raw);
            return;
        };
        let pkid = u16::from_be_bytes([hi, lo]);
        let failed = body.get(2).is_some_and(|&reason| reason >= 0x80);
        match kind {
            packet::PUBACK => {
                self.inflight = self.inflight.saturating_sub(1);
                // Relabelled QoS 2 publications are rare: no hashing
                // for every PUBACK.
                if !self.relabelled.is_empty() && self.relabelled.remove(&pkid).is_some() {
                    self.settle_ack(pkid, true, &packet::pubrec(pkid, 0));
                } else {
                    self.settle_ack(pkid, false, raw);
                }
            }
            packet::PUBREC => {
                if failed {
                    self.inflight = self.inflight.saturating_sub(1);
                }
                self.settle_ack(pkid, false, raw);
            }
            packet::PUBCOMP => {
                self.inflight = self.inflight.saturating_sub(1);
                if !self.settle_comp(pkid, false, raw) {
                    self.to_broker.extend_from_slice(raw);
                }
            }
            _ => self.to_broker.extend_from_slice(raw),
        }
    }

    /// Whether the broker is owed something now.
    pub fn owes(&self) -> bool {
        !self.to_broker.is_empty()
    }

    fn seldom(&mut self) -> &mut Seldom {
        self.seldom.get_or_insert_default()
    }

    /// What the broker is owed now, in order.
    pub fn take_owed(&mut self) -> Option<Bytes> {
        (!self.to_broker.is_empty()).then(|| self.to_broker.split().freeze())
    }

    /// Whether held publications may go now.
    pub fn releasable(&self) -> bool {
        let Some(seldom) = self.seldom.as_deref() else {
            return false;
        };
        seldom
            .held
            .front()
            .is_some_and(|(qos, _)| *qos == 0 || self.inflight < self.limits.receive_max)
    }

    /// Sends what the client's Receive Maximum allows, in order.
    pub fn release(&mut self, client: &mut BytesMut) {
        while self.releasable() {
            let Some((qos, bytes)) = self.seldom().held.pop_front() else {
                return;
            };
            if qos > 0 {
                self.inflight += 1;
            }
            client.extend_from_slice(&bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::guard::packet::frame;
    use crate::broker::guard::properties::Marker;

    /// A broker PUBLISH (MQTT 5) with the given properties.
    fn from_broker(qos: u8, topic: &str, pkid: u16, props: &[&[u8]], payload: &[u8]) -> Vec<u8> {
        let mut body = BytesMut::new();
        body.put_u16(topic.len() as u16);
        body.put_slice(topic.as_bytes());
        if qos > 0 {
            body.put_u16(pkid);
        }
        properties::put_list(&mut body, props);
        body.put_slice(payload);
        let mut out = BytesMut::new();
        out.put_u8(0x30 | (qos << 1));
        put_remaining_length(&mut out, body.len());
        out.put_slice(&body);
        out.to_vec()
    }

    fn marker(qos: u8, expires_at_ms: Option<u64>) -> Vec<u8> {
        Marker {
            qos,
            expires_at_ms,
            principal: None,
        }
        .property()
    }

    /// Feeds one packet; returns the client's packets and the broker's.
    fn feed(d: &mut Delivery, raw: &[u8], now: u64) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let h = frame(raw, usize::MAX).unwrap().unwrap();
        let mut client = BytesMut::new();
        d.publish(raw, h.header_len, now, &mut client).unwrap();
        (split(&client), owed(d))
    }

    fn owed(d: &mut Delivery) -> Vec<Vec<u8>> {
        split(&d.take_owed().unwrap_or_default())
    }

    /// The client acknowledges; returns what the broker gets.
    fn ack(d: &mut Delivery, packet: &[u8]) -> Vec<Vec<u8>> {
        d.client_ack(packet, 2);
        owed(d)
    }

    fn puback(pkid: u16) -> Vec<u8> {
        packet::puback(Version::V5, pkid, 0).to_vec()
    }

    fn split(mut bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(h) = frame(bytes, usize::MAX).unwrap() {
            out.push(bytes[..h.size()].to_vec());
            bytes = &bytes[h.size()..];
        }
        out
    }

    fn decoded(raw: &[u8], version: Version) -> (u8, String, Vec<u8>, Vec<u8>) {
        let h = frame(raw, usize::MAX).unwrap().unwrap();
        let p = packet::publish(raw[0], &raw[h.header_len..], version).unwrap();
        (
            p.qos,
            p.topic.to_owned(),
            p.properties.to_vec(),
            p.payload.to_vec(),
        )
    }

    #[test]
    fn delivers_at_the_qos_published_and_acks_the_difference() {
        let mut d = Delivery::new(Version::V5, ClientLimits::DEFAULT);
        let m0 = marker(0, None);
        // Granted 2, published 0: QoS 0, the broker gets PUBREC, then its
        // PUBREL gets PUBCOMP.
        let (client, broker) = feed(&mut d, &from_broker(2, "t", 5, &[&m0], b"x"), 0);
        let (qos, topic, props, payload) = decoded(&client[0], Version::V5);
        assert_eq!(
            (qos, topic.as_str(), props, payload),
            (0, "t", vec![], b"x".to_vec())
        );
        assert_eq!(broker, vec![packet::pubrec(5, 0).to_vec()]);
        assert!(d.broker_pubrel(5));
        assert_eq!(owed(&mut d), vec![packet::pubcomp(5).to_vec()]);
        assert!(!d.broker_pubrel(5));
        // Granted 1, published 0: the broker gets PUBACK.
        let (client, broker) = feed(&mut d, &from_broker(1, "t", 6, &[&m0], b"x"), 0);
        assert_eq!(decoded(&client[0], Version::V5).0, 0);
        assert_eq!(broker, vec![puback(6)]);
        // Granted 2, published 1: QoS 1 with the broker's identifier; the
        // client's PUBACK becomes PUBREC, the broker's PUBREL the guard's.
        let m1 = marker(1, None);
        let (client, broker) = feed(&mut d, &from_broker(2, "t", 7, &[&m1], b"x"), 0);
        assert_eq!(decoded(&client[0], Version::V5).0, 1);
        assert!(broker.is_empty());
        assert_eq!(ack(&mut d, &puback(7)), vec![packet::pubrec(7, 0).to_vec()]);
        assert!(d.broker_pubrel(7));
        assert_eq!(owed(&mut d), vec![packet::pubcomp(7).to_vec()]);
        // Unmarked (published by the sidecar itself): as granted, as it came.
        let raw = from_broker(1, "t", 8, &[], b"x");
        let (client, broker) = feed(&mut d, &raw, 0);
        assert_eq!(client, vec![raw]);
        assert!(broker.is_empty());
        assert_eq!(ack(&mut d, &puback(8)), vec![puback(8)]);
    }

    #[test]
    fn acknowledgements_reach_the_broker_in_the_order_it_sent() {
        let mut d = Delivery::new(Version::V5, ClientLimits::DEFAULT);
        let m0 = marker(0, None);
        let m2 = marker(2, None);
        // 1: QoS 2 to the client; 2: delivered at QoS 0 (the guard's
        // PUBREC); 3: QoS 2 to the client.
        feed(&mut d, &from_broker(2, "t", 1, &[&m2], b"x"), 0);
        let (_, broker) = feed(&mut d, &from_broker(2, "t", 2, &[&m0], b"x"), 0);
        assert!(broker.is_empty(), "the guard's PUBREC waits for 1's");
        feed(&mut d, &from_broker(2, "t", 3, &[&m2], b"x"), 0);
        let rec = |pkid: u16| packet::pubrec(pkid, 0).to_vec();
        assert!(ack(&mut d, &rec(3)).is_empty(), "3 waits for 1 and 2");
        assert_eq!(ack(&mut d, &rec(1)), vec![rec(1), rec(2), rec(3)]);
        // PUBCOMPs in the PUBRECs' order: the client's for 3 waits for the
        // guard's for 2, which waits for the client's for 1.
        let comp = |pkid: u16| packet::pubcomp(pkid).to_vec();
        assert!(ack(&mut d, &comp(3)).is_empty());
        assert!(d.broker_pubrel(2));
        assert!(owed(&mut d).is_empty());
        assert_eq!(ack(&mut d, &comp(1)), vec![comp(1), comp(2), comp(3)]);
    }

    #[test]
    fn expired_publications_are_not_delivered_and_others_get_the_time_left() {
        let mut d = Delivery::new(Version::V5, ClientLimits::DEFAULT);
        let expiry = properties::u32_property(properties::MESSAGE_EXPIRY, 60);
        let m = marker(1, Some(60_000));
        let (client, broker) = feed(
            &mut d,
            &from_broker(1, "t", 1, &[&expiry, &m], b"x"),
            60_000,
        );
        assert!(client.is_empty());
        assert_eq!(broker, vec![puback(1)]);
        assert_eq!(d.undelivered.expired, 1);
        let (client, _) = feed(&mut d, &from_broker(1, "t", 2, &[&expiry, &m], b"x"), 2_500);
        let (_, _, props, _) = decoded(&client[0], Version::V5);
        assert_eq!(
            props,
            properties::u32_property(properties::MESSAGE_EXPIRY, 58)
        );
    }

    #[test]
    fn the_clients_receive_maximum_holds_the_rest_in_order() {
        let limits = ClientLimits {
            receive_max: 2,
            ..ClientLimits::DEFAULT
        };
        let mut d = Delivery::new(Version::V5, limits);
        let mut sent = Vec::new();
        for pkid in 1..=3 {
            sent.extend(feed(&mut d, &from_broker(1, "t", pkid, &[], b"x"), 0).0);
        }
        // A QoS 0 one after them waits too: order is kept.
        sent.extend(feed(&mut d, &from_broker(0, "z", 0, &[], b"x"), 0).0);
        assert_eq!(sent.len(), 2);
        assert!(!d.releasable());
        assert_eq!(ack(&mut d, &puback(1)), vec![puback(1)]);
        assert!(d.releasable());
        let mut client = BytesMut::new();
        d.release(&mut client);
        let released = split(&client);
        assert_eq!(released.len(), 2);
        assert_eq!(decoded(&released[1], Version::V5).1, "z");
    }

    #[test]
    fn too_large_for_the_client_is_acknowledged_not_sent() {
        let limits = ClientLimits {
            max_packet: 20,
            ..ClientLimits::DEFAULT
        };
        let mut d = Delivery::new(Version::V5, limits);
        let (client, broker) = feed(&mut d, &from_broker(2, "t", 3, &[], &[b'.'; 32]), 0);
        assert!(client.is_empty());
        assert_eq!(broker, vec![packet::pubrec(3, 0).to_vec()]);
        let (client, _) = feed(&mut d, &from_broker(2, "t", 4, &[], b"small"), 0);
        assert_eq!(client.len(), 1);
    }

    #[test]
    fn a_skipped_publication_sets_no_alias() {
        let limits = ClientLimits {
            max_packet: 20,
            alias_max: 4,
            ..ClientLimits::DEFAULT
        };
        let mut d = Delivery::new(Version::V5, limits);
        let (client, _) = feed(&mut d, &from_broker(0, "t", 0, &[], &[b'.'; 32]), 0);
        assert!(client.is_empty());
        // The client never learnt an alias for "t": the topic goes in full.
        let (client, _) = feed(&mut d, &from_broker(0, "t", 0, &[], b"x"), 0);
        assert_eq!(decoded(&client[0], Version::V5).1, "t");
    }

    #[test]
    fn topic_aliases_are_per_topic_and_within_the_clients_maximum() {
        let limits = ClientLimits {
            alias_max: 2,
            ..ClientLimits::DEFAULT
        };
        let mut d = Delivery::new(Version::V5, limits);
        let mut known: std::collections::HashMap<u16, String> = Default::default();
        for topic in ["a/1", "a/2", "a/1", "a/3", "a/1", "a/2", "a/3"] {
            let (client, _) = feed(&mut d, &from_broker(0, topic, 0, &[], b"x"), 0);
            let (_, sent, props, _) = decoded(&client[0], Version::V5);
            let alias = properties::all(&props)
                .unwrap()
                .iter()
                .find(|p| p.id == properties::TOPIC_ALIAS)
                .map(|p| p.int() as u16);
            let resolved = match alias {
                Some(a) if sent.is_empty() => known[&a].clone(),
                Some(a) => {
                    assert!(a <= 2);
                    known.insert(a, sent.clone());
                    sent
                }
                None => sent,
            };
            assert_eq!(resolved, topic);
        }
    }

    #[test]
    fn mqtt311_clients_get_no_properties() {
        let mut d = Delivery::new(Version::V4, ClientLimits::DEFAULT);
        let user = {
            let mut p = vec![properties::USER_PROPERTY, 0, 1, b'k', 0, 1, b'v'];
            p.extend(marker(1, None));
            p
        };
        let (client, broker) = feed(&mut d, &from_broker(2, "t", 9, &[&user], b"x"), 0);
        assert_eq!(client, vec![vec![0x32, 6, 0, 1, b't', 0, 9, b'x']]);
        assert!(broker.is_empty());
    }
}
