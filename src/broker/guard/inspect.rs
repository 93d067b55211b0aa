//! The client-to-broker direction's decisions, packet by packet: what a
//! client may send, what the broker gets instead (translated, marked, or
//! nothing), and what the client is answered by the guard itself. Pure
//! state; [`super::relay`] moves the bytes.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use tracing::{debug, info};

use super::connection::{now_ms, packet_too_large, End, ToClient};
use super::handshake;
use super::live::Between;
use super::packet::{self, Header, PacketError, Version};
use super::publication;
use super::reason::*;
use super::sessions::{AfterClose, Expiry, Filters};
use super::sparse::Sparse;
use super::validate::{self, Violation};
use super::{GuardEvent, GuardLimit, Session, Shared};
use rumqttd::protocol as wire;

/// What becomes of one packet from the client.
pub(super) enum Verdict {
    Forward,
    Replace(Bytes),
    Drop,
    Close,
}

/// The client-to-broker direction and the per-connection state it keeps.
pub(super) struct Inspector<'a> {
    pub(super) version: Version,
    pub(super) session: Box<dyn Session>,
    pub(super) shared: &'a Shared,
    /// MQTT 5 Topic Alias to topic, as the client set them.
    pub(super) aliases: Sparse<u16, String>,
    /// Filters the session holds: for `mqtt.max_subscriptions`, and to
    /// answer UNSUBSCRIBE.
    pub(super) subscriptions: Arc<Filters>,
    /// QoS 2 publications the guard refused with PUBREC; their PUBREL is
    /// answered here, as the broker never saw them.
    pub(super) denied_qos2: Sparse<u16, ()>,
    /// Packets for the client, sent before the batch that caused them goes
    /// to the broker.
    pub(super) pending: Vec<ToClient>,
    /// The client has no keep-alive: the guard pings the broker on its
    /// behalf, every [`PINGS_EVERY`](super::connection::PINGS_EVERY) seconds.
    pub(super) pings: bool,
    /// What this direction shares with the other.
    pub(super) between: &'a Between,
    pub(super) client_id: &'a str,
    /// The session's generation this connection opened.
    pub(super) generation: u64,
    /// The session's expiry; a DISCONNECT may change it.
    pub(super) expiry: Expiry,
    /// Set at DISCONNECT: the session's fate is decided the moment the
    /// client says goodbye, before it can come back on another connection.
    pub(super) after_close: Option<AfterClose>,
    /// A SUBSCRIBE in what was just inspected waits for the guard's
    /// [`super::Prerequisite`] before it goes to the broker.
    pub(super) prepare_first: bool,
    /// What was just inspected, for the order of SUBSCRIBEs and
    /// publications across connections ([`super::order`]).
    pub(super) order: Inspected,
    /// When the connection last handed the router publications.
    pub(super) last_publish: Option<tokio::time::Instant>,
    /// A retained publication was refused past a bound: logged once per
    /// connection, then only counted.
    pub(super) over_logged: bool,
}

/// Kinds of packet in what was just inspected.
#[derive(Default)]
pub(super) struct Inspected {
    /// Held from a SUBSCRIBE's inspection until it is in the router's
    /// queue.
    pub(super) subscribing: Option<super::order::Ticket>,
    pub(super) publishing: bool,
}

