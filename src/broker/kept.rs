//! What the embedded broker keeps across restarts (rumqttd patches 12 and
//! 13): retained messages, the sessions that outlive their connection
//! (their subscriptions, expiry and the QoS 1/2 publications queued for
//! them), in the store's tables:
//!
//! | table | key | value |
//! |---|---|---|
//! | `mqtt_retained` | topic | retained at (Unix ms, u64 BE) + MQTT 5 PUBLISH |
//! | `mqtt_subscriptions` | client ID, 0, filter | QoS |
//! | `mqtt_queued` | client ID, 0, run (u32 BE), filter index, segment, offset (u64 BE each) | filter length (u16 BE), filter, MQTT 5 PUBLISH |
//! | `mqtt_sessions` | client ID | expiry (s, u32 BE), ended at (Unix ms, u64 BE; 0 while connected) |
//! | `mqtt_meta` | `run` | this run's number (u32 BE) |
//!
//! A publication's key names where it sat in its run's logs, so it takes
//! no lookup to forget it once delivered; only those restored from an
//! earlier run are looked up (`placed`). Client IDs and filters never hold
//! a NUL (MQTT forbids U+0000), hence the separator.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rumqttd::{
    Keeper, Persistence, Position, RestoredPublication, RestoredRetained, RestoredSession,
};
use tracing::warn;

use crate::broker::guard::packet::{self, Version};
use crate::broker::Publication;
use crate::store::{Store, StoreError, Table, Ticket};
use crate::topics::{Route, Topics};

const RETAINED: &str = "mqtt_retained";
const SUBSCRIPTIONS: &str = "mqtt_subscriptions";
const QUEUED: &str = "mqtt_queued";
const SESSIONS: &str = "mqtt_sessions";
const META: &str = "mqtt_meta";

struct Tables {
    retained: Table,
    subscriptions: Table,
    queued: Table,
    sessions: Table,
}

impl Tables {
    fn of(store: &Store) -> Tables {
        Tables {
            retained: store.table(RETAINED),
            subscriptions: store.table(SUBSCRIPTIONS),
            queued: store.table(QUEUED),
            sessions: store.table(SESSIONS),
        }
    }
}

/// rumqttd's keeper: every change goes to the store, queued and never
/// blocking the router's thread. Durability is awaited where something is
/// acknowledged: the guard holds a publisher's PUBACK (PUBREC, PUBCOMP) and
/// a SUBACK until the store's barrier.
struct Kept {
    tables: Tables,
    run: u32,
    /// Publications restored from an earlier run: their key, and how many
    /// sessions have yet to get them.
    placed: HashMap<Position, (Bytes, u32)>,
}

fn client_prefix(client_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(client_id.len() + 1);
    key.extend_from_slice(client_id.as_bytes());
    key.push(0);
    key
}

fn position_key(run: u32, (filter_idx, (segment, offset)): Position) -> [u8; 28] {
    let mut key = [0; 28];
    key[..4].copy_from_slice(&run.to_be_bytes());
    key[4..12].copy_from_slice(&(filter_idx as u64).to_be_bytes());
    key[12..20].copy_from_slice(&segment.to_be_bytes());
    key[20..].copy_from_slice(&offset.to_be_bytes());
    key
}

impl Keeper for Kept {
    fn retained(&mut self, topic: &str, packet: Option<Bytes>) {
        let _ticket = match packet {
            Some(packet) => {
                let mut value = Vec::with_capacity(8 + packet.len());
                value.extend_from_slice(&now_ms().to_be_bytes());
                value.extend_from_slice(&packet);
                self.tables.retained.put(topic.as_bytes().to_vec(), value)
            }
            None => self.tables.retained.delete(topic.as_bytes().to_vec()),
        };
    }

    fn subscribed(&mut self, client_id: &str, filter: &str, qos: u8) {
        let mut key = client_prefix(client_id);
        key.extend_from_slice(filter.as_bytes());
        let _ticket = self.tables.subscriptions.put(key, vec![qos]);
    }

    fn unsubscribed(&mut self, client_id: &str, filter: &str) {
        let mut key = client_prefix(client_id);
        key.extend_from_slice(filter.as_bytes());
        let _ticket = self.tables.subscriptions.delete(key);
    }

