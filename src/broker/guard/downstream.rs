//! The broker-to-client direction's decisions: what the client gets for
//! each packet rumqttd sends (translated for an MQTT 3.1.1 client; the
//! guard's SUBACK and UNSUBACK rewrites; its own pings' answers
//! swallowed) and the guard's own packets slipped in between. Pure state;
//! [`super::relay`] moves the bytes.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use bytes::{Buf, Bytes, BytesMut};
use tracing::warn;

use super::connection::{now_ms, End, ToClient};
use super::delivery::Delivery;
use super::handshake::{self, Offer};
use super::live::Between;
use super::packet::{self, Version};
use super::reason::UNSPECIFIED_ERROR;
use super::v4::{self, Down};

/// The broker-to-client direction's state.
pub(super) struct Downstream<'a> {
    /// The client's; the broker always speaks MQTT 5.
    pub(super) version: Version,
    /// SUBACKs to rewrite, by packet identifier; `None`: to swallow.
    pub(super) sub_plans: HashMap<u16, Option<Vec<Option<u8>>>>,
    /// UNSUBACKs to gather: how many more the broker owes, and the codes.
    pub(super) unsub_plans: HashMap<u16, (usize, Vec<u8>)>,
    /// What this direction shares with the other.
    pub(super) between: &'a Between,
    /// The broker keeps what must survive a restart in a store on disk.
    pub(super) durable: bool,
    /// What was just taken acknowledges what the client sent (a
    /// publication: the broker may have queued it for kept sessions or
    /// retained it; a subscription of a kept session): the store syncs
    /// first, so that nothing acknowledged is lost in a crash.
    pub(super) sync_first: bool,
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
            sub_plans: HashMap::new(),
            unsub_plans: HashMap::new(),
            between,
            durable,
            sync_first: false,
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
    /// once for the batch.
    fn publish(
        &mut self,
        raw: &[u8],
        header_len: usize,
        now_ms: u64,
        out: &mut BytesMut,
    ) -> Result<(), End> {
        let result = self.lock().publish(raw, header_len, now_ms, out);
        result.map_err(|e| {
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
                    self.between.owed.notify_one();
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
                if let (Some(Some(plan)), Ok(ack)) = (plan, packet::suback(body, Version::V5)) {
                    let codes = packet::merge_codes(&plan, ack.codes, UNSPECIFIED_ERROR);
                    let (properties, codes) = match self.version {
                        Version::V4 => {
                            (&[][..], codes.iter().map(|&c| v4::suback_code(c)).collect())
                        }
                        Version::V5 => (ack.properties, codes),
                    };
                    return Ok(Some(Some(packet::encode_suback(
                        self.version,
                        ack.pkid,
                        properties,
                        &codes,
                    ))));
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

    /// Takes the whole packets off `buf` and appends what the client gets
    /// to `out`. `Err` when the connection ends (after `out`).
    pub(super) fn client_bound(
        &mut self,
        buf: &mut BytesMut,
        mut out: BytesMut,
    ) -> (BytesMut, Option<End>) {
        if self.version == Version::V4 {
            // Every publication is rewritten for a 3.1.1 client, and none
            // grows (the broker's properties are left out): room for all
            // of them at once, instead of a reallocation and a copy each
            // time the buffer doubles.
            out.reserve(buf.len());
        }
        let mut pos = 0;
        let mut raw_from = 0;
        let mut end = None;
        // One clock reading and one wake-up of the other pump per batch,
        // not per publication.
        let mut now = None;
        loop {
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
                if let Err(e) = self.publish(&buf[pos..frame_end], header.header_len, now, &mut out)
                {
                    end = Some(e);
                    break;
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
        if now.is_some() {
            self.between.owed.notify_one();
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
