//! This sidecar's retained state in the buckets and the cluster's read
//! from them (the JetStream edge's part for [`super::kv`]).

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::{consumer, kv};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::durable::{Edge, FromDurable, KvOp, ACK_TIMEOUT};
use super::kv::Bucket;

impl Edge {
    /// Hands the buckets' entries to the link.
    pub(super) async fn load(&self, buckets: &HashMap<Bucket, kv::Store>) {
        for (&bucket, store) in buckets {
            if let Err(e) = self.load_one(bucket, store).await {
                warn!(error = %e, "Could not read the cluster's state from a bucket.");
            }
        }
        let _ = self.tx.send(FromDurable::Loaded).await;
    }

    async fn load_one(&self, bucket: Bucket, _store: &kv::Store) -> Result<(), String> {
        for (key, value) in self.last_per_key(bucket, false).await? {
            let Some(value) = value else { continue };
            if let Some(topic) = super::kv::topic(&self.topics, bucket, &key) {
                let state = FromDurable::State {
                    topic,
                    payload: value,
                };
                if self.tx.send(state).await.is_err() {
                    break;
                }
            }
        }
        Ok(())
    }

    /// The bucket's entries, the last of each key (`None`: deleted), read
    /// with a consumer of its own on the bucket's stream. (The client
    /// library's watcher, an ordered push consumer, delivered nothing from
    /// a 2.9 server here.)
    async fn last_per_key(
        &self,
        bucket: Bucket,
        headers_only: bool,
    ) -> Result<Vec<(String, Option<Bytes>)>, String> {
        let name = bucket.name(&self.topics);
        let stream = self
            .context
            .get_stream(format!("KV_{name}"))
            .await
            .map_err(|e| e.to_string())?;
        // An entry past the bucket's age limit (presence's TTL) is gone,
        // even while the replica that leads the stream has not removed it
        // yet: NATS expires each replica on a timer of its own, and a
        // sidecar starting then would take an agent nobody renews for
        // online (seen once with NATS 2.15, likely this).
        let max_age = stream.cached_info().config.max_age;
        let now = std::time::SystemTime::now();
        let prefix = format!("$KV.{name}.");
        let mut consumer: consumer::PullConsumer = stream
            .create_consumer(consumer::pull::Config {
                deliver_policy: consumer::DeliverPolicy::LastPerSubject,
                ack_policy: consumer::AckPolicy::None,
                filter_subject: format!("{prefix}>"),
                headers_only,
                inactive_threshold: Duration::from_secs(30),
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        let mut left = consumer
            .info()
            .await
            .map_err(|e| e.to_string())?
            .num_pending;
        let mut out = Vec::new();
        while left > 0 {
            let mut batch = consumer
                .fetch()
                .max_messages(500)
                .expires(ACK_TIMEOUT)
                .messages()
                .await
                .map_err(|e| e.to_string())?;
            let mut got = 0;
            while let Some(m) = batch.next().await {
                let m = m.map_err(|e| e.to_string())?;
                got += 1;
                let info = m.info().ok();
                left = info.as_ref().map_or(0, |i| i.pending);
                let expired = !max_age.is_zero()
                    && info
                        .is_some_and(|i| std::time::SystemTime::from(i.published) + max_age <= now);
                let Some(key) = m.subject.as_str().strip_prefix(&prefix) else {
                    continue;
                };
                let deleted = m
                    .headers
                    .as_ref()
                    .and_then(|h| h.get("KV-Operation"))
                    .is_some_and(|op| op.as_str() == "DEL" || op.as_str() == "PURGE");
                let value = (!deleted && !expired).then(|| m.payload.clone());
                out.push((key.to_owned(), value));
            }
            if got == 0 {
                break; // expired meanwhile
            }
        }
        let _ = stream.delete_consumer(&consumer.cached_info().name).await;
        Ok(out)
    }

    /// Writes retained state as the link says, the latest per topic when
    /// several wait; what fails is tried again.
    pub(super) async fn write(
        &self,
        buckets: &HashMap<Bucket, kv::Store>,
        ops: &mut mpsc::UnboundedReceiver<KvOp>,
    ) {
        let mut due: Vec<(String, Option<Bytes>)> = Vec::new();
        loop {
            // What failed is tried again within half a second.
            let wait = if due.is_empty() {
                Duration::from_secs(3600)
            } else {
                Duration::from_millis(500)
            };
            let op = match tokio::time::timeout(wait, ops.recv()).await {
                Ok(None) => break, // the link is gone
                Ok(Some(op)) => Some(op),
                Err(_) => None,
            };
            let (mut list, mut reload) = (false, false);
            let mut latest: HashMap<String, Option<Bytes>> = HashMap::new();
            let mut order = Vec::new();
            for (topic, payload) in due.drain(..) {
                if latest.insert(topic.clone(), payload).is_none() {
                    order.push(topic);
                }
            }
            let mut take = |op: KvOp| match op {
                KvOp::Write { topic, payload } => {
                    if latest.insert(topic.clone(), payload).is_none() {
                        order.push(topic);
                    }
                }
                KvOp::ListPresence => list = true,
                KvOp::Reload => reload = true,
            };
            if let Some(op) = op {
                take(op);
            }
            while let Ok(op) = ops.try_recv() {
                take(op);
            }
            for topic in order {
                let payload = latest.remove(&topic).flatten();
                let Some((bucket, key)) = super::kv::entry(&self.topics, &topic) else {
                    continue;
                };
                let store = &buckets[&bucket];
                let r = match &payload {
                    Some(p) => store
                        .put(&key, p.clone())
                        .await
                        .map(drop)
                        .map_err(|e| e.to_string()),
                    None => store.delete(&key).await.map_err(|e| e.to_string()),
                };
                match r {
                    Ok(()) => self.counters.kv_writes.inc(),
                    Err(e) => {
                        debug!(error = %e, topic, "A state entry could not be written; again.");
                        self.counters.kv_errors.inc();
                        due.push((topic, payload));
                    }
                }
            }
            if list {
                self.list_presence().await;
            }
            if reload {
                self.load(buckets).await;
            }
        }
    }

    async fn list_presence(&self) {
        let Ok(entries) = self.last_per_key(Bucket::Presence, true).await else {
            return; // not now: the next listing will do
        };
        let present = entries
            .into_iter()
            .filter(|(_, value)| value.is_some())
            .filter_map(|(key, _)| super::kv::topic(&self.topics, Bucket::Presence, &key))
            .collect();
        let _ = self.tx.send(FromDurable::Present(present)).await;
    }
}
