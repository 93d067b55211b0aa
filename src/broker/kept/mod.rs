//! What the embedded broker keeps across restarts (rumqttd patches 12 and
//! 13): retained messages, the sessions that outlive their connection
//! (their subscriptions, expiry and the QoS 1/2 publications queued for
//! them), in the store's tables:
//!
//! | table | key | value |
//! |---|---|---|
//! | `mqtt_retained` | topic | retained at (Unix ms, u64 BE), then, for a message a principal published (issue 43), a 0 byte, the principal's name's length (u16 BE) and the name; then the MQTT 5 PUBLISH (whose first byte is never 0) |
//! | `mqtt_subscriptions` | client ID, 0, filter | QoS, then flags (1 No Local, 2 Retain As Published, 4 identifier) and the subscription identifier (u32 BE) |
//! | `mqtt_queued_data` | position: run (u32 BE), filter index, segment, offset (u64 BE each) | filter length (u16 BE), filter, MQTT 5 PUBLISH |
//! | `mqtt_queued` | client ID, 0, position | the publication, as in `mqtt_queued_data`, when it is queued for this session alone; else empty |
//! | `mqtt_sessions` | client ID | expiry (s, u32 BE), ended at (Unix ms, u64 BE; 0 while connected), the principal whose session it is |
//! | `mqtt_received` | client ID, 0, packet identifier (u16 BE) | a QoS 2 publication its client got PUBREC for, awaiting PUBREL: MQTT 5 PUBLISH |
//! | `mqtt_releasing` | client ID, 0, packet identifier (u16 BE) | the order its PUBREC came in: run (u32 BE), count (u32 BE); a QoS 2 delivery whose PUBREL the broker owes its client |
//! | `mqtt_sent` | as in `mqtt_queued` | the packet identifier (u16 BE) a QoS 2 publication was sent to the session under, until it acknowledges it |
//! | `mqtt_wills` | client ID | will delay (s, u32 BE), the will as an MQTT 5 PUBLISH |
//! | `mqtt_meta` | `run` | this run's number (u32 BE) |
//!
//! A publication is written once however many kept sessions wait for it:
//! in the one session's queue entry when only one does, else in
//! `mqtt_queued_data` with each session's entry holding its position only. The position names
//! where it sat in its run's logs, so it takes no lookup to forget it once
//! delivered; only those restored from an earlier run are looked up
//! (`placed`). A publication stays in `mqtt_queued_data` until the router
//! drops its segment or its filter (patch 19), so the disk holds no more
//! than the router's memory; those no session waits for any more are
//! dropped at the next start. Client IDs and filters never hold a NUL (MQTT
//! forbids U+0000), hence the separator.
//!
//! What each kept session's queue costs on disk is counted and bounded
//! ([`budget`]): past a bound, a session's newest publications are not
//! written for it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rumqttd::{Keeper, Persistence, Position, SubscriptionOptions};

use crate::broker::guard::retained::RetainedBook;
use crate::broker::Publication;
use crate::store::{Store, StoreError, Table, Ticket};
use crate::topics::Topics;

mod budget;
mod gaps;
mod limits;
mod load;
mod restoring;

pub use limits::{Limits as QueueLimits, Owners};

const RETAINED: &str = "mqtt_retained";
const SUBSCRIPTIONS: &str = "mqtt_subscriptions";
const QUEUED: &str = "mqtt_queued";
const QUEUED_DATA: &str = "mqtt_queued_data";
const SESSIONS: &str = "mqtt_sessions";
const WILLS: &str = "mqtt_wills";
const RECEIVED: &str = "mqtt_received";
const RELEASING: &str = "mqtt_releasing";
const SENT: &str = "mqtt_sent";
const META: &str = "mqtt_meta";

struct Tables {
    retained: Table,
    subscriptions: Table,
    queued: Table,
    data: Table,
    sessions: Table,
    wills: Table,
    received: Table,
    releasing: Table,
    sent: Table,
}