    fn ended(&mut self, client_id: &str) {
        forget(&self.tables, client_id);
    }

    fn queued(&mut self, client_id: &str, position: Position, filter: &str, packet: &Bytes) {
        let mut key = client_prefix(client_id);
        key.extend_from_slice(&position_key(self.run, position));
        let mut value = Vec::with_capacity(2 + filter.len() + packet.len());
        value.extend_from_slice(&(filter.len() as u16).to_be_bytes());
        value.extend_from_slice(filter.as_bytes());
        value.extend_from_slice(packet);
        let _ticket = self.tables.queued.put(key, value);
    }

    fn delivered(&mut self, client_id: &str, position: Position) {
        let mut key = client_prefix(client_id);
        match self.placed.get_mut(&position) {
            Some((restored, left)) => {
                key.extend_from_slice(restored);
                *left = left.saturating_sub(1);
                if *left == 0 {
                    self.placed.remove(&position);
                }
            }
            None => key.extend_from_slice(&position_key(self.run, position)),
        }
        let _ticket = self.tables.queued.delete(key);
    }

    fn placed(&mut self, position: Position, key: &Bytes, sessions: u32) {
        self.placed.insert(position, (key.clone(), sessions));
    }
}

/// A kept session, for the guard (which keeps its expiry).
#[derive(Debug, Clone)]
pub struct KeptSession {
    pub client_id: String,
    pub filters: HashSet<String>,
    /// `None`: kept until the client ends it.
    pub expires_in: Option<Duration>,
}

/// What the last run left.
pub struct Recovered {
    /// rumqttd's start, and its keeper for this run.
    pub persistence: Persistence,
    pub retained: usize,
    pub sessions: Vec<KeptSession>,
    pub queued: usize,
    /// Agents whose retained presence says online: every connection ended
    /// with the last run, so they are not, until they come back.
    pub stale_presence: Vec<Publication>,
    /// This run's number, on disk: no key of this run can be one of an
    /// earlier run's.
    pub run_saved: Ticket,
}

/// What the last run kept, and the keeper for this one; `None` when
/// nothing is kept.
pub fn recover(store: &Store, topics: &Topics) -> Result<Option<Recovered>, StoreError> {
    if !store.is_durable() {
        return Ok(None);
    }
    let tables = Tables::of(store);
    let meta = store.table(META);
    let run = meta
        .load()?
        .into_iter()
        .find(|(k, _)| k == b"run")
        .and_then(|(_, v)| Some(u32::from_be_bytes(v.get(..4)?.try_into().ok()?)))
        .map_or(1, |r| r.wrapping_add(1));
    let run_saved = meta.put(b"run".to_vec(), run.to_be_bytes().to_vec());
    let (retained, stale_presence) = load_retained(&tables.retained, topics)?;
    let (sessions, publications, kept) = load_sessions(&tables)?;
    let queued = sessions.iter().map(|s| s.queued.len()).sum();
    Ok(Some(Recovered {
        retained: retained.len(),
        persistence: Persistence {
            retained,
            sessions,
            publications,
            keeper: Box::new(Kept {
                tables,
                run,
                placed: HashMap::new(),
            }),
        },
        sessions: kept,
        queued,
        stale_presence,
        run_saved,
    }))
}

type Retained = (Vec<RestoredRetained>, Vec<Publication>);

fn load_retained(table: &Table, topics: &Topics) -> Result<Retained, StoreError> {
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
    Ok((restored, stale))
}

/// The sessions to restore (those that expired while the sidecar was
/// stopped are forgotten here).
type Sessions = (
    Vec<RestoredSession>,
    Vec<RestoredPublication>,
    Vec<KeptSession>,
);

