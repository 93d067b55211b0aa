//! The filters each MQTT session holds, as the broker holds them.
//!
//! rumqttd answers an UNSUBSCRIBE with one UNSUBACK per filter it removed
//! and none for a filter the session does not hold, so a client waiting for
//! its UNSUBACK can hang. The guard therefore answers UNSUBSCRIBE itself
//! and must know what the session holds, across reconnections of a session
//! that is not clean (whose subscriptions rumqttd keeps, as MQTT requires),
//! and counts them against `mqtt.max_subscriptions`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

/// One session's filters, shared by the connections that resume it.
#[derive(Debug, Default)]
pub struct Filters(Mutex<HashSet<String>>);

impl Filters {
    /// The set, even after a panic elsewhere (it holds no invariant a
    /// half-finished insert could break).
    pub fn lock(&self) -> MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Sessions by client ID; only sessions that are not clean outlive their
/// connection, as in the broker.
#[derive(Debug, Default)]
pub struct Sessions {
    by_client: Mutex<HashMap<String, Arc<Filters>>>,
}

impl Sessions {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<Filters>>> {
        self.by_client.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session a CONNECT opens: a clean one starts empty (and ends any
    /// kept under that ID), one that is not clean resumes what was kept.
    /// An empty client ID gets a session of its own that is never kept
    /// (the broker assigns it an ID nobody can resume).
    pub fn open(&self, client_id: &str, clean: bool) -> Arc<Filters> {
        if client_id.is_empty() {
            return Arc::default();
        }
        let mut map = self.map();
        if clean {
            let fresh = Arc::<Filters>::default();
            map.insert(client_id.to_owned(), fresh.clone());
            fresh
        } else {
            map.entry(client_id.to_owned()).or_default().clone()
        }
    }

    /// A connection ended: a clean session is forgotten unless another
    /// connection took the client ID over meanwhile.
    pub fn close(&self, client_id: &str, clean: bool, filters: &Arc<Filters>) {
        if !clean || client_id.is_empty() {
            return;
        }
        let mut map = self.map();
        if map.get(client_id).is_some_and(|f| Arc::ptr_eq(f, filters)) {
            map.remove(client_id);
        }
    }

    /// Sessions currently known (connected, or kept for a client that
    /// will resume).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map().len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_that_is_not_clean_keeps_its_filters() {
        let sessions = Sessions::default();
        let first = sessions.open("c", false);
        first.lock().insert("a/#".into());
        sessions.close("c", false, &first);
        let again = sessions.open("c", false);
        assert!(again.lock().contains("a/#"));
        // A clean connection discards it.
        let clean = sessions.open("c", true);
        assert!(clean.lock().is_empty());
        sessions.close("c", true, &clean);
        assert!(sessions.is_empty());
        assert!(sessions.open("c", false).lock().is_empty());
    }

    #[test]
    fn a_takeover_is_not_undone_by_the_old_connection_ending() {
        let sessions = Sessions::default();
        let old = sessions.open("c", true);
        let new = sessions.open("c", true);
        new.lock().insert("x".into());
        sessions.close("c", true, &old);
        assert_eq!(sessions.len(), 1);
        sessions.close("c", true, &new);
        assert!(sessions.is_empty());
    }

    #[test]
    fn empty_client_ids_are_never_kept() {
        let sessions = Sessions::default();
        let s = sessions.open("", false);
        s.lock().insert("x".into());
        assert!(sessions.is_empty());
        assert!(sessions.open("", false).lock().is_empty());
    }
}
