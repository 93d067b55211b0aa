//! Acknowledgements that wait for the store (issue 43): each PUBACK,
//! PUBREC and SUBACK covers the store's changes made since the packet it
//! acknowledges was handed to the broker, and only those. Pure state and
//! rewriting; [`super::relay`] waits for the store.
//!
//! The client-to-broker pump records the store's mark per packet
//! identifier as it forwards a QoS 1/2 PUBLISH or a SUBSCRIBE ([`Marks`];
//! at most Receive Maximum publications are in flight); the other pump
//! takes the marks of the acknowledgements in what it read, waits for a
//! barrier since the smallest, and when a change in that window failed,
//! rewrites those acknowledgements ([`refuse`]): MQTT 5 with reason 0x97
//! Quota exceeded (0x80 once the store stopped for good) and a Reason
//! String; MQTT 3.1.1, whose PUBACK cannot refuse, by closing the
//! connection before it (the client publishes again on its next one), a
//! SUBACK with 0x80 per filter.

use bytes::{Bytes, BytesMut};
use rumqttd::protocol as wire;

use super::packet::{self, decode_body, Version};
use super::reason::{QUOTA_EXCEEDED, UNSPECIFIED_ERROR, V4_FAILURE};
use super::sparse::Sparse;
use crate::store::StoreError;

/// The store's mark when each packet awaiting an acknowledgement went to
/// the broker, by packet identifier.
#[derive(Default)]
pub(super) struct Marks {
    by_pkid: Sparse<u16, u64>,
}

impl Marks {
    pub(super) fn record(&mut self, pkid: u16, mark: u64) {
        self.by_pkid.insert(pkid, mark);
    }

    /// The mark of what `pkid` acknowledges; the map's room is given back
    /// once nothing is in flight (an idle connection holds none).
    pub(super) fn take(&mut self, pkid: u16) -> Option<u64> {
        self.by_pkid.remove(&pkid)
    }
}

/// The reason code an MQTT 5 client gets for `error`.
pub(super) fn reason_code(error: &StoreError) -> u8 {
    match error {
        StoreError::Full { .. } => QUOTA_EXCEEDED,
        _ => UNSPECIFIED_ERROR,
    }
}

/// `out` with the acknowledgements `failed` names (by kind and packet
/// identifier: the error that refuses them) rewritten; `Err` with what may
/// still be written when a 3.1.1 client's PUBACK or PUBREC must be refused
/// (the connection closes after it).
pub(super) fn refuse(
    version: Version,
    out: &[u8],
    failed: impl Fn(u16) -> Option<StoreError>,
) -> Result<BytesMut, BytesMut> {
    let mut rewritten = BytesMut::with_capacity(out.len() + 64);
    let mut pos = 0;
    while let Ok(Some(header)) = packet::frame(&out[pos..], usize::MAX) {
        let end = pos + header.size();
        let raw = &out[pos..end];
        let body = &raw[header.header_len..];
        pos = end;
        let kind = header.kind();
        let refusal = match kind {
            packet::PUBACK | packet::PUBREC | packet::SUBACK if body.len() >= 2 => {
                failed(u16::from_be_bytes([body[0], body[1]]))
            }
            _ => None,
        };
        let Some(error) = refusal else {
            rewritten.extend_from_slice(raw);
            continue;
        };
        match (version, kind) {
            (Version::V4, packet::PUBACK | packet::PUBREC) => return Err(rewritten),
            _ => rewritten.extend_from_slice(&refused(version, header.first, body, &error)),
        }
    }
    rewritten.extend_from_slice(&out[pos..]);
    Ok(rewritten)
}