fn load_sessions(tables: &Tables) -> Result<Sessions, StoreError> {
    let now = now_ms();
    // Client ID → expiry in, from the guard's records; a session without
    // one was kept by a 3.1.1 client (not clean): forever.
    let mut expiry: HashMap<String, Option<Duration>> = HashMap::new();
    let mut expired: HashSet<String> = HashSet::new();
    for (key, value) in tables.sessions.load()? {
        let client = String::from_utf8_lossy(&key).into_owned();
        let (Some(secs), Some(ended)) = (
            value
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes),
            value
                .get(4..12)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes),
        ) else {
            continue;
        };
        // Connected when the last run stopped: its expiry counts from now.
        let ended = if ended == 0 { now } else { ended };
        let left = match secs {
            u32::MAX => None,
            secs => {
                let until = ended.saturating_add(u64::from(secs) * 1_000);
                if until <= now {
                    forget(tables, &client);
                    expired.insert(client);
                    continue;
                }
                Some(Duration::from_millis(until - now))
            }
        };
        expiry.insert(client, left);
    }
    let mut by_client: BTreeMap<String, RestoredSession> = BTreeMap::new();
    for (key, value) in tables.subscriptions.load()? {
        let Some((client, filter)) = split(&key) else {
            continue;
        };
        let Some(&qos) = value.first() else { continue };
        if expired.contains(client) {
            continue;
        }
        entry(&mut by_client, client)
            .subscriptions
            .push((String::from_utf8_lossy(filter).into_owned(), qos));
    }
    // Each publication once, however many sessions it is queued for (the
    // key after the client ID names it): start-up holds no more than the
    // broker did before the restart.
    let mut publications: BTreeMap<Bytes, RestoredPublication> = BTreeMap::new();
    tables.queued.scan(|key, value| {
        let Some((client, position)) = split(key) else {
            return;
        };
        if expired.contains(client) {
            return;
        }
        let known = publications.get_key_value(position).map(|(k, _)| k.clone());
        let key = match known {
            Some(key) => key,
            None => {
                let Some(len) = value
                    .get(..2)
                    .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
                else {
                    return;
                };
                let (Some(filter), Some(packet)) = (value.get(2..2 + len), value.get(2 + len..))
                else {
                    return;
                };
                let key = Bytes::copy_from_slice(position);
                publications.insert(
                    key.clone(),
                    RestoredPublication {
                        key: key.clone(),
                        filter: String::from_utf8_lossy(filter).into_owned(),
                        packet: Bytes::copy_from_slice(packet),
                    },
                );
                key
            }
        };
        entry(&mut by_client, client).queued.push(key);
    })?;
    for client in expiry.keys() {
        entry(&mut by_client, client);
    }
    let kept = by_client
        .values()
        .map(|s| KeptSession {
            client_id: s.client_id.clone(),
            filters: s.subscriptions.iter().map(|(f, _)| f.clone()).collect(),
            expires_in: expiry.get(&s.client_id).copied().flatten(),
        })
        .collect();
    Ok((
        by_client.into_values().collect(),
        publications.into_values().collect(),
        kept,
    ))
}

fn entry<'a>(
    map: &'a mut BTreeMap<String, RestoredSession>,
    client: &str,
) -> &'a mut RestoredSession {
    map.entry(client.to_owned())
        .or_insert_with(|| RestoredSession {
            client_id: client.to_owned(),
            subscriptions: Vec::new(),
            queued: Vec::new(),
        })
}

fn split(key: &[u8]) -> Option<(&str, &[u8])> {
    let at = key.iter().position(|&b| b == 0)?;
    let client = std::str::from_utf8(&key[..at]).ok()?;
    Some((client, &key[at + 1..]))
}

/// Everything of a session: its subscriptions, its queue, its expiry.
fn forget(tables: &Tables, client: &str) {
    let prefix = client_prefix(client);
    let _ = tables.subscriptions.delete_prefix(prefix.clone());
    let _ = tables.queued.delete_prefix(prefix);
    let _ = tables.sessions.delete(client.as_bytes().to_vec());
}

/// The guard's records of kept sessions' expiry.
#[derive(Clone)]
pub struct SessionRecords {
    table: Table,
}

impl SessionRecords {
    pub fn new(store: &Store) -> SessionRecords {
        SessionRecords {
            table: store.table(SESSIONS),
        }
    }

    /// A kept session's connection opened (`ended`: `None`) or ended; its
    /// expiry in seconds (`u32::MAX`: never).
    pub fn record(&self, client_id: &str, expiry: u32, ended: Option<u64>) -> Ticket {
        let mut value = Vec::with_capacity(12);
        value.extend_from_slice(&expiry.to_be_bytes());
        value.extend_from_slice(&ended.unwrap_or(0).to_be_bytes());
        self.table.put(client_id.as_bytes().to_vec(), value)
    }
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

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
