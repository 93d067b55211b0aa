//! Reading back what the last run kept (see the tables in `mod.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use rumqttd::{RestoredPublication, RestoredRetained, RestoredSession, RestoredWill};
use tracing::warn;

use super::{client_prefix, forget, now_ms, read_options, KeptSession, Tables};
use crate::broker::guard::packet::{self, Version};
use crate::broker::guard::retained::{self, RetainedBook};
use crate::broker::Publication;
use crate::store::{StoreError, Table};
use crate::topics::{Route, Topics};

pub(super) type Retained = (Vec<RestoredRetained>, Vec<Publication>);

/// The retained messages kept, each counted again in `owners` (issue 43;
/// one kept before messages had owners counts as nobody's).
pub(super) fn retained(
    table: &Table,
    topics: &Topics,
    owners: &RetainedBook,
) -> Result<Retained, StoreError> {
    let now = now_ms();
    let mut restored = Vec::new();
    let mut stale = Vec::new();
    for (key, value) in table.load()? {
        let Some((at, owner, packet)) = split_retained(&value) else {
            warn!(topic = %String::from_utf8_lossy(&key), "Dropped a kept retained message too short to read.");
            let _ = table.delete(key);
            continue;
        };
        let publish = read_publish(packet);
        if let Some(offline) = publish.as_ref().and_then(|p| stale_presence(p, topics)) {
            stale.push(offline);
        }
        let topic = String::from_utf8_lossy(&key);
        let bytes = publish.map_or(packet.len() as u64, |p| {
            retained::size(p.topic, p.properties, p.payload)
        });
        owners.restore(&topic, owner, bytes);
        restored.push(RestoredRetained {
            packet: Bytes::copy_from_slice(packet),
            age: Duration::from_millis(now.saturating_sub(at)),
        });
    }
    Ok((restored, stale))
}

/// The sessions to restore (those that expired while the sidecar was
/// stopped are forgotten here), their publications, and the guard's view.
pub(super) type Sessions = (
    Vec<RestoredSession>,
    Vec<RestoredPublication>,
    Vec<KeptSession>,
);

pub(super) fn sessions(tables: &Tables) -> Result<Sessions, StoreError> {
    let (expiry, expired) = expiries(tables)?;
    let mut by_client = subscriptions(tables, &expired)?;
    let publications = queued(tables, &expired, &mut by_client)?;
    for (key, packet) in tables.received.load()? {
        match split(&key) {
            Some((client, _)) if !expired.contains(client) => {
                entry(&mut by_client, client).received.push(packet.into());
            }
            _ => {}
        }
    }
    releasing(tables, &expired, &mut by_client)?;
    sent(tables, &mut by_client)?;
    for client in expiry.keys() {
        entry(&mut by_client, client);
    }
    let kept = by_client
        .values()
        .map(|s| {
            let (expires_in, owner) = match expiry.get(&s.client_id) {
                Some((expires_in, owner)) => (*expires_in, owner.clone()),
                None => (None, None),
            };
            KeptSession {
                client_id: s.client_id.clone(),
                filters: s.subscriptions.iter().map(|(f, _)| f.clone()).collect(),
                expires_in,
                owner,
            }
        })
        .collect();
    Ok((
        by_client.into_values().collect(),
        publications.into_values().collect(),
        kept,
    ))
}

/// Client ID → expiry in (a session without one was kept by a 3.1.1
/// client, not clean: forever) and owner, from the guard's records; and
/// those that expired while the sidecar was stopped, forgotten.
type Expiries = (
    HashMap<String, (Option<Duration>, Option<String>)>,
    HashSet<String>,
);

fn expiries(tables: &Tables) -> Result<Expiries, StoreError> {
    let now = now_ms();
    let mut expiry = HashMap::new();
    let mut expired = HashSet::new();
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
        let owner = value
            .get(12..)
            .filter(|o| !o.is_empty())
            .map(|o| String::from_utf8_lossy(o).into_owned());
        expiry.insert(client, (left, owner));
    }
    Ok((expiry, expired))
}

