//! The A2A tasks the face keeps: per principal and Thing, bounded in all
//! and per principal, forgotten when not updated for `a2a.task_ttl_ms`.
//! Each task is kept in A2A 1.0's JSON (0.3 clients get it converted on
//! the way out) with a broadcast of its stream events, so a second stream
//! (`SubscribeToTask`) sees what the first does.
//!
//! No I/O: the invocation driver (`send.rs`) feeds it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::broadcast;

/// Events a subscriber may fall behind by before it loses its stream
/// (it then ends; `GetTask` still answers).
const EVENTS: usize = 256;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max: usize,
    pub per_principal: usize,
    pub ttl: Duration,
}

/// Why a task could not be kept.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Full {
    #[error("too many A2A tasks still running for this caller (a2a.max_tasks_per_principal = {0}); try again when some have ended")]
    Principal(usize),
    #[error(
        "too many A2A tasks still running (a2a.max_tasks = {0}); try again when some have ended"
    )]
    All(usize),
}

/// Who owns a task and what it invokes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub principal: String,
    pub thing: String,
}

struct Entry {
    owner: Owner,
    action: String,
    /// The correlation ID of the invokeAction now serving the task (a
    /// continued input-required task has a new one).
    invocation: String,
    task: Value,
    /// Order of last update, for ListTasks (newest first) and eviction.
    seq: u64,
    touched: Instant,
    events: broadcast::Sender<Value>,
}

/// What a caller learns of a kept task.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub task: Value,
    pub action: String,
    pub invocation: String,
    pub seq: u64,
}

pub struct Tasks {
    limits: Limits,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    tasks: HashMap<String, Entry>,
    seq: u64,
}

/// Whether an A2A 1.0 state is final: nothing more will happen to the task.
pub fn is_terminal(state: &str) -> bool {
    matches!(
        state,
        "TASK_STATE_COMPLETED"
            | "TASK_STATE_FAILED"
            | "TASK_STATE_CANCELED"
            | "TASK_STATE_REJECTED"
    )
}

/// Whether the task waits for its client (input or authentication).
pub fn is_interrupted(state: &str) -> bool {
    matches!(
        state,
        "TASK_STATE_INPUT_REQUIRED" | "TASK_STATE_AUTH_REQUIRED"
    )
}

