//! Invocation records across a restart (issue 31): what `queryAction`
//! answers from (the latest status, who owns the invocation, when its
//! retention ends) is put in the store's `invocations` table, keyed by the
//! route, at each change, and deleted when the invocation is forgotten.
//! Start-up takes back those still within their retention, counted by the
//! wall clock across the restart.
//!
//! An invocation that was still running when the sidecar stopped cannot
//! go on: its agent's connection is gone with the old process, and the
//! route the agent knows it by leads nowhere. It comes back `failed`, its
//! output saying why, and is kept for a full retention from the restart.
//! After a graceful stop its consumer was also told (503, shutting down).
//!
//! The records are named again by their principal (WebSocket and HTTP
//! consumers) or their MQTT reply topic; a WebSocket connection's own name
//! means nothing after a restart (the numbers start again), so a restored
//! record keeps the [`RESTORED`] stand-in as its consumer, which no
//! connection ever is.
//!
//! Nothing waits for these writes: a status has no acknowledgement to hold
//! back, and the agent's own statuses go on whether they are on disk or not.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tracing::{info, warn};

use super::{Asked, Consumer, Invocation, Pending, Requests, Timer};
use crate::gateway::subscriptions::ConnId;
use crate::lmos::{Body, Message};
use crate::store::{Store, StoreError, Table};

/// The store's table for invocation records.
pub const TABLE: &str = "invocations";

