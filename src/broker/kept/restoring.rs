//! Counting the queue entries restored at start-up (see [`super::budget`]):
//! the router places each restored publication anew, once, however many
//! sessions wait for it; each waiting session's entry is counted where it
//! now sits. The router delivers a restored session everything of a
//! filter from its first entry on, other sessions' publications among its
//! own included: those are the session's gaps.

use std::collections::HashMap;

use bytes::Bytes;
use rumqttd::{Position, RestoredPublication, RestoredSession};

use super::budget::Budget;

/// The restored queue entries, by publication, until all are placed.
pub(super) struct Restoring {
    /// By key: its value's length (as in `mqtt_queued_data`) and the
    /// sessions (indexes into `clients`) waiting for it.
    waiting: HashMap<Bytes, (u64, Vec<u32>)>,
    clients: Vec<String>,
    /// The last offset placed for each (session, filter), and in each
    /// filter: what lies between is others'.
    last: HashMap<(u32, usize), u64>,
    ends: HashMap<usize, u64>,
}

impl Restoring {
    pub(super) fn of(
        sessions: &[RestoredSession],
        publications: &[RestoredPublication],
    ) -> Restoring {
        let mut waiting: HashMap<Bytes, (u64, Vec<u32>)> = publications
            .iter()
            .map(|p| {
                let value = 2 + p.filter.len() + p.packet.len();
                (p.key.clone(), (value as u64, Vec::new()))
            })
            .collect();
        for (i, session) in sessions.iter().enumerate() {
            for key in &session.queued {
                if let Some((_, clients)) = waiting.get_mut(key) {
                    clients.push(i as u32);
                }
            }
        }
        Restoring {
            waiting,
            clients: sessions.iter().map(|s| s.client_id.clone()).collect(),
            last: HashMap::new(),
            ends: HashMap::new(),
        }
    }

    /// The publication `key` is at `position`: each waiting session's
    /// entry counted there (placed in key order, so in order per filter).
    pub(super) fn placed(&mut self, budget: &mut Budget, position: Position, key: &Bytes) {
        let (idx, (_, offset)) = position;
        self.ends.insert(idx, offset);
        let Some((value_len, waiting)) = self.waiting.remove(key) else {
            return;
        };
        for i in waiting {
            let Some(client_id) = self.clients.get(i as usize) else {
                continue;
            };
            let cost = client_id.len() as u64 + 1 + key.len() as u64 + value_len;
            budget.restored(client_id, position, cost);
            if let Some(last) = self.last.insert((i, idx), offset) {
                if offset > last + 1 {
                    budget.gap(client_id, idx, last + 1, offset - 1);
                }
            }
        }
    }

    /// All placed: what follows each session's last entry in a filter is
    /// others'.
    pub(super) fn settle(self, budget: &mut Budget) {
        for ((i, idx), last) in self.last {
            let (Some(&end), Some(client_id)) = (self.ends.get(&idx), self.clients.get(i as usize))
            else {
                continue;
            };
            if end > last {
                budget.gap(client_id, idx, last + 1, end);
            }
        }
    }
}