impl Tables {
    fn of(store: &Store) -> Tables {
        Tables {
            retained: store.table(RETAINED),
            subscriptions: store.table(SUBSCRIPTIONS),
            queued: store.table(QUEUED),
            data: store.table(QUEUED_DATA),
            sessions: store.table(SESSIONS),
            wills: store.table(WILLS),
            received: store.table(RECEIVED),
            releasing: store.table(RELEASING),
            sent: store.table(SENT),
        }
    }
}

/// rumqttd's keeper: every change goes to the store, queued and never
/// blocking the router's thread. Durability is awaited where something is
/// acknowledged: the guard holds a publisher's PUBACK (PUBREC, PUBCOMP) and
/// a SUBACK until the store's barrier.
struct Kept {
    tables: Tables,
    /// Who owns each retained message (the guard's accounts): written
    /// next to it, and told of those the guard did not see.
    owners: Arc<RetainedBook>,
    run: u32,
    /// Publications restored from an earlier run: their key, and how many
    /// sessions have yet to get them.
    placed: BTreeMap<Position, (Bytes, u32)>,
    /// PUBRECs counted in this run, to restore owed PUBRELs in order.
    releases: u32,
    /// The keys in `mqtt_sent`, so that acknowledging a QoS 1 publication
    /// costs no delete of what is not there.
    sent: HashSet<Vec<u8>>,
    /// What the queues cost on disk, and the bounds.
    budget: budget::Budget,
    /// Until the router has placed the restored publications: who waits
    /// for which, to count their entries where they now sit.
    restoring: Option<restoring::Restoring>,
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
                let owner = self.owners.observed(topic, packet.len() as u64);
                let value = retained_value(now_ms(), owner.as_deref(), &packet);
                self.tables.retained.put(topic.as_bytes().to_vec(), value)
            }
            None => {
                self.owners.remove(topic);
                self.tables.retained.delete(topic.as_bytes().to_vec())
            }
        };
    }

    fn subscribed(&mut self, client_id: &str, filter: &str, options: &SubscriptionOptions) {
        let mut key = client_prefix(client_id);
        key.extend_from_slice(filter.as_bytes());
        let _ticket = self.tables.subscriptions.put(key, write_options(options));
    }

    fn unsubscribed(&mut self, client_id: &str, filter: &str) {
        let mut key = client_prefix(client_id);
        key.extend_from_slice(filter.as_bytes());
        let _ticket = self.tables.subscriptions.delete(key);
    }

    fn ended(&mut self, client_id: &str) {
        self.settle();
        self.budget.ended(client_id);
        forget(&self.tables, client_id);
    }

    fn queued(
        &mut self,
        position: Position,
        filter: &str,
        packet: &Bytes,
        clients: &mut dyn Iterator<Item = &str>,
    ) {
        self.settle();
        let value_len = 2 + filter.len() + packet.len();
        // Each session's entry as it costs on disk: past a bound, not
        // written for that session (drop newest).
        let budget = &mut self.budget;
        let mut clients = clients.filter(|client_id| {
            let cost = client_id.len() as u64 + budget::KEY_OVERHEAD + value_len as u64;
            budget.admit(client_id, position, cost)
        });
        let Some(first) = clients.next() else {
            return;
        };
        let at = position_key(self.run, position);
        let mut value = Vec::with_capacity(value_len);
        value.extend_from_slice(&(filter.len() as u16).to_be_bytes());
        value.extend_from_slice(filter.as_bytes());
        value.extend_from_slice(packet);
        let mut clients = clients.peekable();
        // One session waiting (the common case): one write, the publication
        // in its queue entry.
        if clients.peek().is_none() {
            let mut key = client_prefix(first);
            key.extend_from_slice(&at);
            let _ticket = self.tables.queued.put(key, value);
            return;
        }
        let _ticket = self.tables.data.put(at.to_vec(), value);
        for client_id in std::iter::once(first).chain(clients) {
            let mut key = client_prefix(client_id);
            key.extend_from_slice(&at);
            let _ticket = self.tables.queued.put(key, Vec::new());
        }
    }

    fn sent(&mut self, client_id: &str, position: Position, pkid: u16) {
        let key = self.queue_key(client_id, position);
        let _ticket = self
            .tables
            .sent
            .put(key.clone(), pkid.to_be_bytes().to_vec());
        self.sent.insert(key);
    }

    fn delivered(&mut self, client_id: &str, position: Position) {
        self.settle();
        // Not its entry (not written past a bound, or another session's
        // after a restart): nothing to delete, and not its to count off.
        if !self.budget.delivered(client_id, position) {
            self.forget_sent(client_id, position);
            return;
        }
        let mut key = client_prefix(client_id);
        match self.placed.get_mut(&position) {
            Some((restored, left)) => {
                key.extend_from_slice(restored);
                *left = left.saturating_sub(1);
                if *left == 0 {
                    let _ticket = self.tables.data.delete(restored.to_vec());
                    self.placed.remove(&position);
                }
            }
            None => key.extend_from_slice(&position_key(self.run, position)),
        }
        if !self.sent.is_empty() && self.sent.remove(&key) {
            let _ticket = self.tables.sent.delete(key.clone());
        }
        let _ticket = self.tables.queued.delete(key);
    }

    fn placed(&mut self, position: Position, key: &Bytes, sessions: u32) {
        self.placed.insert(position, (key.clone(), sessions));
        if let Some(restoring) = &mut self.restoring {
            restoring.placed(&mut self.budget, position, key);
        }
    }

    fn dropped(&mut self, idx: usize, segment: u64, clients: &mut dyn Iterator<Item = &str>) {
        self.settle();
        let prefix = &position_key(self.run, (idx, (segment, 0)))[..20];
        let clients: Vec<&str> = clients.collect();
        for client_id in &clients {
            self.budget.dropped(client_id, idx, segment);
        }
        let _ticket = self.tables.data.delete_prefix(prefix.to_vec());
        for client_id in &clients {
            let mut key = client_prefix(client_id);
            key.extend_from_slice(prefix);
            let _ticket = self.tables.queued.delete_prefix(key);
        }
        let gone = (idx, (segment, 0))..(idx, (segment + 1, 0));
        for old in self.forget_restored(gone) {
            for client_id in &clients {
                let mut key = client_prefix(client_id);
                key.extend_from_slice(&old);
                let _ticket = self.tables.queued.delete(key);
            }
        }
    }

    fn will(&mut self, client_id: &str, will: Option<(&Bytes, u32)>) {
        let key = client_id.as_bytes().to_vec();
        let _ticket = match will {
            Some((packet, delay)) => {
                let mut value = Vec::with_capacity(4 + packet.len());
                value.extend_from_slice(&delay.to_be_bytes());
                value.extend_from_slice(packet);
                self.tables.wills.put(key, value)
            }
            None => self.tables.wills.delete(key),
        };
    }

    fn received(&mut self, client_id: &str, pkid: u16, packet: Option<&Bytes>) {
        let mut key = client_prefix(client_id);
        key.extend_from_slice(&pkid.to_be_bytes());
        let _ticket = match packet {
            Some(packet) => self.tables.received.put(key, packet.to_vec()),
            None => self.tables.received.delete(key),
        };
    }

    fn releasing(&mut self, client_id: &str, pkid: u16, owed: bool) {
        let mut key = client_prefix(client_id);
        key.extend_from_slice(&pkid.to_be_bytes());
        let _ticket = if owed {
            self.releases = self.releases.wrapping_add(1);
            let order = (u64::from(self.run) << 32) | u64::from(self.releases);
            self.tables.releasing.put(key, order.to_be_bytes().to_vec())
        } else {
            self.tables.releasing.delete(key)
        };
    }

    fn released(&mut self, idx: usize) {
        self.settle();
        let prefix = &position_key(self.run, (idx, (0, 0)))[..12];
        let _ticket = self.tables.data.delete_prefix(prefix.to_vec());
        let old = self.forget_restored((idx, (0, 0))..(idx + 1, (0, 0)));
        // Sessions that left the filter with entries in it: the router
        // holds them no more, nor does the disk.
        for client_id in self.budget.released(idx) {
            let mut key = client_prefix(&client_id);
            key.extend_from_slice(prefix);
            let _ticket = self.tables.queued.delete_prefix(key);
            for old in &old {
                let mut key = client_prefix(&client_id);
                key.extend_from_slice(old);
                let _ticket = self.tables.queued.delete(key);
            }
        }
    }
}

