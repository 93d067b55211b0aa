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

use crate::store::{Store, StoreError, Table};

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

/// The retained messages of the last run and the sink for this one; `None`
/// when nothing is kept.
pub fn persistence(store: &Store) -> Result<Option<(RetainedPersistence, usize)>, StoreError> {
    if !store.is_durable() {
        return Ok(None);
    }
    let table = store.table(TABLE);
    let now = now_ms();
    let mut restored = Vec::new();
    for (key, value) in table.load()? {
        if value.len() < 8 {
            warn!(topic = %String::from_utf8_lossy(&key), "Dropped a kept retained message too short to read.");
            let _ = table.delete(key);
            continue;
        }
        let (at, packet) = value.split_at(8);
        let at = u64::from_be_bytes(at.try_into().unwrap_or_default());
        restored.push(RestoredRetained {
            packet: Bytes::copy_from_slice(packet),
            age: Duration::from_millis(now.saturating_sub(at)),
        });
    }
    let count = restored.len();
    let sink = Box::new(Kept { table });
    Ok(Some((RetainedPersistence { restored, sink }, count)))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