/// One refused acknowledgement, as the client's version writes it.
fn refused(version: Version, first: u8, body: &[u8], error: &StoreError) -> Bytes {
    let code = reason_code(error);
    let pkid = u16::from_be_bytes([body[0], body[1]]);
    match first >> 4 {
        packet::PUBACK => packet::refused_saying(1, pkid, code, &error.to_string()),
        packet::PUBREC => packet::refused_saying(2, pkid, code, &error.to_string()),
        _ => {
            // One code per filter: after the packet identifier in 3.1.1,
            // after the properties in MQTT 5.
            let codes = match version {
                Version::V4 => body.len().saturating_sub(2).max(1),
                Version::V5 => match decode_body(first, body, "SUBACK") {
                    Ok(wire::Packet::SubAck(ack, _)) => ack.return_codes.len(),
                    _ => 1,
                },
            };
            let code = match version {
                Version::V4 => V4_FAILURE,
                Version::V5 => code,
            };
            packet::encode_suback(
                version,
                pkid,
                Some(wire::SubAckProperties {
                    reason_string: Some(error.to_string()),
                    user_properties: Vec::new(),
                }),
                &vec![code; codes],
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> StoreError {
        StoreError::Full {
            reason: "free space below store.min_free_bytes".into(),
        }
    }

    /// PUBACK 7 (refused), PUBACK 8 (kept), SUBACK 9 with two codes.
    fn chunk() -> Vec<u8> {
        vec![0x40, 2, 0, 7, 0x40, 2, 0, 8, 0x90, 5, 0, 9, 0, 0, 1]
    }

    fn only(pkids: &'static [u16]) -> impl Fn(u16) -> Option<StoreError> {
        move |pkid| pkids.contains(&pkid).then(full)
    }

    #[test]
    fn an_mqtt_5_client_gets_quota_exceeded_with_a_reason_string() {
        let out = refuse(Version::V5, &chunk(), only(&[7, 9])).unwrap();
        let mut packets = Vec::new();
        let mut pos = 0;
        while let Ok(Some(h)) = packet::frame(&out[pos..], usize::MAX) {
            let body = &out[pos + h.header_len..pos + h.size()];
            packets.push(decode_body(h.first, body, "ack").unwrap());
            pos += h.size();
        }
        assert_eq!(pos, out.len());
        let [wire::Packet::PubAck(a, Some(p)), wire::Packet::PubAck(b, None), wire::Packet::SubAck(s, Some(sp))] =
            &packets[..]
        else {
            panic!("{packets:?}");
        };
        assert_eq!((a.pkid, a.reason), (7, wire::PubAckReason::QuotaExceeded));
        assert!(p
            .reason_string
            .as_deref()
            .unwrap()
            .contains("min_free_bytes"));
        assert_eq!((b.pkid, b.reason), (8, wire::PubAckReason::Success));
        assert_eq!(s.pkid, 9);
        assert_eq!(s.return_codes.len(), 2);
        assert!(s.return_codes.iter().all(|c| c.v5() == QUOTA_EXCEEDED));
        assert!(sp.reason_string.is_some());
    }

    #[test]
    fn a_3_1_1_client_is_not_acknowledged_what_was_not_kept() {
        let v4 = [0x40, 2, 0, 7, 0x40, 2, 0, 8, 0x90, 4, 0, 9, 0, 1];
        let kept = refuse(Version::V4, &v4, only(&[8])).unwrap_err();
        assert_eq!(&kept[..], &[0x40, 2, 0, 7], "what came before it only");
        let out = refuse(Version::V4, &v4, only(&[9])).unwrap();
        assert_eq!(&out[..8], &v4[..8]);
        assert_eq!(&out[8..], &[0x90, 4, 0, 9, 0x80, 0x80], "0x80 per filter");
    }

    #[test]
    fn marks_give_their_room_back_when_nothing_is_in_flight() {
        let mut marks = Marks::default();
        marks.record(1, 10);
        marks.record(2, 12);
        assert_eq!(marks.take(1), Some(10));
        assert_eq!(marks.take(1), None);
        assert_eq!(marks.take(2), Some(12));
        assert!(!marks.by_pkid.holds_room());
    }
}