impl Kept {
    /// Once the router runs, the restored entries are all counted.
    fn settle(&mut self) {
        if let Some(restoring) = self.restoring.take() {
            restoring.settle(&mut self.budget);
        }
    }

    /// The `mqtt_sent` entry of a QoS 2 publication acknowledged, if any.
    fn forget_sent(&mut self, client_id: &str, position: Position) {
        if self.sent.is_empty() {
            return;
        }
        let key = self.queue_key(client_id, position);
        if self.sent.remove(&key) {
            let _ticket = self.tables.sent.delete(key);
        }
    }

    /// A session's queue entry for the publication at `position` (restored
    /// ones by their earlier run's key).
    fn queue_key(&self, client_id: &str, position: Position) -> Vec<u8> {
        let mut key = client_prefix(client_id);
        match self.placed.get(&position) {
            Some((restored, _)) => key.extend_from_slice(restored),
            None => key.extend_from_slice(&position_key(self.run, position)),
        }
        key
    }

    /// The publications restored from an earlier run whose new positions
    /// fall in `positions` (the router let them go): forgotten, their data
    /// deleted; their keys, for the sessions' entries.
    fn forget_restored(&mut self, positions: std::ops::Range<Position>) -> Vec<Bytes> {
        let gone: Vec<Position> = self.placed.range(positions).map(|(p, _)| *p).collect();
        let mut keys = Vec::with_capacity(gone.len());
        for position in gone {
            if let Some((old, _)) = self.placed.remove(&position) {
                let _ticket = self.tables.data.delete(old.to_vec());
                keys.push(old);
            }
        }
        keys
    }
}

