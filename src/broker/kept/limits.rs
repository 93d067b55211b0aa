//! What the keeper's budget is given: the bounds of kept sessions'
//! queues, and whose each session is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::quotas::Quotas;
use crate::telemetry::metrics::Metrics;

/// Client ID → the principal of each session the broker keeps, as the
/// guard knows it at CONNECT (and from the store at start-up), for the
/// keeper to charge. Read by the router's thread once per new session.
#[derive(Debug, Clone, Default)]
pub struct Owners(Arc<Mutex<HashMap<String, Arc<str>>>>);

impl Owners {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<str>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `client_id`'s session is kept and `owner`'s.
    pub fn set(&self, client_id: &str, owner: &Arc<str>) {
        let mut owners = self.lock();
        match owners.get_mut(client_id) {
            Some(known) if Arc::ptr_eq(known, owner) || **known == **owner => {}
            Some(known) => *known = owner.clone(),
            None => {
                owners.insert(client_id.to_owned(), owner.clone());
            }
        }
    }

    /// `client_id`'s session is kept no more.
    pub fn forget(&self, client_id: &str) {
        self.lock().remove(client_id);
    }

    pub(super) fn get(&self, client_id: &str) -> Option<Arc<str>> {
        self.lock().get(client_id).cloned()
    }
}

/// The bounds and where to count.
pub struct Limits {
    /// `mqtt.max_queued_bytes_per_session`.
    pub per_session: u64,
    /// `mqtt.max_queued_bytes`.
    pub total: u64,
    /// `[quotas] queued_bytes`, per principal.
    pub quotas: Arc<Quotas>,
    pub owners: Owners,
    pub metrics: Metrics,
}
