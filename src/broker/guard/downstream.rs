//! The broker-to-client direction's decisions: what the client gets for
//! each packet rumqttd sends (translated for an MQTT 3.1.1 client; the
//! guard's SUBACK and UNSUBACK rewrites; its own pings' answers
//! swallowed) and the guard's own packets slipped in between. Pure state;
//! [`super::relay`] moves the bytes.

use std::sync::atomic::Ordering;

use bytes::{Buf, Bytes, BytesMut};
use tracing::warn;

use super::connection::{now_ms, End, ToClient};
use super::delivery::Delivery;
use super::handshake::{self, Offer};
use super::live::Between;
use super::packet::{self, Version};
use super::reason::UNSPECIFIED_ERROR;
use super::sparse::Sparse;
use super::v4::{self, Down};
use rumqttd::Publication;

/// The broker-to-client direction's state.
pub(super) struct Downstream<'a> {
    /// The client's; the broker always speaks MQTT 5.
    pub(super) version: Version,
    /// SUBACKs to rewrite, by packet identifier; `None`: to swallow.
    pub(super) sub_plans: Sparse<u16, Option<Vec<Option<u8>>>>,
    /// UNSUBACKs to gather: how many more the broker owes, and the codes.
    pub(super) unsub_plans: Sparse<u16, (usize, Vec<u8>)>,
    /// What this direction shares with the other.
    pub(super) between: &'a Between,
    /// The broker keeps what must survive a restart in a store on disk.
    pub(super) durable: bool,
    /// What was just taken acknowledges what the client sent (a
    /// publication: the broker may have queued it for kept sessions or
    /// retained it; a subscription of a kept session): the store syncs
    /// first, so that nothing acknowledged is lost in a crash.
    pub(super) sync_first: bool,
    /// The packet identifiers of the PUBACKs, PUBRECs and SUBACKs in what
    /// was just taken: each covers the store's changes since its packet
    /// went to the broker ([`super::stored`]).
    pub(super) acked: Vec<u16>,
    /// What an MQTT 5 client's CONNACK announces.
    pub(super) offer: Offer,
}

