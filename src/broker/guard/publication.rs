//! A client's publication on its way to the broker.
//!
//! The broker never sees a Topic Alias (the guard resolves them per
//! connection, as MQTT 5 scopes them) nor a marker a client made up, and
//! gets the guard's marker wherever delivery will need it: with a Message
//! Expiry, so that it is not delivered once expired, and on request topics,
//! with the publisher's principal. (No subscriber gets a publication at a
//! higher QoS than it was published with: the vendored rumqttd caps that
//! itself, see vendor/rumqttd/PATCHES.md.)

use bytes::{BufMut, Bytes, BytesMut};
use tracing::info;

use super::delivery::varint_len;
use super::inspect::{Inspector, Verdict};
use super::packet::{put_remaining_length, PacketError, Publish, Version};
use super::properties::{self, Marker};
use super::reason::QUOTA_EXCEEDED;
use super::retained::{self, Over};
use super::{GuardEvent, GuardLimit};

impl Inspector<'_> {
    /// A retained publication charged to its publisher (see
    /// [`retained`]), or `Err` past a bound; an empty payload, which
    /// deletes the topic's retained message whether retained or not
    /// (rumqttd), credits its owner. Nothing for the others: the flag and
    /// the payload's length are all they cost.
    pub(super) fn keep_retained(
        &mut self,
        first: u8,
        p: &Publish<'_>,
        topic: &str,
    ) -> Result<(), Over> {
        let retain = first & 0x01 != 0;
        if !retain && !p.payload.is_empty() {
            return Ok(());
        }
        let keeps = &self.shared.keeps;
        if p.payload.is_empty() {
            keeps.retained.remove(topic);
            return Ok(());
        }
        let owner = (!keeps.own).then(|| self.session.name());
        let bytes = retained::size(topic, p.properties, p.payload);
        keeps.retained.charge(owner, topic, bytes)
    }

    /// A retained publication past a bound: not accepted (neither retained
    /// nor delivered); MQTT 5 QoS 1/2 get Quota exceeded naming the key,
    /// the rest is dropped. Counted each time, logged once per connection.
    pub(super) fn over_bound(&mut self, p: &Publish<'_>, over: &Over) -> Verdict {
        let label = over.label();
        self.shared
            .policy
            .observe(GuardEvent::Limit(GuardLimit::Keep(label)));
        if !self.over_logged {
            self.over_logged = true;
            info!(
                client_id = self.client_id,
                principal = self.session.name(),
                key = %over.key(),
                "Refused a retained publication past a bound; further ones on this connection are counted in lmos_sidecar_limit_hits_total, not logged."
            );
        }
        let why = over.reason_string();
        self.refused(p, QUOTA_EXCEEDED, Some(why))
    }
}

