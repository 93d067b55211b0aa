//! Ends: the sidecar stopping, a WebSocket connection closing.

use super::{Consumer, Effect, Host, Requests};
use crate::gateway::subscriptions::ConnId;
use crate::lmos::{Body, Message, Problem, ProblemKind};

impl Requests {
    /// The sidecar is stopping: every request still waiting is answered with
    /// a 503, so no consumer waits for an answer that will never come.
    pub fn shutdown(&mut self) -> Vec<Effect> {
        let waiting: Vec<String> = self
            .routes
            .iter()
            .filter(|(_, p)| !p.finished)
            .map(|(r, _)| r.clone())
            .collect();
        let mut effects = Vec::new();
        for route in waiting {
            let Some(p) = self.routes.get(&route) else {
                continue;
            };
            let detail = format!(
                "The sidecar is shutting down; the request to `{}` was not answered.",
                p.thing
            );
            let message = p.speak(
                Problem::new(ProblemKind::Unavailable, detail)
                    .to_message(&p.thing, Some(&p.correlation)),
            );
            effects.push(Effect::ToConsumer(p.consumer.clone(), message.to_json()));
            // A running invocation's record stays: after a restart it is
            // answered as failed (see `records.rs`).
            self.forget_in_memory(&route);
        }
        effects
    }

    /// A WebSocket connection closed: as a consumer, its property requests
    /// are forgotten, while its invocations stay, owned by its principal
    /// (cancelled at the agent only if it asked for that); as an agent, what
    /// waits on it fails.
    pub fn connection_gone(&mut self, conn: ConnId) -> Vec<Effect> {
        let mut effects = Vec::new();
        let hosted: Vec<String> = self
            .hosts
            .iter()
            .filter(|(_, h)| **h == Host::WebSocket(conn))
            .map(|(t, _)| t.clone())
            .collect();
        if !hosted.is_empty() {
            self.foreign.agent_gone(conn);
        }
        for thing in hosted {
            self.hosts.remove(&thing);
            effects.push(Effect::Unsubscribe(
                self.topics.agent_requests_filter(&thing),
            ));
            effects.push(self.presence(&thing, false));
            effects.extend(self.host_gone(&thing));
        }
        let gone = Consumer::WebSocket(conn);
        for invocation in self
            .routes
            .values_mut()
            .filter_map(|p| p.asked.invocation_mut())
        {
            invocation.watchers.retain(|w| *w != gone);
        }
        let mine: Vec<String> = self
            .routes
            .iter()
            .filter(|(_, p)| p.consumer == gone)
            .filter(|(_, p)| match p.asked.invocation() {
                Some(invocation) => invocation.cancel_on_disconnect && !p.finished,
                None => true,
            })
            .map(|(r, _)| r.clone())
            .collect();
        self.owners.remove(&conn);
        for route in mine {
            let Some(p) = self.routes.get(&route) else {
                continue;
            };
            if let Some(action) = p.asked.action() {
                if let Some(host) = self.hosts.get(&p.thing).copied() {
                    let cancel = Message::new(
                        p.thing.clone(),
                        Body::CancelAction {
                            action: action.to_owned(),
                            reason: Some("The consumer disconnected.".into()),
                        },
                    )
                    .with_correlation_id(route.clone());
                    effects.push(self.to_host(
                        host,
                        &p.thing.clone(),
                        "cancelAction",
                        cancel.to_json(),
                    ));
                }
            }
            self.forget(&route);
        }
        effects
    }
}