type ByClient = BTreeMap<String, RestoredSession>;

fn subscriptions(tables: &Tables, expired: &HashSet<String>) -> Result<ByClient, StoreError> {
    let mut by_client = BTreeMap::new();
    for (key, value) in tables.subscriptions.load()? {
        let Some((client, filter)) = split(&key) else {
            continue;
        };
        let Some(options) = read_options(&value) else {
            continue;
        };
        if expired.contains(client) {
            continue;
        }
        entry(&mut by_client, client)
            .subscriptions
            .push((String::from_utf8_lossy(filter).into_owned(), options));
    }
    Ok(by_client)
}

/// Each queued publication once, however many sessions wait for it (the
/// position after the client ID names it): start-up holds no more than the
/// broker did before the restart. Publications no session waits for any
/// more, and queue entries whose publication is gone, are deleted.
fn queued(
    tables: &Tables,
    expired: &HashSet<String>,
    by_client: &mut ByClient,
) -> Result<BTreeMap<Bytes, RestoredPublication>, StoreError> {
    let mut publications: BTreeMap<Bytes, RestoredPublication> = BTreeMap::new();
    // Each position once in memory, however many sessions wait for it (a
    // million queue entries name some ten thousand publications in the
    // restart bench).
    let mut positions: BTreeSet<Bytes> = BTreeSet::new();
    tables.queued.scan(|key, value| {
        let Some((client, position)) = split(key) else {
            return;
        };
        if expired.contains(client) {
            return;
        }
        let position = match positions.get(position) {
            Some(known) => known.clone(),
            None => {
                let new = Bytes::copy_from_slice(position);
                positions.insert(new.clone());
                new
            }
        };
        // The publication in its one session's entry
        if !value.is_empty() && !publications.contains_key(&position) {
            if let Some(publication) = read_publication(&position, value) {
                publications.insert(position.clone(), publication);
            }
        }
        entry(by_client, client).queued.push(position);
    })?;
    tables.data.scan(|key, value| {
        let Some(position) = positions.get(key) else {
            let _ = tables.data.delete(key.to_vec());
            return;
        };
        if !publications.contains_key(key) {
            if let Some(publication) = read_publication(position, value) {
                publications.insert(position.clone(), publication);
            }
        }
    })?;
    for session in by_client.values_mut() {
        session.queued.retain(|position| {
            let found = publications.contains_key(position);
            if !found {
                let mut key = client_prefix(&session.client_id);
                key.extend_from_slice(position);
                let _ = tables.queued.delete(key);
            }
            found
        });
    }
    Ok(publications)
}

/// A publication as `mqtt_queued_data` keeps it.
fn read_publication(position: &Bytes, value: &[u8]) -> Option<RestoredPublication> {
    let len = usize::from(u16::from_be_bytes([*value.first()?, *value.get(1)?]));
    let filter = value.get(2..2 + len)?;
    let packet = value.get(2 + len..)?;
    Some(RestoredPublication {
        key: position.clone(),
        filter: String::from_utf8_lossy(filter).into_owned(),
        packet: Bytes::copy_from_slice(packet),
    })
}

/// The QoS 2 publications each session was sent and had not acknowledged,
/// with their packet identifiers; entries of no publication still queued
/// for it go.
fn sent(tables: &Tables, by_client: &mut ByClient) -> Result<(), StoreError> {
    for (key, pkid) in tables.sent.load()? {
        let kept = split(&key).and_then(|(client, position)| {
            let session = by_client.get_mut(client)?;
            let at = session.queued.iter().position(|q| q[..] == *position)?;
            let pkid = u16::from_be_bytes(<[u8; 2]>::try_from(&pkid[..]).ok()?);
            session.sent.push((session.queued[at].clone(), pkid));
            Some(())
        });
        if kept.is_none() {
            let _ = tables.sent.delete(key);
        }
    }
    Ok(())
}

