//! The remembered invocations (finished, or whose agent went silent), per
//! principal (issue 43): what `queryAction`, the HTTP binding's status
//! resource and A2A's `tasks/get` answer from, and what is on disk.
//!
//! One sidecar-wide queue let one principal's flood of instant invocations
//! push out everyone else's results. Here each principal has its own queue,
//! oldest first, and two rules decide what is forgotten when one more is
//! remembered:
//! - past its share (`quotas.finished_invocations`, per principal), the
//!   principal's own oldest;
//! - past the sidecar-wide cap (`requests.finished_invocations`), the oldest
//!   of the principal holding the most (the one that just added, on a tie).
//!
//! So a principal only ever pushes out another's while that one holds at
//! least as many as it does. Each step is O(log p) for p principals holding
//! some: a queue per principal and an ordered index of their counts.
//!
//! No I/O: the router forgets what [`Finished::pop_victim`] names (and its
//! record on disk with it).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

#[derive(Debug, Default)]
pub(super) struct Finished {
    /// Each remembered route and whose it is.
    whose: HashMap<String, Arc<str>>,
    /// Each principal's routes, oldest first.
    by: HashMap<Arc<str>, VecDeque<String>>,
    /// (how many, whose) of every principal holding some: the last one
    /// holds the most.
    counts: BTreeSet<(usize, Arc<str>)>,
}

impl Finished {
    /// How many are remembered, over all principals.
    pub fn len(&self) -> usize {
        self.whose.len()
    }

    /// How many `principal` has remembered.
    pub fn held_by(&self, principal: &str) -> usize {
        self.by.get(principal).map_or(0, VecDeque::len)
    }

    /// Remembers `route` as `principal`'s newest (once).
    pub fn push(&mut self, principal: &Arc<str>, route: &str) {
        if self.whose.contains_key(route) {
            return;
        }
        self.whose.insert(route.to_owned(), principal.clone());
        let queue = self.by.entry(principal.clone()).or_default();
        let was = queue.len();
        queue.push_back(route.to_owned());
        self.recount(principal, was, was + 1);
    }

    /// Forgets `route`, wherever it is in its principal's queue (mostly the
    /// front: retention ends oldest first). False if it was not there.
    pub fn remove(&mut self, route: &str) -> bool {
        let Some(principal) = self.whose.remove(route) else {
            return false;
        };
        let Some(queue) = self.by.get_mut(&principal) else {
            return true;
        };
        let was = queue.len();
        if queue.front().is_some_and(|r| r == route) {
            queue.pop_front();
        } else if queue.back().is_some_and(|r| r == route) {
            queue.pop_back();
        } else if let Some(at) = queue.iter().position(|r| r == route) {
            queue.remove(at);
        }
        let now = queue.len();
        self.recount(&principal, was, now);
        true
    }

    /// The route to forget, taken out, after `principal` added one: its own
    /// oldest past its `share`, else, past `limit` in all, the oldest of
    /// whoever holds the most. None once both hold.
    pub fn pop_victim(
        &mut self,
        principal: &Arc<str>,
        share: Option<u64>,
        limit: usize,
    ) -> Option<String> {
        let own = self.held_by(principal);
        let over_share = share.is_some_and(|s| own as u64 > s);
        let whose = if over_share {
            principal.clone()
        } else if self.len() > limit {
            match self.counts.last() {
                Some((most, _)) if *most == own => principal.clone(),
                Some((_, most)) => most.clone(),
                None => return None,
            }
        } else {
            return None;
        };
        let route = self.by.get(&whose)?.front()?.clone();
        self.remove(&route);
        Some(route)
    }

    /// Keeps the count index in step with a principal's queue length.
    fn recount(&mut self, principal: &Arc<str>, was: usize, now: usize) {
        if was == now {
            return;
        }
        if was > 0 {
            self.counts.remove(&(was, principal.clone()));
        }
        if now > 0 {
            self.counts.insert((now, principal.clone()));
        } else {
            self.by.remove(principal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `who` adds `n` (named `{who}-{i}`, numbered on from those it
    /// holds); what is forgotten, in order.
    fn fill(
        f: &mut Finished,
        who: &Arc<str>,
        n: usize,
        share: Option<u64>,
        limit: usize,
    ) -> Vec<String> {
        let mut forgotten = Vec::new();
        let from = f.held_by(who);
        for i in from..from + n {
            f.push(who, &format!("{who}-{i}"));
            while let Some(old) = f.pop_victim(who, share, limit) {
                forgotten.push(old);
            }
        }
        forgotten
    }

    #[test]
    fn a_principal_past_its_share_forgets_its_own_oldest() {
        let mut f = Finished::default();
        let (alice, bob): (Arc<str>, Arc<str>) = ("alice".into(), "bob".into());
        assert!(fill(&mut f, &alice, 1, Some(3), 100).is_empty());
        let forgotten = fill(&mut f, &bob, 5, Some(3), 100);
        assert_eq!(forgotten, ["bob-0", "bob-1"]);
        assert_eq!((f.held_by("alice"), f.held_by("bob"), f.len()), (1, 3, 4));
    }

    #[test]
    fn past_the_cap_the_one_holding_most_forgets_its_oldest() {
        let mut f = Finished::default();
        let (alice, bob, carol): (Arc<str>, Arc<str>, Arc<str>) =
            ("alice".into(), "bob".into(), "carol".into());
        fill(&mut f, &alice, 2, None, 10);
        // Bob's 1 001 fill the cap with his own; Alice keeps hers.
        let forgotten = fill(&mut f, &bob, 1_001, None, 10);
        assert_eq!(forgotten.len(), 1_001 - 8);
        assert!(forgotten.iter().all(|r| r.starts_with("bob-")));
        assert_eq!(forgotten[0], "bob-0");
        assert_eq!((f.held_by("alice"), f.held_by("bob")), (2, 8));
        // Carol, holding fewer, pushes out Bob's, who holds the most.
        let forgotten = fill(&mut f, &carol, 3, None, 10);
        assert_eq!(forgotten, ["bob-993", "bob-994", "bob-995"]);
        // On a tie the one adding forgets its own.
        let mut tie = Finished::default();
        fill(&mut tie, &alice, 2, None, 4);
        fill(&mut tie, &bob, 2, None, 4);
        assert_eq!(fill(&mut tie, &alice, 1, None, 4), ["alice-0"]);
    }

    #[test]
    fn removing_keeps_counts_and_the_index_in_step() {
        let mut f = Finished::default();
        let bob: Arc<str> = "bob".into();
        fill(&mut f, &bob, 3, None, 10);
        f.push(&bob, "bob-1");
        assert_eq!(f.len(), 3, "remembered once");
        assert_eq!(f.held_by("bob"), 3);
        assert!(f.remove("bob-1") && !f.remove("bob-1"));
        assert!(f.remove("bob-0") && f.remove("bob-2"));
        assert_eq!(f.len(), 0);
        assert!(f.by.is_empty() && f.counts.is_empty());
        assert_eq!(f.pop_victim(&bob, Some(0), 0), None);
    }
}
