//! lmos-sidecar patches 12 and 13: what the router holds survives a
//! restart. The router tells a [`Keeper`] outside it of every retained
//! message set or removed, and of the sessions that outlive their
//! connection (not clean): their subscriptions, each QoS 1 or 2
//! publication queued for them and its delivery; and a broker can start
//! with what an earlier run kept. Publications go as MQTT 5 PUBLISH
//! packets, properties included, once however many kept sessions they are
//! queued for; what the router drops from its memory (a filter's oldest
//! segment, a filter's whole log) the keeper is told to drop too, so that
//! what is kept never outgrows what the router holds (patch 19).

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::protocol::v5::publish;
use crate::protocol::{Publish, PublishProperties, QoS};
pub use crate::router::options::SubscriptionOptions;
use crate::router::FilterIdx;
use crate::Offset;

/// Where a publication sits in this run: its filter's log and its offset.
pub type Position = (FilterIdx, Offset);

/// Told of what must survive a restart as the router changes it; called on
/// the router's thread, so it must not block.
pub trait Keeper: Send + 'static {
    /// `packet`: the retained message, or `None` once it is removed (also
    /// when it expired).
    fn retained(&mut self, topic: &str, packet: Option<Bytes>);
    /// A session that is kept subscribed to `filter` (again: its options
    /// may have changed).
    fn subscribed(&mut self, client_id: &str, filter: &str, options: &SubscriptionOptions);
    fn unsubscribed(&mut self, client_id: &str, filter: &str);
    /// A kept session ended (a clean CONNECT of its client ID): everything
    /// of it goes.
    fn ended(&mut self, client_id: &str);
    /// A QoS 1 or 2 publication at `position`, queued for each of the kept
    /// sessions `clients`.
    fn queued(
        &mut self,
        position: Position,
        filter: &str,
        packet: &Bytes,
        clients: &mut dyn Iterator<Item = &str>,
    );
    /// The router dropped segment `segment` of filter `idx`'s log (it was
    /// full): what it held is gone for the kept sessions `clients` too.
    fn dropped(&mut self, idx: FilterIdx, segment: u64, clients: &mut dyn Iterator<Item = &str>);
    /// No session holds filter `idx` any more: its log is gone.
    fn released(&mut self, idx: FilterIdx);
    /// A connection of `client_id` with a last will registered (the will as
    /// a PUBLISH packet, and its delay in seconds), or its will is gone
    /// (`None`: published, or its client sent DISCONNECT) (patch 20).
    fn will(&mut self, client_id: &str, will: Option<(&Bytes, u32)>);
    /// A kept session's QoS 2 publication `pkid`, acknowledged with PUBREC
    /// (`Some`: as a PUBLISH packet) and not yet appended, or completed by
    /// its PUBREL (`None`) (patch 21).
    fn received(&mut self, client_id: &str, pkid: u16, packet: Option<&Bytes>);
    /// The broker owes a kept session's client the PUBREL for `pkid`: its
    /// client acknowledged a QoS 2 delivery with PUBREC (`true`), or the
    /// PUBCOMP came and nothing is owed (`false`) (patch 27).
    fn releasing(&mut self, client_id: &str, pkid: u16, owed: bool);
    /// A kept session was sent the QoS 2 publication at `position` under
    /// `pkid` (patch 30); forgotten when it is [`Keeper::delivered`].
    fn sent(&mut self, client_id: &str, position: Position, pkid: u16);
    /// The session acknowledged the publication at `position` (PUBACK,
    /// PUBREC).
    fn delivered(&mut self, client_id: &str, position: Position);
    /// At start-up: the restored publication `key` (as given in
    /// [`RestoredPublication`]) is now at `position`, queued for `sessions`
    /// sessions.
    fn placed(&mut self, position: Position, key: &Bytes, sessions: u32);
}

/// A retained message kept from an earlier run.
#[derive(Debug, Clone)]
pub struct RestoredRetained {
    /// As the keeper was given it.
    pub packet: Bytes,
    /// How long ago it was retained (its expiry counts from then).
    pub age: Duration,
}

/// A publication queued for kept sessions in an earlier run, once however
/// many sessions it is queued for.
#[derive(Debug, Clone)]
pub struct RestoredPublication {
    /// The keeper's name for it, in the order the publications were queued.
    pub key: Bytes,
    pub filter: String,
    pub packet: Bytes,
}