pub fn state_of(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

impl Tasks {
    pub fn new(limits: Limits) -> Tasks {
        Tasks {
            limits,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps a new task; the receiver sees every event after it.
    pub fn insert(
        &self,
        owner: Owner,
        action: &str,
        invocation: &str,
        task: Value,
    ) -> Result<broadcast::Receiver<Value>, Full> {
        let mut inner = self.lock();
        inner.expire(self.limits.ttl);
        let mine = |e: &Entry| e.owner.principal == owner.principal;
        if inner.tasks.values().filter(|e| mine(e)).count() >= self.limits.per_principal
            && !inner.evict(mine)
        {
            return Err(Full::Principal(self.limits.per_principal));
        }
        if inner.tasks.len() >= self.limits.max && !inner.evict(|_| true) {
            return Err(Full::All(self.limits.max));
        }
        let id = task["id"].as_str().unwrap_or_default().to_owned();
        let (events, receiver) = broadcast::channel(EVENTS);
        inner.seq += 1;
        let entry = Entry {
            owner,
            action: action.to_owned(),
            invocation: invocation.to_owned(),
            task,
            seq: inner.seq,
            touched: Instant::now(),
            events,
        };
        inner.tasks.insert(id, entry);
        Ok(receiver)
    }

    /// The task, if `owner` has it (another's, expired or unknown alike).
    pub fn get(&self, owner: &Owner, id: &str) -> Option<Snapshot> {
        let mut inner = self.lock();
        inner.expire(self.limits.ttl);
        inner.tasks.get(id).filter(|e| &e.owner == owner).map(snap)
    }

    /// The task and its events from now on.
    pub fn subscribe(
        &self,
        owner: &Owner,
        id: &str,
    ) -> Option<(Snapshot, broadcast::Receiver<Value>)> {
        let mut inner = self.lock();
        inner.expire(self.limits.ttl);
        let e = inner.tasks.get(id).filter(|e| &e.owner == owner)?;
        Some((snap(e), e.events.subscribe()))
    }

    /// Changes the task and sends `events` to its streams, in one step so
    /// a new subscriber sees either the old task and these events or the
    /// new task alone. False when the task is gone.
    pub fn update(&self, id: &str, change: impl FnOnce(&mut Value) -> Vec<Value>) -> bool {
        let mut inner = self.lock();
        inner.seq += 1;
        let seq = inner.seq;
        let Some(e) = inner.tasks.get_mut(id) else {
            return false;
        };
        for event in change(&mut e.task) {
            // No receiver is no error: nobody streams this task now.
            let _ = e.events.send(event);
        }
        e.seq = seq;
        e.touched = Instant::now();
        true
    }

    /// Forgets a task the agent never got (its invocation was refused).
    pub fn remove(&self, id: &str) {
        self.lock().tasks.remove(id);
    }

    /// A continued task's new invocation.
    pub fn set_invocation(&self, id: &str, invocation: &str) {
        if let Some(e) = self.lock().tasks.get_mut(id) {
            e.invocation = invocation.to_owned();
        }
    }

    /// `owner`'s tasks, newest update first.
    pub fn list(&self, owner: &Owner) -> Vec<Snapshot> {
        let mut inner = self.lock();
        inner.expire(self.limits.ttl);
        let mut all: Vec<Snapshot> = inner
            .tasks
            .values()
            .filter(|e| &e.owner == owner)
            .map(snap)
            .collect();
        all.sort_by_key(|s| std::cmp::Reverse(s.seq));
        all
    }
}

fn snap(e: &Entry) -> Snapshot {
    Snapshot {
        task: e.task.clone(),
        action: e.action.clone(),
        invocation: e.invocation.clone(),
        seq: e.seq,
    }
}

impl Inner {
    fn expire(&mut self, ttl: Duration) {
        self.tasks.retain(|_, e| e.touched.elapsed() < ttl);
    }

    /// Forgets the least recently updated finished task among `which`;
    /// false when all of them still run (or wait for their client).
    fn evict(&mut self, which: impl Fn(&Entry) -> bool) -> bool {
        let oldest = self
            .tasks
            .iter()
            .filter(|(_, e)| which(e) && is_terminal(state_of(&e.task)))
            .min_by_key(|(_, e)| e.seq)
            .map(|(id, _)| id.clone());
        match oldest {
            Some(id) => self.tasks.remove(&id).is_some(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owner(p: &str) -> Owner {
        Owner {
            principal: p.into(),
            thing: "t".into(),
        }
    }

    fn task(id: &str, state: &str) -> Value {
        json!({"id": id, "contextId": "c", "status": {"state": state}})
    }

    #[test]
    fn a_principal_sees_only_its_own_tasks_and_the_bounds_hold() {
        let tasks = Tasks::new(Limits {
            max: 3,
            per_principal: 2,
            ttl: Duration::from_secs(60),
        });
        let working = "TASK_STATE_WORKING";
        tasks
            .insert(owner("a"), "x", "i1", task("1", working))
            .unwrap();
        tasks
            .insert(owner("a"), "x", "i2", task("2", working))
            .unwrap();
        assert_eq!(
            tasks
                .insert(owner("a"), "x", "i3", task("3", working))
                .unwrap_err(),
            Full::Principal(2)
        );
        assert!(tasks.get(&owner("b"), "1").is_none());
        assert!(tasks.get(&owner("a"), "1").is_some());
        // A finished task makes room; the newest update lists first.
        tasks.update("1", |t| {
            t["status"]["state"] = "TASK_STATE_COMPLETED".into();
            vec![]
        });
        tasks.update("2", |_| vec![]);
        tasks
            .insert(owner("a"), "x", "i3", task("3", working))
            .unwrap();
        assert!(tasks.get(&owner("a"), "1").is_none());
        let ids: Vec<Value> = tasks
            .list(&owner("a"))
            .into_iter()
            .map(|s| s.task["id"].clone())
            .collect();
        assert_eq!(ids, vec![json!("3"), json!("2")]);
        tasks
            .insert(owner("b"), "x", "i4", task("4", working))
            .unwrap();
        assert_eq!(
            tasks
                .insert(owner("c"), "x", "i5", task("5", working))
                .unwrap_err(),
            Full::All(3)
        );
    }

    #[test]
    fn tasks_expire_and_subscribers_get_the_events() {
        let tasks = Tasks::new(Limits {
            max: 3,
            per_principal: 3,
            ttl: Duration::ZERO,
        });
        tasks.insert(owner("a"), "x", "i", task("1", "x")).unwrap();
        assert!(tasks.get(&owner("a"), "1").is_none());
        let tasks = Tasks::new(Limits {
            max: 3,
            per_principal: 3,
            ttl: Duration::from_secs(60),
        });
        tasks.insert(owner("a"), "x", "i", task("1", "x")).unwrap();
        let (_, mut rx) = tasks.subscribe(&owner("a"), "1").unwrap();
        tasks.update("1", |_| vec![json!(1)]);
        assert_eq!(rx.try_recv().unwrap(), json!(1));
    }
}
