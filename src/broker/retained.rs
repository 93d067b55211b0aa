//! Retained messages on disk: rumqttd tells [`Kept`] of every retained
//! message set, replaced, removed or expired (vendor patch 12), and the
//! next start begins with them, their MQTT 5 properties included and their
//! Message Expiry Interval counted across the restart.
//!
//! One record per topic: the key is the topic, the value the wall-clock
//! time it was retained (milliseconds since the Unix epoch, big-endian)
//! followed by the MQTT 5 PUBLISH packet rumqttd wrote.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rumqttd::{RestoredRetained, RetainedPersistence, RetainedSink};
use tracing::warn;

use crate::broker::guard::packet::{self, Version};
use crate::broker::Publication;
use crate::store::{Store, StoreError, Table};
use crate::topics::{Route, Topics};

pub const TABLE: &str = "mqtt.retained";

/// What rumqttd's router tells of its retained messages goes to the store
/// (queued, never blocking the router's thread).
struct Kept {
    table: Table,
}

impl RetainedSink for Kept {
    fn retained(&mut self, topic: &str, packet: Option<Bytes>) {
        // Durability is awaited where it is acknowledged (the guard holds
        // the publisher's PUBACK until the store's barrier), not here.
        let _ticket = match packet {
            Some(packet) => {
                let mut value = Vec::with_capacity(8 + packet.len());
                value.extend_from_slice(&now_ms().to_be_bytes());
                value.extend_from_slice(&packet);
                self.table.put(topic.as_bytes().to_vec(), value)
            }
            None => self.table.delete(topic.as_bytes().to_vec()),
        };
    }
}

/// What the last run left: rumqttd's start and the sink for this run.
pub struct Recovered {
    pub persistence: RetainedPersistence,
    pub count: usize,
    /// Agents whose retained presence says online: every connection ended
    /// with the last run, so they are not, until they come back.
    pub stale_presence: Vec<Publication>,
}

/// The retained messages of the last run and the sink for this one; `None`
/// when nothing is kept.
pub fn recover(store: &Store, topics: &Topics) -> Result<Option<Recovered>, StoreError> {
    if !store.is_durable() {
        return Ok(None);
    }
    let table = store.table(TABLE);
    let now = now_ms();
    let mut restored = Vec::new();
    let mut stale = Vec::new();
    for (key, value) in table.load()? {
        if value.len() < 8 {
            warn!(topic = %String::from_utf8_lossy(&key), "Dropped a kept retained message too short to read.");
            let _ = table.delete(key);
            continue;
        }
        let (at, packet) = value.split_at(8);
        let at = u64::from_be_bytes(at.try_into().unwrap_or_default());
        if let Some(offline) = stale_presence(packet, topics) {
            stale.push(offline);
        }
        restored.push(RestoredRetained {
            packet: Bytes::copy_from_slice(packet),
            age: Duration::from_millis(now.saturating_sub(at)),
        });
    }
    let count = restored.len();
    let sink = Box::new(Kept { table });
    Ok(Some(Recovered {
        persistence: RetainedPersistence { restored, sink },
        count,
        stale_presence: stale,
    }))
}

/// An agent's retained "online" presence, as its offline successor (the
/// same message with `status` offline).
fn stale_presence(packet: &[u8], topics: &Topics) -> Option<Publication> {
    let header = packet::frame(packet, usize::MAX).ok()??;
    let body = packet.get(header.header_len..header.size())?;
    let publish = packet::publish(header.first, body, Version::V5).ok()?;
    let Some(Route::AgentStatus { .. }) = topics.parse(publish.topic) else {
        return None;
    };
    let mut status: serde_json::Value = serde_json::from_slice(publish.payload).ok()?;
    if status["status"] != "online" {
        return None;
    }
    status["status"] = "offline".into();
    Some(Publication::new(
        publish.topic.to_owned(),
        status.to_string(),
        true,
    ))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