impl<'a> Downstream<'a> {
    pub(super) fn new(
        version: Version,
        between: &'a Between,
        durable: bool,
        offer: Offer,
    ) -> Downstream<'a> {
        Downstream {
            version,
            sub_plans: Sparse::default(),
            unsub_plans: Sparse::default(),
            between,
            durable,
            sync_first: false,
            acked: Vec::new(),
            offer,
        }
    }

    /// Applies one request of the inbound pump; true when it closes.
    pub(super) fn take(&mut self, message: ToClient, out: &mut BytesMut) -> bool {
        match message {
            ToClient::Packet(p) => out.extend_from_slice(&p),
            ToClient::SubAck { pkid, plan } => {
                self.sub_plans.insert(pkid, Some(plan));
            }
            ToClient::SwallowSubAck(pkid) => {
                self.sub_plans.insert(pkid, None);
            }
            ToClient::UnsubAck {
                pkid,
                forwarded,
                codes,
            } => {
                self.unsub_plans.insert(pkid, (forwarded, codes));
            }
            ToClient::Release => self.lock().release(out),
            ToClient::Close(last) => {
                if let Some(p) = last {
                    out.extend_from_slice(&p);
                }
                return true;
            }
        }
        false
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Delivery> {
        self.between.delivery()
    }

    /// A publication from the broker, or an acknowledgement the guard
    /// owes it, goes through [`Delivery`]; the caller wakes the other pump
    /// once for the batch, when the guard owes the broker something: true.
    fn publish(
        &mut self,
        raw: &[u8],
        header_len: usize,
        now_ms: u64,
        out: &mut BytesMut,
    ) -> Result<bool, End> {
        let mut delivery = self.lock();
        let result = delivery.publish(raw, header_len, now_ms, out);
        let owes = delivery.owes();
        drop(delivery);
        result.map(|()| owes).map_err(|e| {
            warn!(error = %e, "The embedded MQTT broker sent a PUBLISH the guard cannot read.");
            End::BrokerClosed
        })
    }

    /// What the client gets for one whole packet from the broker: `None`
    /// to pass it as it is, `Some(None)` to swallow it.
    fn translate(&mut self, first: u8, body: &[u8]) -> Result<Option<Option<Bytes>>, End> {
        let kind = first >> 4;
        if matches!(
            kind,
            packet::PUBACK | packet::PUBREC | packet::PUBCOMP | packet::SUBACK | packet::UNSUBACK
        ) {
            self.sync_first |= self.durable;
            if self.durable
                && matches!(kind, packet::PUBACK | packet::PUBREC | packet::SUBACK)
                && body.len() >= 2
            {
                self.acked.push(u16::from_be_bytes([body[0], body[1]]));
            }
        }
        match kind {
            packet::CONNACK if self.version == Version::V5 => {
                return match handshake::connack(body, self.offer) {
                    Ok(ack) => Ok(Some(Some(ack))),
                    Err(e) => {
                        warn!(error = %e, "The embedded MQTT broker sent a CONNACK the guard cannot read.");
                        Err(End::BrokerClosed)
                    }
                };
            }
            packet::PUBREL => {
                let ours = packet::pubrel(body).is_ok_and(|pkid| self.lock().broker_pubrel(pkid));
                if ours {
                    self.between.owed.ring();
                    return Ok(Some(None));
                }
            }
            packet::PUBACK | packet::PUBCOMP => {
                let _ =
                    self.between
                        .unacked
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            }
            packet::SUBACK if !self.sub_plans.is_empty() => {
                let plan = packet::suback_pkid(body).and_then(|pkid| self.sub_plans.remove(&pkid));
                if let Some(None) = plan {
                    return Ok(Some(None));
                }
                let reply = plan
                    .flatten()
                    .map(|plan| packet::suback_reply(self.version, body, &plan, UNSPECIFIED_ERROR));
                if let Some(Ok(reply)) = reply {
                    return Ok(Some(Some(reply)));
                }
            }
            packet::UNSUBACK => {
                if let Some(pkid) = packet::unsuback_pkid(body) {
                    if let Some((owed, _)) = self.unsub_plans.get_mut(&pkid) {
                        *owed = owed.saturating_sub(1);
                        if *owed > 0 {
                            return Ok(Some(None));
                        }
                        let (_, codes) = self.unsub_plans.remove(&pkid).unwrap_or_default();
                        return Ok(Some(Some(packet::encode_unsuback(
                            self.version,
                            pkid,
                            &codes,
                        ))));
                    }
                }
            }
            packet::PINGRESP => {
                let ours = self
                    .between
                    .guard_pings
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok();
                if ours {
                    return Ok(Some(None));
                }
            }
            _ => {}
        }
        match self.version {
            Version::V5 => Ok(None),
            // A successful acknowledgement (packet identifier alone, MQTT 5
            // §3.4.2.1) is laid out as in 3.1.1: it goes as it came, and a
            // batch of them (a publisher's PUBACKs) without a copy.
            Version::V4
                if body.len() == 2
                    && matches!(
                        kind,
                        packet::PUBACK | packet::PUBREC | packet::PUBREL | packet::PUBCOMP
                    ) =>
            {
                Ok(None)
            }
            Version::V4 => match v4::downstream(first, body) {
                Ok(Down::Packet(p)) => Ok(Some(Some(p))),
                Ok(Down::Close) => Err(End::BrokerClosed),
                Err(e) => {
                    warn!(error = %e, "The embedded MQTT broker sent a packet the guard cannot translate.");
                    Err(End::BrokerClosed)
                }
            },
        }
    }

    /// Takes the whole packets off `buf`, and the publications handed over
    /// unwritten with them (an MQTT 3.1.1 client's, each in its place among
    /// the packets), and appends what the client gets to `out`. `Err` when
    /// the connection ends (after `out`).
    pub(super) fn client_bound(
        &mut self,
        buf: &mut BytesMut,
        unwritten: &[Publication],
        mut out: BytesMut,
    ) -> (BytesMut, Option<End>) {
        if self.version == Version::V4 {
            // Every publication is rewritten for a 3.1.1 client, and none
            // grows (the broker's properties are left out): room for all
            // of them at once, instead of a reallocation and a copy each
            // time the buffer doubles.
            let written: usize = unwritten
                .iter()
                .map(|p| p.topic().len() + p.payload().len() + 9)
                .sum();
            out.reserve(buf.len() + written);
        }
        let mut unwritten = unwritten.iter().peekable();
        let mut pos = 0;
        let mut raw_from = 0;
        let mut end = None;
        // One clock reading and at most one wake-up of the other pump per
        // batch, not per publication; none when the guard owes the broker
        // nothing (the client acknowledges what it got: every plain QoS 1
        // delivery), which was a wake-up of the connection's other task per
        // batch (issue 32).
        let mut now = None;
        let mut owes = false;
        loop {
            if unwritten.peek().is_some_and(|p| p.at <= pos) {
                out.extend_from_slice(&buf[raw_from..pos]);
                raw_from = pos;
                let now = *now.get_or_insert_with(now_ms);
                let mut delivery = self.lock();
                while let Some(p) = unwritten.next_if(|p| p.at <= pos) {
                    delivery.publish_unwritten(p, now, &mut out);
                }
                owes |= delivery.owes();
                continue;
            }
            let header = match packet::frame(&buf[pos..], usize::MAX) {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(_) => {
                    end = Some(End::BrokerClosed);
                    break;
                }
            };
            let frame_end = pos + header.size();
            if header.kind() == packet::PUBLISH {
                out.extend_from_slice(&buf[raw_from..pos]);
                raw_from = frame_end;
                let now = *now.get_or_insert_with(now_ms);
                match self.publish(&buf[pos..frame_end], header.header_len, now, &mut out) {
                    Ok(owed) => owes |= owed,
                    Err(e) => {
                        end = Some(e);
                        break;
                    }
                }
                pos = frame_end;
                continue;
            }
            let body = &buf[pos + header.header_len..frame_end];
            match self.translate(header.first, body) {
                Ok(None) => {}
                Ok(Some(replacement)) => {
                    out.extend_from_slice(&buf[raw_from..pos]);
                    if let Some(bytes) = replacement {
                        out.extend_from_slice(&bytes);
                    }
                    raw_from = frame_end;
                }
                Err(e) => {
                    end = Some(e);
                    break;
                }
            }
            pos = frame_end;
        }
        if owes {
            self.between.owed.ring();
        }
        if out.is_empty() && raw_from == 0 {
            // The common case: nothing to add or change, no copy.
            return (buf.split_to(pos), end);
        }
        out.extend_from_slice(&buf[raw_from..pos]);
        buf.advance(pos);
        (out, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::guard::delivery::ClientLimits;

    /// A 3.1.1 client's batch: its subscription's QoS 1 delivery rewritten,
    /// its own publication's PUBACK as the broker sent it (the same bytes
    /// in 3.1.1), and no wake-up of the other pump, which is owed nothing
    /// (issue 32).
    #[test]
    fn a_plain_qos_1_batch_for_a_3_1_1_client_wakes_nothing_and_keeps_its_puback() {
        let between = Between::new(Version::V4, ClientLimits::DEFAULT);
        between.unacked.store(1, Ordering::Relaxed);
        let offer = Offer {
            receive_max: 100,
            max_packet: 1 << 20,
            server_keep_alive: None,
        };
        let mut down = Downstream::new(Version::V4, &between, true, offer);
        // MQTT 5 PUBLISH, QoS 1, topic "t", packet identifier 7, no
        // properties, payload "x"; then PUBACK 9.
        let mut buf = BytesMut::from(&[0x32, 7, 0, 1, b't', 0, 7, 0, b'x', 0x40, 2, 0, 9][..]);
        let (out, end) = down.client_bound(&mut buf, &[], BytesMut::new());
        assert!(end.is_none());
        assert!(buf.is_empty());
        assert_eq!(
            &out[..],
            &[0x32, 6, 0, 1, b't', 0, 7, b'x', 0x40, 2, 0, 9][..]
        );
        assert!(down.sync_first, "the PUBACK waits for the store");
        assert_eq!(between.unacked.load(Ordering::Relaxed), 0);
        assert!(!between.owed.heard(), "nothing owed, no wake-up");
        assert!(between.delivery().take_owed().is_none());
    }
}