/// The keys in `mqtt_sent` after [`sessions`] dropped the stale ones.
pub(super) fn sent_keys(tables: &Tables) -> Result<HashSet<Vec<u8>>, StoreError> {
    Ok(tables
        .sent
        .load()?
        .into_iter()
        .map(|(key, _)| key)
        .collect())
}

/// The PUBRELs each session is owed, in the order their PUBRECs came.
fn releasing(
    tables: &Tables,
    expired: &HashSet<String>,
    by_client: &mut ByClient,
) -> Result<(), StoreError> {
    let mut owed: BTreeMap<String, Vec<(u64, u16)>> = BTreeMap::new();
    for (key, order) in tables.releasing.load()? {
        let Some((client, pkid)) = split(&key) else {
            continue;
        };
        let (Ok(pkid), Ok(order)) = (<[u8; 2]>::try_from(pkid), <[u8; 8]>::try_from(&order[..]))
        else {
            continue;
        };
        if !expired.contains(client) {
            owed.entry(client.to_owned())
                .or_default()
                .push((u64::from_be_bytes(order), u16::from_be_bytes(pkid)));
        }
    }
    for (client, mut pkids) in owed {
        pkids.sort_unstable();
        entry(by_client, &client).releasing = pkids.into_iter().map(|(_, pkid)| pkid).collect();
    }
    Ok(())
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
            received: Vec::new(),
            releasing: Vec::new(),
            sent: Vec::new(),
        })
}

fn split(key: &[u8]) -> Option<(&str, &[u8])> {
    let at = key.iter().position(|&b| b == 0)?;
    let client = std::str::from_utf8(&key[..at]).ok()?;
    Some((client, &key[at + 1..]))
}

/// A value of `mqtt_retained`: when it was retained, its owner, the
/// PUBLISH (see the table in `mod.rs`).
fn split_retained(value: &[u8]) -> Option<(u64, Option<&str>, &[u8])> {
    let at = u64::from_be_bytes(value.get(..8)?.try_into().ok()?);
    let rest = &value[8..];
    if rest.first() != Some(&0) {
        return Some((at, None, rest));
    }
    let len = usize::from(u16::from_be_bytes(rest.get(1..3)?.try_into().ok()?));
    let owner = std::str::from_utf8(rest.get(3..3 + len)?).ok()?;
    Some((at, Some(owner), &rest[3 + len..]))
}

fn read_publish(packet: &[u8]) -> Option<packet::Publish<'_>> {
    let header = packet::frame(packet, usize::MAX).ok()??;
    let body = packet.get(header.header_len..header.size())?;
    packet::publish(header.first, body, Version::V5).ok()
}

/// An agent's retained "online" presence, as its offline successor (the
/// same message with `status` offline).
fn stale_presence(publish: &packet::Publish<'_>, topics: &Topics) -> Option<Publication> {
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

pub(super) type Wills = (Vec<RestoredWill>, Vec<(String, Duration)>);

/// The wills kept, and when each is due: at once for a connection whose
/// session ended with it, after its delay for a kept session (sooner if
/// the session expires first, §3.1.3.2.2).
pub(super) fn wills(table: &Table, kept: &[KeptSession]) -> Result<Wills, StoreError> {
    let sessions: HashMap<&str, Option<Duration>> = kept
        .iter()
        .map(|s| (s.client_id.as_str(), s.expires_in))
        .collect();
    let mut wills = Vec::new();
    let mut due = Vec::new();
    for (key, value) in table.load()? {
        let client_id = String::from_utf8_lossy(&key).into_owned();
        let Some(delay) = value.get(..4).and_then(|d| d.try_into().ok()) else {
            let _ = table.delete(key);
            continue;
        };
        let delay = Duration::from_secs(u64::from(u32::from_be_bytes(delay)));
        let after = match sessions.get(client_id.as_str()) {
            Some(Some(expires_in)) => delay.min(*expires_in),
            Some(None) => delay,
            None => Duration::ZERO,
        };
        due.push((client_id.clone(), after));
        wills.push(RestoredWill {
            client_id,
            packet: Bytes::copy_from_slice(&value[4..]),
        });
    }
    Ok((wills, due))
}
