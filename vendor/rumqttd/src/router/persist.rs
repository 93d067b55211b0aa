//! lmos-sidecar patch 12: retained messages survive a restart. The router
//! tells a sink outside it of every retained message set or removed (as an
//! MQTT 5 PUBLISH packet, properties included), and a broker can start with
//! the retained messages kept from an earlier run.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::protocol::v5::publish;
use crate::protocol::{Publish, PublishProperties, QoS};

/// Told of retained messages as the router changes them; called on the
/// router's thread, so it must not block.
pub trait RetainedSink: Send + 'static {
    /// `packet`: the retained message, or `None` once it is removed (also
    /// when it expired).
    fn retained(&mut self, topic: &str, packet: Option<Bytes>);
}

/// A retained message kept from an earlier run.
#[derive(Debug, Clone)]
pub struct RestoredRetained {
    /// As the sink was given it.
    pub packet: Bytes,
    /// How long ago it was retained (its expiry counts from then).
    pub age: Duration,
}

/// The retained messages to start with and the sink for later changes.
pub struct RetainedPersistence {
    pub restored: Vec<RestoredRetained>,
    pub sink: Box<dyn RetainedSink>,
}

pub(crate) fn encode(publish: &Publish, properties: &Option<PublishProperties>) -> Option<Bytes> {
    let mut p = publish.clone();
    p.retain = true;
    p.dup = false;
    if p.qos != QoS::AtMostOnce && p.pkid == 0 {
        p.pkid = 1;
    }
    let mut buf = BytesMut::new();
    publish::write(&p, properties, &mut buf).ok()?;
    Some(buf.freeze())
}

/// A kept retained message, read back.
pub(crate) enum Decoded {
    /// The message, its properties, and when it was retained.
    Live(Publish, Option<PublishProperties>, Instant),
    /// It expired while the broker was stopped: the sink forgets its topic.
    Expired(String),
    /// Not a PUBLISH packet this broker wrote: skipped.
    Unreadable,
}

pub(crate) fn decode(restored: &RestoredRetained, now: Instant) -> Decoded {
    let mut bytes = restored.packet.clone();
    let Ok(fixed) = crate::protocol::v5::check(bytes.iter(), usize::MAX) else {
        return Decoded::Unreadable;
    };
    let Ok((publish, properties)) = publish::read(fixed, bytes.split_to(fixed.frame_length()))
    else {
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