impl Inspector<'_> {
    pub(super) fn take_owed(&self) -> Option<Bytes> {
        self.between.delivery().take_owed()
    }

    /// Decides on every whole packet in `buf` and takes them out: what goes
    /// to the broker, and how the connection ends if one of them ends it.
    pub(super) fn inspect_all(&mut self, buf: &mut BytesMut) -> (Bytes, Option<End>) {
        let mut pos = 0;
        let mut raw_from = 0;
        let mut out: Option<BytesMut> = None;
        let mut end = None;
        loop {
            let header = match packet::frame(&buf[pos..], self.shared.limits.max_packet_size) {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(PacketError::TooLarge { size, .. }) => {
                    packet_too_large(self.shared, size, (None, Some(self.client_id)));
                    self.close(PACKET_TOO_LARGE);
                    end = Some(End::Closing);
                    break;
                }
                Err(e) => {
                    self.malformed(&e);
                    end = Some(End::Closing);
                    break;
                }
            };
            let frame_end = pos + header.size();
            let body = &buf[pos + header.header_len..frame_end];
            let replacement = match self.inspect(header, &buf[pos..frame_end], body) {
                // Nothing comes after a DISCONNECT.
                Verdict::Forward if header.kind() == packet::DISCONNECT => {
                    pos = frame_end;
                    end = Some(End::ClientDisconnected);
                    break;
                }
                Verdict::Forward => {
                    pos = frame_end;
                    continue;
                }
                Verdict::Replace(bytes) => Some(bytes),
                Verdict::Drop => None,
                Verdict::Close => {
                    end = Some(End::Closing);
                    break;
                }
            };
            let o = out.get_or_insert_with(BytesMut::new);
            if o.capacity() == 0 && replacement.is_some() {
                // Room for the rest of the batch at once (a 3.1.1
                // publication grows by a byte or two), not a reallocation
                // and a copy each time the buffer doubles.
                o.reserve(buf.len() + buf.len() / 16 + 64);
            }
            o.extend_from_slice(&buf[raw_from..pos]);
            if let Some(bytes) = replacement {
                o.extend_from_slice(&bytes);
            }
            pos = frame_end;
            raw_from = frame_end;
        }
        let chunk = match out {
            // The common case: every packet unchanged, no copy.
            None => buf.split_to(pos).freeze(),
            Some(mut o) => {
                o.extend_from_slice(&buf[raw_from..pos]);
                buf.advance(pos);
                o.freeze()
            }
        };
        (chunk, end)
    }

    /// `raw` is the whole packet, `body` what follows its fixed header.
    pub(super) fn inspect(&mut self, header: Header, raw: &[u8], body: &[u8]) -> Verdict {
        if let Err(violation) = validate::fixed_header(self.version, header.first, header.remaining)
        {
            return self.violation(violation, header.first);
        }
        match header.kind() {
            packet::PUBLISH => {
                self.order.publishing = true;
                self.publish(header.first, body)
            }
            packet::SUBSCRIBE => {
                // From before its checks: they take longer than a PUBLISH's.
                if self.order.subscribing.is_none() {
                    self.order.subscribing = Some(self.shared.order.begin());
                }
                self.subscribe(raw)
            }
            packet::UNSUBSCRIBE => self.unsubscribe(raw),
            packet::PUBREL if !self.denied_qos2.is_empty() => match packet::pubrel(body) {
                Ok(pkid) if self.denied_qos2.remove(&pkid).is_some() => {
                    self.pending.push(ToClient::Packet(packet::pubcomp(pkid)));
                    Verdict::Drop
                }
                _ => Verdict::Forward,
            },
            // Acknowledgements of the broker's publications go through
            // Delivery, which passes them on in rumqttd's order (a 3.1.1
            // acknowledgement is a valid MQTT 5 one as it is).
            packet::PUBACK | packet::PUBREC | packet::PUBCOMP => {
                let mut delivery = self.between.delivery();
                delivery.client_ack(raw, header.header_len);
                if delivery.releasable() {
                    self.pending.push(ToClient::Release);
                }
                Verdict::Drop
            }
            packet::DISCONNECT => {
                if self.version == Version::V5 {
                    if let Some(secs) = handshake::disconnect_expiry(body) {
                        // A session that was to end with its connection
                        // cannot be kept from its DISCONNECT (§3.14.2.2.2).
                        if self.expiry.0 != 0 {
                            self.expiry = Expiry(secs);
                        }
                    }
                }
                let (shared, client_id) = (self.shared, self.client_id);
                self.after_close = Some(shared.sessions.close_kept(
                    client_id,
                    self.generation,
                    self.expiry,
                    |expiry, owner| {
                        let ended = Some(now_ms());
                        let _ticket = shared.records.record(client_id, expiry.0, ended, owner);
                    },
                ));
                Verdict::Forward
            }
            _ => Verdict::Forward,
        }
    }

    /// A packet no client may send: rumqttd must never see it (several
    /// make it panic), so the connection closes.
    pub(super) fn violation(&mut self, violation: Violation, first: u8) -> Verdict {
        debug!(
            packet_type = first >> 4,
            flags = first & 0x0F,
            ?violation,
            "Closed an MQTT connection that sent a packet a client must not send."
        );
        self.close(violation.reason())
    }

    /// What goes to the broker for an MQTT 3.1.1 client's packet that MQTT
    /// 5 lays out differently; an MQTT 5 client's goes as it came.
    pub(super) fn upstream(
        &mut self,
        translate: impl FnOnce() -> Result<Bytes, PacketError>,
    ) -> Verdict {
        match self.version {
            Version::V5 => Verdict::Forward,
            Version::V4 => match translate() {
                Ok(bytes) => Verdict::Replace(bytes),
                Err(e) => self.malformed(&e),
            },
        }
    }

    /// Closes the connection, with an MQTT 5 DISCONNECT first.
    pub(super) fn close(&mut self, reason: u8) -> Verdict {
        let last = match self.version {
            Version::V4 => None,
            Version::V5 => Some(packet::disconnect(reason)),
        };
        self.pending.push(ToClient::Close(last));
        Verdict::Close
    }

    pub(super) fn malformed(&mut self, error: &PacketError) -> Verdict {
        debug!(%error, "Closed an MQTT connection that sent a malformed packet.");
        self.close(MALFORMED_PACKET)
    }

    pub(super) fn publish(&mut self, first: u8, body: &[u8]) -> Verdict {
        let p = match packet::publish(first, body, self.version) {
            Ok(p) => p,
            Err(e) => return self.malformed(&e),
        };
        if !validate::topic_name(p.topic) || (p.topic.is_empty() && p.alias.is_none()) {
            debug!(
                topic = p.topic,
                "Closed an MQTT connection that published to an invalid topic name."
            );
            return self.close(Violation::TopicName.reason());
        }
        if let Some(alias) = p
            .alias
            .filter(|&a| a == 0 || a > handshake::CLIENT_ALIAS_MAX)
        {
            debug!(
                alias,
                "Closed an MQTT connection that used a Topic Alias beyond the maximum."
            );
            return self.close(TOPIC_ALIAS_INVALID);
        }
        let topic = match p.alias {
            None => p.topic,
            Some(alias) if p.topic.is_empty() => match self.aliases.get(&alias) {
                Some(topic) => {
                    let topic = topic.clone();
                    return self.checked(first, &p, &topic);
                }
                None => {
                    debug!(
                        alias,
                        "Closed an MQTT connection that used an unknown Topic Alias."
                    );
                    return self.close(PROTOCOL_ERROR);
                }
            },
            Some(alias) => {
                if self.aliases.get(&alias).map(String::as_str) != Some(p.topic) {
                    self.aliases.insert(alias, p.topic.to_owned());
                }
                p.topic
            }
        };
        self.checked(first, &p, topic)
    }

    /// A publication to `topic` (resolved from its alias), as the
    /// principal's rights and the policy allow.
    pub(super) fn checked(&mut self, first: u8, p: &packet::Publish<'_>, topic: &str) -> Verdict {
        let reason = if !self.session.may_publish(topic) {
            info!(
                client_id = self.client_id,
                principal = self.session.name(),
                topic,
                qos = p.qos,
                "Denied a publication."
            );
            self.shared.policy.observe(GuardEvent::PublishDenied);
            NOT_AUTHORIZED
        } else if let Err(why) = self.shared.policy.payload_fits(topic, p.payload) {
            info!(
                client_id = self.client_id,
                principal = self.session.name(),
                topic,
                qos = p.qos,
                reason = %why,
                "Refused a publication whose payload does not fit its topic."
            );
            self.shared.policy.observe(GuardEvent::PayloadRefused);
            PAYLOAD_FORMAT_INVALID
        } else if let Err(over) = self.keep_retained(first, p, topic) {
            return self.over_bound(p, &over);
        } else {
            return self.accepted(first, p, topic);
        };
        self.refused(p, reason, None)
    }

    /// The answer to a publication the broker does not get: nothing at QoS
    /// 0, else a PUBACK or PUBREC with `reason` (and `why` as its Reason
    /// String, MQTT 5).
    pub(super) fn refused(
        &mut self,
        p: &packet::Publish<'_>,
        reason: u8,
        why: Option<String>,
    ) -> Verdict {
        match (p.qos, self.version, why) {
            (0, _, _) => Verdict::Drop,
            (qos, Version::V5, Some(why)) => {
                if qos == 2 {
                    self.denied_qos2.insert(p.pkid, ());
                }
                let ack = packet::refused_saying(qos, p.pkid, reason, &why);
                self.pending.push(ToClient::Packet(ack));
                Verdict::Drop
            }
            // MQTT 3.1.1 has no negative PUBACK; §3.3.5 allows a positive
            // one for a message the server will not deliver.
            (1, version, _) => {
                self.pending
                    .push(ToClient::Packet(packet::puback(version, p.pkid, reason)));
                Verdict::Drop
            }
            (_, Version::V5, None) => {
                self.denied_qos2.insert(p.pkid, ());
                self.pending
                    .push(ToClient::Packet(packet::pubrec(p.pkid, reason)));
                Verdict::Drop
            }
            // A positive PUBREC would promise exactly-once delivery.
            (_, Version::V4, _) => self.close(UNSPECIFIED_ERROR),
        }
    }

    /// A publication the broker gets: with the guard's marker, the topic
    /// its alias stood for; counted against the Receive Maximum.
    pub(super) fn accepted(&mut self, first: u8, p: &packet::Publish<'_>, topic: &str) -> Verdict {
        if p.qos > 0 && self.version == Version::V5 {
            let unacked = self.between.unacked.fetch_add(1, Ordering::Relaxed) + 1;
            if unacked > u32::from(self.shared.limits.receive_maximum) {
                debug!(
                    limit = self.shared.limits.receive_maximum,
                    "Closed an MQTT connection that exceeded the Receive Maximum."
                );
                return self.close(RECEIVE_MAXIMUM_EXCEEDED);
            }
        }
        if p.qos > 0 {
            self.awaits_ack(p.pkid);
        }
        let principal = self
            .session
            .names_publisher(topic)
            .then(|| self.session.name());
        match publication::to_broker(self.version, first, p, topic, now_ms(), principal) {
            Ok(None) => Verdict::Forward,
            Ok(Some(bytes)) => Verdict::Replace(bytes),
            Err(e) => self.malformed(&e),
        }
    }

    /// What the broker's acknowledgement of `pkid` will cover: the store's
    /// changes from now on ([`super::stored`]). Taken before the packet is
    /// handed over, so every change it causes is after the mark.
    fn awaits_ack(&self, pkid: u16) {
        if self.shared.store.is_durable() {
            let mark = self.shared.store.mark();
            self.between.marks().record(pkid, mark);
        }
    }

    /// `raw` is the whole packet. Reserved options are malformed
    /// (rumqttd's decoder, patch 17).
    pub(super) fn subscribe(&mut self, raw: &[u8]) -> Verdict {
        let s = match packet::subscribe(raw, self.version) {
            Ok(s) => s,
            Err(e) => return self.malformed(&e),
        };
        let (denied, quota, invalid, refused) = match self.version {
            Version::V4 => (V4_FAILURE, V4_FAILURE, V4_FAILURE, V4_FAILURE),
            Version::V5 => (
                NOT_AUTHORIZED,
                QUOTA_EXCEEDED,
                TOPIC_FILTER_INVALID,
                UNSPECIFIED_ERROR,
            ),
        };
        let max = self.shared.limits.max_subscriptions;
        let mut plan = Vec::with_capacity(s.filters.len());
        let mut allowed = Vec::with_capacity(s.filters.len());
        let subscriptions = self.subscriptions.clone();
        let mut held = subscriptions.lock();
        for f in &s.filters {
            let filter = f.path.as_str();
            if !validate::topic_filter(filter) || validate::reserved_filter(filter) {
                info!(
                    client_id = self.client_id,
                    principal = self.session.name(),
                    filter,
                    "Refused an invalid or reserved topic filter."
                );
                plan.push(Some(invalid));
            } else if self
                .shared
                .limits
                .refused_filters
                .iter()
                .any(|r| r == filter)
            {
                info!(
                    client_id = self.client_id,
                    principal = self.session.name(),
                    filter,
                    "Refused a subscription to a filter of mqtt.refused_filters."
                );
                plan.push(Some(refused));
            } else if !self.session.may_subscribe(packet::shared_filter(filter)) {
                info!(
                    client_id = self.client_id,
                    principal = self.session.name(),
                    filter,
                    "Denied a subscription."
                );
                self.shared.policy.observe(GuardEvent::SubscribeDenied);
                plan.push(Some(denied));
            } else if !held.contains(filter) && held.len() >= max {
                info!(
                    client_id = self.client_id,
                    principal = self.session.name(),
                    filter,
                    limit = max,
                    "Refused a subscription past mqtt.max_subscriptions."
                );
                self.shared
                    .policy
                    .observe(GuardEvent::Limit(GuardLimit::Subscriptions));
                plan.push(Some(quota));
            } else {
                if !held.contains(filter) {
                    held.insert(filter.to_owned());
                }
                if let Some(p) = &self.shared.prerequisite {
                    self.prepare_first |= p.needed_for(packet::shared_filter(filter));
                }
                plan.push(None);
                allowed.push(f.clone());
            }
        }
        drop(held);
        if !allowed.is_empty() {
            self.awaits_ack(s.pkid);
        }
        if allowed.len() == s.filters.len() {
            // As it came (MQTT 5), or re-encoded as MQTT 5 (3.1.1).
            return self.upstream(|| packet::encode_subscribe(s.pkid, None, allowed));
        }
        if allowed.is_empty() {
            let codes: Vec<u8> = plan.iter().map(|c| c.unwrap_or(denied)).collect();
            self.pending.push(ToClient::Packet(packet::encode_suback(
                self.version,
                s.pkid,
                None,
                &codes,
            )));
            return Verdict::Drop;
        }
        match packet::encode_subscribe(s.pkid, s.properties, allowed) {
            Ok(rewritten) => {
                self.pending.push(ToClient::SubAck { pkid: s.pkid, plan });
                Verdict::Replace(rewritten)
            }
            Err(e) => self.malformed(&e),
        }
    }

    /// Forwards what the session holds and answers for the rest: rumqttd
    /// acknowledges only the filters it removed, one UNSUBACK each.
    pub(super) fn unsubscribe(&mut self, raw: &[u8]) -> Verdict {
        let u = match packet::unsubscribe(raw, self.version) {
            Ok(u) => u,
            Err(e) => return self.malformed(&e),
        };
        if let Some(filter) = u.filters.iter().find(|f| !validate::topic_filter(f)) {
            debug!(
                filter,
                "Closed an MQTT connection that unsubscribed an invalid topic filter."
            );
            return self.close(PROTOCOL_ERROR);
        }
        let mut codes = Vec::with_capacity(u.filters.len());
        let mut forwarded = Vec::with_capacity(u.filters.len());
        {
            let mut held = self.subscriptions.lock();
            for filter in &u.filters {
                let filter = filter.as_str();
                if held.remove(filter) {
                    forwarded.push(filter);
                    codes.push(0);
                } else if forwarded.contains(&filter) {
                    // Named twice: removed once, successfully both times.
                    codes.push(0);
                } else {
                    codes.push(NO_SUBSCRIPTION_EXISTED);
                }
            }
        }
        if forwarded.is_empty() {
            self.pending.push(ToClient::Packet(packet::encode_unsuback(
                self.version,
                u.pkid,
                &codes,
            )));
            return Verdict::Drop;
        }
        // rumqttd forgets, when a session resumes, which connection its
        // subscriptions belong to, and then ignores their UNSUBSCRIBE (and
        // goes on delivering). Subscribing again first ties them to this
        // connection; for a filter already tied it changes nothing (no new
        // delivery cursor, and Retain Handling 2: no retained messages).
        let again = forwarded.iter().map(|f| wire::Filter {
            path: f.to_string(),
            qos: wire::QoS::AtMostOnce,
            nolocal: false,
            preserve_retain: false,
            retain_forward_rule: wire::RetainForwardRule::Never,
        });
        let again: Vec<wire::Filter> = again.collect();
        let forwarded_count = forwarded.len();
        let forwarded = forwarded.into_iter().map(str::to_owned).collect();
        let encoded = packet::encode_subscribe(u.pkid, None, again).and_then(|sub| {
            let unsub = packet::encode_unsubscribe(u.pkid, u.properties, forwarded)?;
            Ok([sub, unsub])
        });
        let mut upstream = BytesMut::new();
        match encoded {
            Ok(packets) => packets.iter().for_each(|p| upstream.extend_from_slice(p)),
            Err(e) => return self.malformed(&e),
        }
        self.pending.push(ToClient::SwallowSubAck(u.pkid));
        self.pending.push(ToClient::UnsubAck {
            pkid: u.pkid,
            forwarded: forwarded_count,
            codes,
        });
        Verdict::Replace(upstream.freeze())
    }
}
