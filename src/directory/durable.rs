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
            let result = match serde_json::from_slice::<Stored>(&value) {
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
