//! What the console's topic tree and recent-message view show: the latest
//! message on every topic under the prefix (MQTT Explorer's tree: retained
//! messages and whatever else arrived since the start) and the most recent
//! messages, each bounded in bytes (`console.topic_tree_bytes`,
//! `console.recent_messages_bytes`). Pure data behind a lock; the sidecar's
//! own bus link to the broker feeds it ([`follow`]).
//!
//! A subscriber's delivery does not say whether the message was retained
//! (MQTT clears the flag on live messages), so `retained` comes from the
//! topic layout: the topics the sidecar keeps retained (readings, values of
//! properties, TDs, the agent's presence).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::mpsc;

use crate::broker::Delivery;
use crate::topics::{Route, Topics};

/// What a message costs beside its topic and payload (the entry, the maps).
const OVERHEAD: usize = 96;

/// The byte budgets, from `[console]`.
#[derive(Debug, Clone, Copy)]
pub struct MonitorLimits {
    pub tree_bytes: usize,
    pub recent_bytes: usize,
}

/// One message as the console shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Seen {
    /// Increases with every message: the page's cursor.
    pub seq: u64,
    pub topic: String,
    /// UTF-8 text (invalid bytes replaced); the sidecar's topics carry JSON.
    pub payload: String,
    pub bytes: usize,
    /// Unix ms when the sidecar received it.
    pub at: u64,
    pub retained: bool,
    /// MQTT 5 properties the bus carries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_topic: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation_data: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The publishing principal, when the MQTT guard named it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publisher: Option<String>,
}

impl Seen {
    fn cost(&self) -> usize {
        OVERHEAD + self.topic.len() + self.payload.len()
    }
}

#[derive(Debug)]
struct Inner {
    limits: MonitorLimits,
    seq: u64,
    /// topic → its latest message.
    latest: HashMap<String, Seen>,
    /// seq of a topic's latest message → topic: the least recently updated
    /// topic goes first when the tree is over its budget.
    by_age: BTreeMap<u64, String>,
    tree_bytes: usize,
    recent: VecDeque<Seen>,
    recent_bytes: usize,
}

/// Cheap to clone; every clone is the same monitor.
#[derive(Debug, Clone)]
pub struct Monitor(Arc<Mutex<Inner>>);

impl Default for Monitor {
    fn default() -> Self {
        Monitor::new(MonitorLimits {
            tree_bytes: 0,
            recent_bytes: 0,
        })
    }
}

/// Whether the sidecar keeps this topic retained.
fn retained(topics: &Topics, topic: &str) -> bool {
    match topics.parse(topic) {
        Some(Route::Property { .. } | Route::Td { .. } | Route::AgentStatus { .. }) => true,
        // `{prefix}/{thing}/values/properties/{name}`, outside `Route`.
        _ => topic.strip_prefix(topics.prefix()).is_some_and(|rest| {
            rest.split('/').nth(2) == Some("values") && rest.split('/').nth(3) == Some("properties")
        }),
    }
}

impl Monitor {
    pub fn new(limits: MonitorLimits) -> Monitor {
        Monitor(Arc::new(Mutex::new(Inner {
            limits,
            seq: 0,
            latest: HashMap::new(),
            by_age: BTreeMap::new(),
            tree_bytes: 0,
            recent: VecDeque::new(),
            recent_bytes: 0,
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding it would leave counts, never unsafety.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records one message.
    pub fn record(&self, topics: &Topics, delivery: &Delivery, at: u64) {
        let topic = String::from_utf8_lossy(&delivery.topic).into_owned();
        let mut inner = self.lock();
        inner.seq += 1;
        let seen = Seen {
            seq: inner.seq,
            retained: retained(topics, &topic),
            topic,
            payload: String::from_utf8_lossy(&delivery.payload).into_owned(),
            bytes: delivery.payload.len(),
            at,
            response_topic: delivery.response.as_ref().map(|r| r.topic.clone()),
            correlation_data: delivery
                .response
                .as_ref()
                .and_then(|r| r.correlation_data.as_ref())
                .map(|c| String::from_utf8_lossy(c).into_owned()),
            traceparent: delivery.trace.as_ref().map(|t| t.traceparent.clone()),
            publisher: delivery.publisher.clone(),
        };
        inner.remember(seen);
    }

    /// The latest message of every topic `visible` admits, by topic.
    pub fn tree(&self, visible: impl Fn(&str) -> bool) -> Vec<Seen> {
        let inner = self.lock();
        let mut all: Vec<Seen> = inner
            .latest
            .values()
            .filter(|s| visible(&s.topic))
            .cloned()
            .collect();
        all.sort_by(|a, b| a.topic.cmp(&b.topic));
        all
    }

    /// Up to `limit` recent messages `visible` admits whose topic or
    /// payload contains `query`, newest first.
    pub fn recent(&self, query: &str, limit: usize, visible: impl Fn(&str) -> bool) -> Vec<Seen> {
        let query = query.to_lowercase();
        let inner = self.lock();
        inner
            .recent
            .iter()
            .rev()
            .filter(|s| visible(&s.topic))
            .filter(|s| {
                query.is_empty()
                    || s.topic.to_lowercase().contains(&query)
                    || s.payload.to_lowercase().contains(&query)
            })
            .take(limit)
            .cloned()
            .collect()
    }
}

impl Inner {
    fn remember(&mut self, seen: Seen) {
        let cost = seen.cost();
        if cost <= self.limits.recent_bytes {
            self.recent_bytes += cost;
            self.recent.push_back(seen.clone());
            while self.recent_bytes > self.limits.recent_bytes {
                let Some(old) = self.recent.pop_front() else {
                    break;
                };
                self.recent_bytes -= old.cost();
            }
        }
        if let Some(old) = self.latest.remove(&seen.topic) {
            self.by_age.remove(&old.seq);
            self.tree_bytes -= old.cost();
        }
        // An empty payload clears a retained message; a message larger than
        // the whole budget is not kept (the recent view may still have it).
        if seen.payload.is_empty() || cost > self.limits.tree_bytes {
            return;
        }
        self.tree_bytes += cost;
        self.by_age.insert(seen.seq, seen.topic.clone());
        self.latest.insert(seen.topic.clone(), seen);
        while self.tree_bytes > self.limits.tree_bytes {
            let Some((_, topic)) = self.by_age.pop_first() else {
                break;
            };
            if let Some(old) = self.latest.remove(&topic) {
                self.tree_bytes -= old.cost();
            }
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Feeds the monitor from its bus link until the broker stops.
pub async fn follow(monitor: Monitor, topics: Topics, mut deliveries: mpsc::Receiver<Delivery>) {
    while let Some(delivery) = deliveries.recv().await {
        monitor.record(&topics, &delivery, now_ms());
    }
}

#[cfg(test)]
#[path = "monitor_tests.rs"]
mod tests;
