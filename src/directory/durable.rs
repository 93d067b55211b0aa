//! TDs registered over HTTP across a restart (issue 31): each registration,
//! update and deletion through `/things` is put in (deleted from) the
//! store's `tds` table, keyed by the Thing's ID, and the HTTP answer waits
//! until it is on disk. Start-up registers them again on their owners'
//! quotas, after the TD files of `discovery.things` (so a file's TD updated
//! over HTTP comes back updated).
//!
//! TDs that agents register on connect are not kept: they come again with
//! their agents. An agent re-registering a TD kept here replaces it in the
//! directory, not on disk, until its next change over HTTP.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tracing::{info, warn};

use super::{Directory, DirectoryService};
use crate::broker::Publication;
use crate::store::{Store, StoreError, Ticket};

/// The store's table for TDs registered over HTTP.
pub const TABLE: &str = "tds";

#[derive(Serialize)]
struct StoredRef<'a> {
    owner: Option<&'a str>,
    td: &'a serde_json::Value,
}

#[derive(Deserialize)]
struct Stored<'a> {
    owner: Option<String>,
    #[serde(borrow)]
    td: &'a RawValue,
}

impl DirectoryService {
    /// Keeps TDs registered over HTTP in `store`, when it is durable.
    pub fn with_store(mut self, store: &Store) -> DirectoryService {
        if store.is_durable() {
            self.tds = Some(store.table(TABLE));
        }
        self
    }

    /// Puts the TD registered as `id` (as served, with its owner) in the
    /// store, or deletes it when there is none; the ticket says when that
    /// is on disk. `None` without a durable store. Called with the
    /// directory's lock held since the change, so that the store takes
    /// concurrent changes of one TD in the order the directory did.
    pub fn persist(&self, directory: &Directory, id: &str) -> Option<Ticket> {
        let table = self.tds.as_ref()?;
        let Some(td) = directory.get(id) else {
            return Some(table.delete(id.as_bytes()));
        };
        let stored = StoredRef {
            owner: directory.owner_of(id),
            td,
        };
        let value = serde_json::to_vec(&stored).ok()?;
        Some(table.put(id.as_bytes(), value))
    }

    /// Registers the kept TDs again (start-up) and publishes each retained
    /// on its TD topic, with forms for this run's endpoints. A TD the
    /// directory refuses now (a lower quota, a smaller total) is dropped
    /// from the store, with a warning naming it.
    pub async fn restore(&self) -> Result<usize, StoreError> {
        let Some(table) = &self.tds else {
            return Ok(0);
        };
        let started = std::time::Instant::now();
        let mut restored = 0;
        for (key, value) in table.load()? {
            let id = String::from_utf8_lossy(&key).into_owned();
            let result = match serde_json::from_slice::<Stored<'_>>(&value) {
                Ok(s) => self
                    .directory()
                    .restore(s.owner.as_deref(), &id, s.td.get().as_bytes())
                    .map_err(|e| e.to_string()),
                Err(e) => Err(format!("unreadable: {e}")),
            };
            match result {
                Ok(td) => {
                    restored += 1;
                    let publication = Publication::new(self.topics.td(&id), td.to_string(), true);
                    if self.bus.publish(publication).await.is_err() {
                        warn!("The message bus closed; a restored Thing Description was not published.");
                    }
                }
                Err(reason) => {
                    warn!(thing = %id, %reason, "Dropped a Thing Description kept from before the restart.");
                    let _queued = table.delete(key);
                }
            }
        }
        info!(
            things = restored,
            ms = started.elapsed().as_millis() as u64,
            "Restored the Thing Descriptions registered over HTTP."
        );
        Ok(restored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{Bus, BusCommand};
    use crate::directory::{test_endpoints, Directory};
    use crate::store::StoreConfig;
    use crate::topics::Topics;

    const WEATHER: &str = include_str!("../../tests/fixtures/weather-agent-td.json");
    const ID: &str = "urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77";

    fn service(
        store: &Store,
        host: &str,
    ) -> (DirectoryService, tokio::sync::mpsc::Receiver<BusCommand>) {
        service_within(store, host, u64::MAX)
    }

    /// With at most `total` bytes of TDs.
    fn service_within(
        store: &Store,
        host: &str,
        total: u64,
    ) -> (DirectoryService, tokio::sync::mpsc::Receiver<BusCommand>) {
        let topics = Topics::new("lmos").unwrap();
        let mut endpoints = test_endpoints(topics.clone());
        endpoints.http = format!("http://{host}:8080");
        endpoints.websocket = format!("ws://{host}:8080/lmos");
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let limits = crate::directory::TdLimits {
            max_td_size: usize::MAX,
            max_total_bytes: total,
        };
        let directory = Directory::new(endpoints).with_limits(
            limits,
            crate::quotas::Quotas::none(),
            crate::telemetry::metrics::Metrics::default(),
        );
        let service = DirectoryService::new(
            directory,
            Bus::new(tx),
            topics,
            "urn:sidecar".into(),
            "http://h:8080",
        )
        .with_store(store);
        (service, rx)
    }

    fn open(dir: &std::path::Path) -> Store {
        Store::open(&StoreConfig {
            dir: dir.to_owned(),
            ..StoreConfig::default()
        })
        .unwrap()
    }

    /// A store in a directory of its own holding bob's TD, registered
    /// through the service of a sidecar on `host`, and closed.
    async fn stored_by_bob(host: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("lmos-tds-{}", uuid::Uuid::new_v4()));
        let store = open(&dir);
        let (before, _bus) = service(&store, host);
        let ticket = {
            let mut d = before.directory();
            d.put_as(Some("bob"), None, WEATHER.as_bytes()).unwrap();
            before.persist(&d, ID).unwrap()
        };
        ticket.durable().await.unwrap();
        store.close();
        drop((before, store));
        dir
    }

    #[tokio::test]
    async fn tds_come_back_for_their_owner_with_forms_for_the_endpoints_of_now() {
        let dir = stored_by_bob("old").await;

        let store = open(&dir);
        let (after, mut bus) = service(&store, "new");
        assert_eq!(after.restore().await.unwrap(), 1);
        {
            let d = after.directory();
            assert_eq!(d.owner_of(ID), Some("bob"));
            assert_eq!(d.usage("bob").0, 1, "on bob's quota");
            let served = d.get(ID).unwrap().to_string();
            assert!(
                served.contains("ws://new:8080/lmos") && !served.contains("old:"),
                "{served}"
            );
        }
        // Published retained on its TD topic again.
        match bus.try_recv() {
            Ok(BusCommand::Publish(p)) => assert!(p.retain && p.topic.ends_with("/td")),
            other => panic!("{other:?}"),
        }
        // Deleted: gone from the store too.
        let ticket = {
            let mut d = after.directory();
            d.delete(ID).unwrap();
            after.persist(&d, ID).unwrap()
        };
        ticket.durable().await.unwrap();
        assert!(store.table(TABLE).load().unwrap().is_empty());
        store.close();
        drop((after, store));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_td_the_directory_refuses_now_is_dropped_from_the_store() {
        let dir = stored_by_bob("h").await;

        // discovery.max_total_td_bytes lowered below it since.
        let store = open(&dir);
        let (after, _bus) = service_within(&store, "h", 100);
        assert_eq!(after.restore().await.unwrap(), 0);
        assert!(after.directory().get(ID).is_none());
        store.barrier().durable().await.unwrap();
        assert!(store.table(TABLE).load().unwrap().is_empty());
        store.close();
        drop((after, store));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