/// A retained message as `mqtt_retained` keeps it (see the table above).
fn retained_value(at: u64, owner: Option<&str>, packet: &[u8]) -> Vec<u8> {
    // A name longer than 64 KiB is no principal's.
    let owner = owner.filter(|o| o.len() <= usize::from(u16::MAX));
    let named = owner.map_or(0, |o| 3 + o.len());
    let mut value = Vec::with_capacity(8 + named + packet.len());
    value.extend_from_slice(&at.to_be_bytes());
    if let Some(owner) = owner {
        value.push(0);
        value.extend_from_slice(&(owner.len() as u16).to_be_bytes());
        value.extend_from_slice(owner.as_bytes());
    }
    value.extend_from_slice(packet);
    value
}

/// A subscription's options as `mqtt_subscriptions` keeps them.
fn write_options(options: &SubscriptionOptions) -> Vec<u8> {
    let flags = u8::from(options.nolocal)
        | u8::from(options.preserve_retain) << 1
        | u8::from(options.id.is_some()) << 2;
    let mut value = vec![options.qos, flags];
    if let Some(id) = options.id {
        value.extend_from_slice(&(id as u32).to_be_bytes());
    }
    value
}

/// Read back; a value of one byte (before patch 19) is the QoS alone.
fn read_options(value: &[u8]) -> Option<SubscriptionOptions> {
    let qos = *value.first()?;
    let flags = value.get(1).copied().unwrap_or(0);
    let id = match value.get(2..6) {
        Some(id) if flags & 4 != 0 => Some(u32::from_be_bytes(id.try_into().ok()?) as usize),
        _ => None,
    };
    Some(SubscriptionOptions {
        id,
        qos,
        nolocal: flags & 1 != 0,
        preserve_retain: flags & 2 != 0,
    })
}

