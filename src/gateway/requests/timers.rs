//! Time and memory: reply, cancel and retention timers, what happens when
//! one fires, and how requests are remembered and forgotten.

use std::sync::Arc;
use std::time::Duration;

use super::{Asked, Effect, Kind, Requests, Timer};
use crate::lmos::{Problem, ProblemKind};
use crate::quotas::Quota;

impl Requests {
    pub(super) fn arm(&mut self, timer: Timer, after: Duration) {
        self.disarm(&timer);
        let key = self.timers.insert(timer.clone(), after);
        self.timer_keys.insert(timer, key);
    }

    pub(super) fn disarm(&mut self, timer: &Timer) {
        if let Some(key) = self.timer_keys.remove(timer) {
            self.timers.remove(&key);
        }
    }

    /// Waits for the next request to time out.
    pub async fn next_timeout(&mut self) -> Option<Vec<Effect>> {
        let expired = std::future::poll_fn(|cx| self.timers.poll_expired(cx)).await?;
        let timer = expired.into_inner();
        self.timer_keys.remove(&timer);
        Some(self.expire(timer))
    }

    /// Whether any request is waiting on a timer.
    pub fn has_timers(&self) -> bool {
        !self.timer_keys.is_empty()
    }

    pub(super) fn expire(&mut self, timer: Timer) -> Vec<Effect> {
        let (route, waiters) = match &timer {
            Timer::Reply(route) => {
                let Some(p) = self.routes.get(route) else {
                    return Vec::new();
                };
                let detail = if let Some(invocation) = p.asked.invocation() {
                    format!(
                        "The agent hosting `{}` sent no status of this invocation for {} ms (requests.action_liveness_ms, or the action's own). It is still remembered: a status that comes later reaches you, its status topic and queryAction.",
                        p.thing,
                        invocation.liveness.as_millis()
                    )
                } else {
                    format!(
                        "The agent hosting `{}` did not answer within {} ms (requests.timeout_ms).",
                        p.thing,
                        self.timeout.as_millis()
                    )
                };
                let m = p.speak(
                    Problem::new(ProblemKind::Timeout, detail)
                        .to_message(&p.thing, Some(&p.correlation)),
                );
                let effects = p.to_all(&m.to_json());
                let route = route.clone();
                if p.asked.kind() == Kind::Invocation {
                    // No late answer is dropped: the invocation stays, among
                    // the remembered ones (bounded), listening.
                    self.remember(&route);
                    self.persist(&route);
                } else {
                    self.forget(&route);
                }
                return effects;
            }
            Timer::Retain(route) => {
                let route = route.clone();
                self.forget(&route);
                return Vec::new();
            }
            Timer::Cancel(route) => {
                match self
                    .routes
                    .get_mut(route)
                    .and_then(|p| p.asked.invocation_mut())
                {
                    Some(i) => (route.clone(), std::mem::take(&mut i.cancel_waiters)),
                    None => return Vec::new(),
                }
            }
        };
        let Some(p) = self.routes.get(&route) else {
            return Vec::new();
        };
        waiters
            .into_iter()
            .map(|(c, w)| {
                let detail = format!(
                    "The agent hosting `{}` did not answer the cancelAction within {} ms; the invocation may still be running.",
                    p.thing,
                    self.timeout.as_millis()
                );
                let m = p.speak(Problem::new(ProblemKind::Timeout, detail).to_message(&p.thing, Some(&w)));
                Effect::ToConsumer(c, m.to_json())
            })
            .collect()
    }

    /// Keeps a finished invocation for queries, within the limit and for
    /// the retention (from its end).
    pub(super) fn finish(&mut self, route: &str) {
        self.inputs.remove(route);
        self.disarm(&Timer::Reply(route.to_owned()));
        if let Some(p) = self.routes.get_mut(route) {
            p.finished = true;
            if let Some(invocation) = p.asked.invocation_mut() {
                invocation.watchers.clear();
            }
        }
        self.remember(route);
        self.arm(Timer::Retain(route.to_owned()), self.retention);
        self.persist(route);
    }

    /// Puts a request among the remembered ones (once), forgetting what
    /// is past its principal's share or the limit (`finished.rs`).
    pub(super) fn remember(&mut self, route: &str) {
        let stopped = match self.routes.get_mut(route) {
            Some(p) if !p.remembered => {
                p.remembered = true;
                (p.asked.kind(), p.principal.clone())
            }
            _ => return,
        };
        self.stops_waiting(stopped.0, &stopped.1);
        self.arm(Timer::Retain(route.to_owned()), self.retention);
        self.keep_finished(&stopped.1, route);
    }

    /// Counts `route` among `principal`'s remembered invocations and
    /// forgets those past its share or the sidecar-wide limit.
    pub(super) fn keep_finished(&mut self, principal: &Arc<str>, route: &str) {
        self.finished.push(principal, route);
        let share = self
            .quotas
            .limit(principal, Quota::FinishedInvocations)
            .map(|(share, _)| share);
        while let Some(old) = self
            .finished
            .pop_victim(principal, share, self.finished_limit)
        {
            self.forget(&old);
        }
    }

    /// Forgets a request, its record on disk included.
    pub(super) fn forget(&mut self, route: &str) {
        if self
            .routes
            .get(route)
            .is_some_and(|p| p.asked.kind() == Kind::Invocation)
        {
            self.unpersist(route);
        }
        self.forget_in_memory(route);
    }

    /// Forgets a request here only: an invocation's record stays on disk
    /// (the sidecar is stopping; see `records.rs`).
    pub(super) fn forget_in_memory(&mut self, route: &str) {
        self.inputs.remove(route);
        self.drop_credit(route);
        self.disarm(&Timer::Reply(route.to_owned()));
        self.disarm(&Timer::Cancel(route.to_owned()));
        self.disarm(&Timer::Retain(route.to_owned()));
        self.finished.remove(route);
        let Some(p) = self.routes.remove(route) else {
            return;
        };
        if !p.remembered {
            self.stops_waiting(p.asked.kind(), &p.principal);
        }
        // Only invocations are named (`remember_invocation`).
        let Asked::Invocation(invocation) = p.asked else {
            return;
        };
        for key in std::iter::once(p.consumer.key()).chain(invocation.owner) {
            let named = (key, p.correlation.clone());
            if self.invocations.get(&named).map(String::as_str) == Some(route) {
                self.invocations.remove(&named);
            }
            let latest = (named.0, invocation.action.clone());
            if self.latest_invocation.get(&latest).map(String::as_str) == Some(route) {
                self.latest_invocation.remove(&latest);
            }
        }
    }
}
