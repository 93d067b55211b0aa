//! The directory as a service: the registry behind a lock, plus the
//! publication of every change: the TD retained on `{prefix}/{thing}/td`
//! (cleared on removal) and an LMOS `event` (`thingCreated`,
//! `thingUpdated`, `thingDeleted`) on the sidecar's own Thing.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tracing::{info, warn};

use super::{Directory, Registered};
use crate::broker::{Bus, Publication};
use crate::lmos::{now_timestamp, Body, Message};
use crate::topics::Topics;

const TD_JSON: &str = "application/td+json";

/// The directory and what a change must reach.
#[derive(Clone)]
pub struct DirectoryService {
    directory: Arc<Mutex<Directory>>,
    pub(super) bus: Bus,
    pub(super) topics: Topics,
    /// The sidecar's own thingID: its directory events are its events.
    sidecar: String,
    /// The sidecar's directory description, served at `/.well-known/wot`.
    description: Arc<Value>,
    /// Where TDs registered over HTTP are kept across a restart
    /// (`durable.rs`), when the store is durable.
    pub(super) tds: Option<crate::store::Table>,
}

impl DirectoryService {
    pub fn new(
        directory: Directory,
        bus: Bus,
        topics: Topics,
        sidecar: String,
        http_base: &str,
    ) -> DirectoryService {
        let mut description = json!({
            "@context": "https://www.w3.org/2022/wot/td/v1.1",
            "@type": "ThingDirectory",
            "id": sidecar,
            "title": "lmos-sidecar Thing Description directory",
            "base": http_base,
            "properties": {
                "things": {
                    "description": "The registered Thing Descriptions; ?offset and ?limit page through them.",
                    "readOnly": true,
                    "type": "array",
                    "forms": [{"href": "/things", "htv:methodName": "GET", "contentType": "application/ld+json"}]
                }
            },
            "actions": {
                "createThing": {"forms": [{"href": "/things/{id}", "htv:methodName": "PUT", "contentType": TD_JSON}]},
                "createAnonymousThing": {"forms": [{"href": "/things", "htv:methodName": "POST", "contentType": TD_JSON}]},
                "retrieveThing": {"safe": true, "forms": [{"href": "/things/{id}", "htv:methodName": "GET"}]},
                "updateThing": {"forms": [{"href": "/things/{id}", "htv:methodName": "PUT", "contentType": TD_JSON}]},
                "partiallyUpdateThing": {"forms": [{"href": "/things/{id}", "htv:methodName": "PATCH", "contentType": "application/merge-patch+json"}]},
                "deleteThing": {"forms": [{"href": "/things/{id}", "htv:methodName": "DELETE"}]}
            },
            "events": {
                "thingCreated": {"data": {"type": "object"}},
                "thingUpdated": {"data": {"type": "object"}},
                "thingDeleted": {"data": {"type": "object"}}
            }
        });
        // Security and event forms as every other TD the sidecar serves.
        super::forms::directory(&mut description, directory.endpoints());
        DirectoryService {
            directory: Arc::new(Mutex::new(directory)),
            bus,
            topics,
            sidecar,
            description: Arc::new(description),
            tds: None,
        }
    }

    /// The registry; hold the guard briefly and never across an await.
    pub fn directory(&self) -> std::sync::MutexGuard<'_, Directory> {
        // A panic while holding the lock leaves a consistent map (every
        // change is one insert or remove), so a poisoned lock is still usable.
        self.directory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sidecar's directory description (`/.well-known/wot`).
    pub fn description(&self) -> &Value {
        &self.description
    }

    /// Registers a TD from a file at start-up.
    pub async fn register_file(&self, path: &std::path::Path) -> Result<String, String> {
        let text =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let result = self.directory().put(None, &text);
        let (registered, td) = result.map_err(|e| format!("{}: {e}", path.display()))?;
        let id = td["id"].as_str().unwrap_or_default().to_owned();
        self.announce(&id, Some(&td), registered).await;
        Ok(id)
    }

    /// A TD seen on the bus, registered elsewhere (see [`Directory::learn`]).
    /// Not announced again: whoever published it did.
    pub fn learn(&self, id: &str, payload: &[u8]) {
        let result = self.directory().learn(id, payload);
        match result {
            Ok(true) if payload.is_empty() => {
                info!(thing = %id, change = "withdrawn", "Directory changed.")
            }
            Ok(true) => info!(thing = %id, change = "learnt", "Directory changed."),
            Ok(false) => {}
            // Logged once by the directory until there is room again.
            Err(super::DirectoryError::Full { .. }) => {}
            Err(e) => {
                warn!(thing = %id, error = %e, "Ignored a Thing Description published on the bus.")
            }
        }
    }

    /// Publishes a change: the retained TD (or its removal) and an event.
    pub async fn announce(&self, id: &str, td: Option<&Value>, registered: Registered) {
        let retained = td.map(Value::to_string).unwrap_or_default();
        let event = match (td, registered) {
            (None, _) => "thingDeleted",
            (Some(_), Registered::Created) => "thingCreated",
            (Some(_), Registered::Updated) => "thingUpdated",
        };
        info!(thing = %id, change = event, "Directory changed.");
        let message = Message::new(
            self.sidecar.clone(),
            Body::Event {
                event: event.to_owned(),
                data: json!({ "id": id }),
                timestamp: now_timestamp(),
            },
        );
        let publications = [
            Publication::new(self.topics.td(id), retained, true),
            Publication::new(
                self.topics.event(&self.sidecar, event),
                message.to_json(),
                false,
            ),
        ];
        for p in publications {
            if self.bus.publish(p).await.is_err() {
                warn!("The message bus closed; a directory change was not published.");
            }
        }
    }
}