/// A kept session, for the guard (which keeps its expiry).
#[derive(Debug, Clone)]
pub struct KeptSession {
    pub client_id: String,
    pub filters: HashSet<String>,
    /// `None`: kept until the client ends it.
    pub expires_in: Option<Duration>,
    /// The principal whose session it is (`None`: recorded before
    /// sessions had owners).
    pub owner: Option<String>,
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
    /// The wills of connections the last run did not see end, and when
    /// each is due (see [`schedule_wills`]).
    pub wills_due: Vec<(String, Duration)>,
}

/// Publishes each restored will when due, unless its client came back
/// first: a connection open when the last run stopped ended then, as far
/// as its client can tell, without DISCONNECT.
pub fn schedule_wills(trigger: rumqttd::WillTrigger, due: Vec<(String, Duration)>) {
    for (client_id, after) in due {
        let trigger = trigger.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            trigger.fire(client_id);
        });
    }
}

/// What the last run kept, and the keeper for this one; `None` when
/// nothing is kept.
/// The retained messages are counted again in `owners`, by owner.
pub fn recover(
    store: &Store,
    topics: &Topics,
    owners: &Arc<RetainedBook>,
    limits: QueueLimits,
) -> Result<Option<Recovered>, StoreError> {
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
    let (retained, stale_presence) = load::retained(&tables.retained, topics, owners)?;
    let (sessions, publications, kept) = load::sessions(&tables)?;
    let sent = load::sent_keys(&tables)?;
    let (wills, wills_due) = load::wills(&tables.wills, &kept)?;
    let queued = sessions.iter().map(|s| s.queued.len()).sum();
    for session in &kept {
        if let Some(owner) = &session.owner {
            limits
                .owners
                .set(&session.client_id, &Arc::from(owner.as_str()));
        }
    }
    let restoring = Some(restoring::Restoring::of(&sessions, &publications));
    Ok(Some(Recovered {
        retained: retained.len(),
        persistence: Persistence {
            retained,
            sessions,
            publications,
            wills,
            keeper: Box::new(Kept {
                tables,
                owners: owners.clone(),
                run,
                placed: BTreeMap::new(),
                releases: 0,
                sent,
                budget: budget::Budget::new(limits),
                restoring,
            }),
        },
        sessions: kept,
        queued,
        stale_presence,
        run_saved,
        wills_due,
    }))
}

/// Everything of a session: its subscriptions, its queue, its expiry.
fn forget(tables: &Tables, client: &str) {
    let prefix = client_prefix(client);
    let _ = tables.subscriptions.delete_prefix(prefix.clone());
    let _ = tables.queued.delete_prefix(prefix.clone());
    let _ = tables.received.delete_prefix(prefix.clone());
    let _ = tables.releasing.delete_prefix(prefix.clone());
    let _ = tables.sent.delete_prefix(prefix);
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

    /// `owner`'s kept session's connection opened (`ended`: `None`) or
    /// ended; its expiry in seconds (`u32::MAX`: never).
    pub fn record(&self, client_id: &str, expiry: u32, ended: Option<u64>, owner: &str) -> Ticket {
        let mut value = Vec::with_capacity(12 + owner.len());
        value.extend_from_slice(&expiry.to_be_bytes());
        value.extend_from_slice(&ended.unwrap_or(0).to_be_bytes());
        value.extend_from_slice(owner.as_bytes());
        self.table.put(client_id.as_bytes().to_vec(), value)
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
