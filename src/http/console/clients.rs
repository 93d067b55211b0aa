//! WebSocket connections by principal, for the console. Counted where the
//! HTTP port upgrades a connection (it knows the principal); an entry per
//! principal connected now, so the map is bounded by the configured
//! principals (plus `anonymous`), never by clients.
//!
//! The authorization model has no right to see other principals, so the
//! console shows each caller its own connections only (with totals by
//! transport for everyone).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Default)]
pub struct Clients(Arc<Mutex<HashMap<String, usize>>>);

/// Held for as long as the connection lives; dropping it counts it out.
#[derive(Debug)]
pub struct Connected {
    clients: Clients,
    principal: String,
}

impl Clients {
    pub fn enter(&self, principal: &str) -> Connected {
        *self
            .0
            .lock()
            .expect("the clients lock is never poisoned")
            .entry(principal.to_owned())
            .or_default() += 1;
        Connected {
            clients: self.clone(),
            principal: principal.to_owned(),
        }
    }

    /// Every principal's open WebSocket connections, by name.
    pub fn all(&self) -> Vec<(String, usize)> {
        let map = self.0.lock().expect("the clients lock is never poisoned");
        let mut all: Vec<(String, usize)> = map.iter().map(|(k, v)| (k.clone(), *v)).collect();
        all.sort();
        all
    }

    /// The principal's open WebSocket connections.
    pub fn of(&self, principal: &str) -> usize {
        let map = self.0.lock().expect("the clients lock is never poisoned");
        map.get(principal).copied().unwrap_or(0)
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        let mut map = self
            .clients
            .0
            .lock()
            .expect("the clients lock is never poisoned");
        if let Some(n) = map.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.principal);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_while_held_and_forgotten_after() {
        let c = Clients::default();
        let a = c.enter("operator");
        let b = c.enter("operator");
        let _v = c.enter("viewer");
        assert_eq!(c.of("operator"), 2);
        drop(a);
        drop(b);
        assert_eq!(c.of("operator"), 0);
        assert_eq!(c.0.lock().unwrap().len(), 1, "no entry left behind");
        assert_eq!(c.of("viewer"), 1);
    }
}