/// The consumer of a restored record whose connection is gone: a
/// connection ID the gateway never hands out.
pub const RESTORED: ConnId = ConnId::MAX;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum StoredConsumer {
    WebSocket,
    Mqtt {
        topic: String,
        correlation_data: Option<Vec<u8>>,
        principal: Option<String>,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct Record {
    thing: String,
    action: String,
    correlation: String,
    consumer: StoredConsumer,
    owner: Option<String>,
    principal: String,
    /// The latest status as its consumer got it.
    latest: Option<String>,
    finished: bool,
    /// When its retention ends, ms since the epoch; none while it runs.
    retain_until_ms: Option<i64>,
}

fn wall_millis() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Requests {
    /// Keeps invocation records in `store` (when it is durable), after
    /// taking back those it holds.
    pub fn with_store(mut self, store: &Store) -> Result<Requests, StoreError> {
        if !store.is_durable() {
            return Ok(self);
        }
        let table = store.lazy_table(TABLE);
        let started = Instant::now();
        let (kept, failed) = self.restore(&table, wall_millis())?;
        store.note_recovered("invocations", (kept + failed) as u64);
        info!(
            invocations = kept,
            failed_by_restart = failed,
            ms = started.elapsed().as_millis() as u64,
            "Restored the invocation records."
        );
        Ok(self)
    }

    /// Puts the route's record, if it is an invocation's.
    pub(super) fn persist(&self, route: &str) {
        let (Some(table), Some(p)) = (&self.records, self.routes.get(route)) else {
            return;
        };
        let Some(record) = self.record_of(route, p) else {
            return;
        };
        // Serializing strings, numbers and bytes cannot fail.
        let value = serde_json::to_vec(&record).unwrap_or_default();
        let _queued = table.put(route.as_bytes(), value);
    }

    pub(super) fn unpersist(&self, route: &str) {
        if let Some(table) = &self.records {
            let _queued = table.delete(route.as_bytes());
        }
    }

    fn record_of(&self, route: &str, p: &Pending) -> Option<Record> {
        let invocation = p.asked.invocation()?;
        let consumer = match &p.consumer {
            Consumer::WebSocket(_) => StoredConsumer::WebSocket,
            Consumer::Mqtt {
                topic,
                correlation_data,
                principal,
            } => StoredConsumer::Mqtt {
                topic: topic.clone(),
                correlation_data: correlation_data.as_ref().map(|b| b.to_vec()),
                principal: principal.clone(),
            },
        };
        let retain_until_ms = self
            .timer_keys
            .get(&Timer::Retain(route.to_owned()))
            .map(|key| {
                let left = self
                    .timers
                    .deadline(key)
                    .saturating_duration_since(tokio::time::Instant::now());
                wall_millis().saturating_add(i64::try_from(left.as_millis()).unwrap_or(i64::MAX))
            });
        Some(Record {
            thing: p.thing.clone(),
            action: invocation.action.clone(),
            correlation: p.correlation.clone(),
            consumer,
            owner: invocation.owner.clone(),
            principal: p.principal.to_string(),
            latest: invocation.latest.clone(),
            finished: p.finished,
            retain_until_ms,
        })
    }

    /// Takes back the records within their retention, oldest first; those
    /// still running when the sidecar stopped as failed. Returns how many
    /// came back, and how many of them failed so.
    pub(super) fn restore(
        &mut self,
        table: &Table,
        now_ms: i64,
    ) -> Result<(usize, usize), StoreError> {
        let mut records = Vec::new();
        let mut unreadable = 0;
        for (key, value) in table.load()? {
            let route = String::from_utf8(key.clone()).ok();
            let record = serde_json::from_slice::<Record>(&value).ok();
            match (route, record) {
                (Some(route), Some(r)) if !r.finished || r.retain_until_ms > Some(now_ms) => {
                    records.push((route, r))
                }
                // Its retention ended while the sidecar was down.
                (Some(_), Some(_)) => {
                    let _queued = table.delete(key);
                }
                _ => {
                    unreadable += 1;
                    let _queued = table.delete(key);
                }
            }
        }
        if unreadable > 0 {
            warn!(
                unreadable,
                "Dropped invocation records on disk that could not be read."
            );
        }
        let retention = i64::try_from(self.retention.as_millis()).unwrap_or(i64::MAX);
        let mut failed = Vec::new();
        for (route, r) in records.iter_mut().filter(|(_, r)| !r.finished) {
            r.latest = Some(failed_by_restart(r));
            r.finished = true;
            r.retain_until_ms = Some(now_ms.saturating_add(retention));
            failed.push(route.clone());
        }
        records.sort_by_key(|(_, r)| r.retain_until_ms);
        // Forgetting one past a share or the limit deletes it from the table.
        self.records = Some(table.clone());
        for (route, r) in records {
            let left = r.retain_until_ms.unwrap_or(now_ms).saturating_sub(now_ms);
            self.take_back(route, r, Duration::from_millis(left.max(0) as u64));
        }
        for route in &failed {
            self.persist(route);
        }
        Ok((self.finished.len(), failed.len()))
    }

    /// One record back among the remembered invocations.
    fn take_back(&mut self, route: String, r: Record, left: Duration) {
        let consumer = match r.consumer {
            StoredConsumer::WebSocket => Consumer::WebSocket(RESTORED),
            StoredConsumer::Mqtt {
                topic,
                correlation_data,
                principal,
            } => Consumer::Mqtt {
                topic,
                correlation_data: correlation_data.map(Bytes::from),
                principal,
            },
        };
        let keys = std::iter::once(consumer.key()).chain(r.owner.clone());
        for key in keys {
            self.invocations
                .insert((key.clone(), r.correlation.clone()), route.clone());
            self.latest_invocation
                .insert((key, r.action.clone()), route.clone());
        }
        let now = Instant::now();
        let principal: std::sync::Arc<str> = r.principal.into();
        self.routes.insert(
            route.clone(),
            Pending {
                consumer,
                correlation: r.correlation,
                thing: r.thing,
                asked: Asked::Invocation(Invocation {
                    latest: r.latest,
                    ..Invocation::new(r.action, r.owner, self.liveness)
                }),
                finished: true,
                remembered: true,
                principal: principal.clone(),
                traceparent: None,
                started: None,
                since: now,
            },
        );
        self.arm(Timer::Retain(route.clone()), left);
        self.keep_finished(&principal, &route);
    }
}

/// The status of an invocation the restart ended.
fn failed_by_restart(r: &Record) -> String {
    let detail = format!(
        "The sidecar restarted while this invocation was running: the connection to the agent hosting `{}` is gone, and no later status of it can arrive.",
        r.thing
    );
    Message::new(
        r.thing.clone(),
        Body::ActionStatus {
            action: r.action.clone(),
            status: "failed".into(),
            output: Some(json!({ "error": detail })),
        },
    )
    .with_correlation_id(r.correlation.clone())
    .to_json()
}