/// The MQTT 5 PUBLISH the broker gets for an accepted publication; `None`
/// when an MQTT 5 client's packet can go as it came. `topic` is the one
/// the publication resolved to (its own, or its alias's); `principal`, the
/// publisher's name when the sidecar is to know it (requests).
pub fn to_broker(
    version: Version,
    first: u8,
    p: &Publish<'_>,
    topic: &str,
    now_ms: u64,
    principal: Option<&str>,
) -> Result<Option<Bytes>, PacketError> {
    let mut expiry = None;
    let mut changed = p.alias.is_some();
    for prop in properties::walk(p.properties) {
        let prop = prop?;
        match prop.id {
            properties::MESSAGE_EXPIRY => expiry = Some(prop.int()),
            properties::USER_PROPERTY if prop.user_key() == Some(properties::MARKER_KEY) => {
                changed = true
            }
            _ => {}
        }
    }
    // The broker caps each delivery at the publication's QoS itself (our
    // rumqttd patch), so only an expiry or a principal needs a marker: a
    // plain publication carries nothing rumqttd must copy per subscriber.
    let marker = (expiry.is_some() || principal.is_some()).then(|| Marker {
        qos: p.qos,
        expires_at_ms: expiry.map(|secs| now_ms.saturating_add(u64::from(secs) * 1000)),
        principal: principal.map(str::to_owned),
    });
    if version == Version::V5 && marker.is_none() && !changed {
        return Ok(None);
    }
    let marker = marker.map(|m| m.property());
    let mut kept: Vec<&[u8]> = properties::walk(p.properties)
        .filter_map(Result::ok)
        .filter(|prop| {
            prop.id != properties::TOPIC_ALIAS && prop.user_key() != Some(properties::MARKER_KEY)
        })
        .map(|prop| prop.raw)
        .collect();
    if let Some(m) = &marker {
        kept.push(m);
    }
    let props_len: usize = kept.iter().map(|k| k.len()).sum();
    let pkid_len = if p.qos > 0 { 2 } else { 0 };
    let len = 2 + topic.len() + pkid_len + varint_len(props_len) + props_len + p.payload.len();
    // Written once, in place: every 3.1.1 publication comes this way.
    let mut out = BytesMut::with_capacity(1 + varint_len(len) + len);
    out.put_u8(first);
    put_remaining_length(&mut out, len);
    // The topic comes from a decoded packet, so it fits in 16 bits.
    out.put_u16(topic.len() as u16);
    out.put_slice(topic.as_bytes());
    if p.qos > 0 {
        out.put_u16(p.pkid);
    }
    properties::put_list(&mut out, &kept);
    out.put_slice(p.payload);
    Ok(Some(out.freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::guard::packet::{self, frame};

    fn decode(bytes: &[u8]) -> (u8, Vec<u8>) {
        let h = frame(bytes, usize::MAX).unwrap().unwrap();
        (h.first, bytes[h.header_len..h.size()].to_vec())
    }

    #[test]
    fn a_plain_3_1_1_publication_reaches_the_broker_without_a_marker() {
        // 3.1.1, QoS 1: the broker caps deliveries at QoS 1 itself.
        let body = [0, 1, b't', 0, 7, b'x'];
        let p = packet::publish(0x32, &body, Version::V4).unwrap();
        let out = to_broker(Version::V4, 0x32, &p, "t", 0, None)
            .unwrap()
            .unwrap();
        let (first, b) = decode(&out);
        let back = packet::publish(first, &b, Version::V5).unwrap();
        assert_eq!((back.topic, back.pkid, back.payload), ("t", 7, &b"x"[..]));
        assert!(properties::all(back.properties).unwrap().is_empty());
    }

    #[test]
    fn plain_mqtt_5_publications_below_qos_2_go_as_they_came() {
        for first in [0x30, 0x32] {
            let body: &[u8] = if first == 0x30 {
                &[0, 1, b't', 0, b'x']
            } else {
                &[0, 1, b't', 0, 7, 0, b'x']
            };
            let p = packet::publish(first, body, Version::V5).unwrap();
            assert_eq!(
                to_broker(Version::V5, first, &p, "t", 0, None).unwrap(),
                None
            );
        }
    }

    #[test]
    fn qos_2_without_expiry_or_alias_goes_as_it_came() {
        let body = [0, 1, b't', 0, 7, 0, b'x'];
        let p = packet::publish(0x34, &body, Version::V5).unwrap();
        assert_eq!(
            to_broker(Version::V5, 0x34, &p, "t", 0, None).unwrap(),
            None
        );
    }

    #[test]
    fn aliases_resolve_forged_markers_go_and_expiry_is_dated() {
        let forged = Marker {
            qos: 0,
            expires_at_ms: Some(1),
            principal: None,
        }
        .property();
        let mut props = properties::u16_property(properties::TOPIC_ALIAS, 4).to_vec();
        props.extend(properties::u32_property(properties::MESSAGE_EXPIRY, 5));
        props.extend(&forged);
        let mut body = vec![0, 0, 0, 9, props.len() as u8];
        body.extend(&props);
        body.extend(b"pay");
        let p = packet::publish(0x34, &body, Version::V5).unwrap();
        let out = to_broker(Version::V5, 0x34, &p, "a/b", 1_000, None)
            .unwrap()
            .unwrap();
        let (first, b) = decode(&out);
        let back = packet::publish(first, &b, Version::V5).unwrap();
        assert_eq!(
            (back.topic, back.alias, back.payload),
            ("a/b", None, &b"pay"[..])
        );
        let props = properties::all(back.properties).unwrap();
        assert_eq!(props.len(), 2);
        assert_eq!(props[0].id, properties::MESSAGE_EXPIRY);
        assert_eq!(
            props[1].marker(),
            Some(Marker {
                qos: 2,
                expires_at_ms: Some(6_000),
                principal: None,
            })
        );
    }
}