/// A session kept from an earlier run.
#[derive(Debug, Clone)]
pub struct RestoredSession {
    pub client_id: String,
    /// Filters and their options.
    pub subscriptions: Vec<(String, SubscriptionOptions)>,
    /// The keys of the publications still queued for it.
    pub queued: Vec<Bytes>,
    /// QoS 2 publications its client sent and got PUBREC for, awaiting
    /// their PUBREL (patch 21), as the keeper was given them.
    pub received: Vec<Bytes>,
    /// The packet identifiers of the QoS 2 deliveries whose PUBREL it is
    /// owed, in the order their PUBRECs came (patch 27); they are sent
    /// again when the session resumes.
    pub releasing: Vec<u16>,
    /// QoS 2 publications it was sent and had not acknowledged: their key
    /// (as in `queued`) and packet identifier (patch 30); sent again under
    /// it, flagged DUP.
    pub sent: Vec<(Bytes, u16)>,
}

/// The last will of a connection of an earlier run that had not ended
/// (patch 20): the router holds it until [`WillTrigger::fire`] or a
/// connection of its client ID (which publishes it when it starts clean,
/// and drops it when it resumes the session).
#[derive(Debug, Clone)]
pub struct RestoredWill {
    pub client_id: String,
    /// As the keeper was given it.
    pub packet: Bytes,
}

/// What to start with, and the keeper of what follows.
pub struct Persistence {
    pub retained: Vec<RestoredRetained>,
    pub sessions: Vec<RestoredSession>,
    /// Ordered by key.
    pub publications: Vec<RestoredPublication>,
    pub wills: Vec<RestoredWill>,
    pub keeper: Box<dyn Keeper>,
}

/// Publishes restored wills when their time comes (patch 20).
#[derive(Clone)]
pub struct WillTrigger(pub(crate) flume::Sender<(crate::ConnectionId, crate::router::Event)>);

impl WillTrigger {
    /// Publishes the restored will of `client_id`, unless a connection of
    /// the client ID came since.
    pub fn fire(&self, client_id: String) {
        let _ = self
            .0
            .try_send((0, crate::router::Event::PublishRestoredWill(client_id)));
    }
}

/// A will as the PUBLISH it becomes.
pub(crate) fn will_publication(
    will: crate::protocol::LastWill,
    props: Option<crate::protocol::LastWillProperties>,
) -> (Publish, Option<PublishProperties>) {
    let publish = Publish {
        dup: false,
        qos: will.qos,
        retain: will.retain,
        topic: will.topic,
        pkid: 0,
        payload: will.message,
    };
    let properties = props.map(|props| PublishProperties {
        payload_format_indicator: props.payload_format_indicator,
        message_expiry_interval: props.message_expiry_interval,
        response_topic: props.response_topic,
        correlation_data: props.correlation_data,
        user_properties: props.user_properties,
        content_type: props.content_type,
        ..Default::default()
    });
    (publish, properties)
}

/// `publish` as an MQTT 5 PUBLISH packet, with the retain flag `retain`.
pub(crate) fn encode(
    publish: &Publish,
    properties: &Option<PublishProperties>,
    retain: bool,
) -> Option<Bytes> {
    let mut p = publish.clone();
    p.retain = retain;
    p.dup = false;
    if p.qos != QoS::AtMostOnce && p.pkid == 0 {
        p.pkid = 1;
    }
    let mut buf = BytesMut::new();
    publish::write(&p, properties, &mut buf).ok()?;
    Some(buf.freeze())
}

pub(crate) fn read(packet: &Bytes) -> Option<(Publish, Option<PublishProperties>)> {
    let mut bytes = packet.clone();
    let fixed = crate::protocol::v5::check(bytes.iter(), usize::MAX).ok()?;
    publish::read(fixed, bytes.split_to(fixed.frame_length())).ok()
}

/// A kept retained message, read back.
pub(crate) enum Decoded {
    /// The message, its properties, and when it was retained.
    Live(Publish, Option<PublishProperties>, Instant),
    /// It expired while the broker was stopped: the keeper forgets it.
    Expired(String),
    /// Not a PUBLISH packet this broker wrote: skipped.
    Unreadable,
}

pub(crate) fn decode(restored: &RestoredRetained, now: Instant) -> Decoded {
    let Some((publish, properties)) = read(&restored.packet) else {
        return Decoded::Unreadable;
    };
    if let Some(expiry) = properties.as_ref().and_then(|p| p.message_expiry_interval) {
        if restored.age.as_secs() >= u64::from(expiry) {
            return Decoded::Expired(String::from_utf8_lossy(&publish.topic).into_owned());
        }
    }
    // An Instant before the process started may not exist on every clock:
    // then the expiry counts from now, a little late rather than never.
    let since = now.checked_sub(restored.age).unwrap_or(now);
    Decoded::Live(publish, properties, since)
}
