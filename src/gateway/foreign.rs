//! Requests routed by other sidecars to an agent connected here.
//!
//! With a cluster, a consumer's request is routed once, by the consumer's own
//! sidecar: it names the request by a route (a fresh UUID as its
//! `correlationID`) and publishes it on `{prefix}/{thing}/agent/requests/…`,
//! which the cluster bridge carries to the sidecar of the agent. When that
//! agent is a WebSocket client, this sidecar hands it the request as it came
//! and must later know that the agent's answers, carrying that route, belong
//! on `{prefix}/{thing}/agent/replies` (for the router that asked) rather
//! than being published as the agent's own messages. That is all this keeps:
//! route → (Thing, agent, whether more answers follow).
//!
//! No I/O here.

use std::collections::{HashMap, VecDeque};

use super::subscriptions::ConnId;
use crate::lmos::{Body, Message};

/// Routes remembered at most; past it the oldest is forgotten (its later
/// answers are then published as the agent's own messages, as without a
/// cluster). Invocations that never end would otherwise grow it for good.
pub const FOREIGN_LIMIT: usize = 100_000;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Route {
    thing: String,
    agent: ConnId,
    /// An invocation: its statuses follow until a terminal one.
    invocation: bool,
}

#[derive(Debug, Default)]
pub struct ForeignRoutes {
    routes: HashMap<String, Route>,
    /// Insertion order, for the limit; may hold routes already gone.
    order: VecDeque<String>,
}

impl ForeignRoutes {
    /// A request from another sidecar's router for `thing`, hosted here by
    /// `agent`. `false` when it carries no route to answer by.
    pub fn admit(&mut self, thing: &str, agent: ConnId, message: &Message) -> bool {
        let Some(route) = message.correlation_id.as_deref() else {
            return false;
        };
        if let Body::CancelAction { .. } | Body::ActionInput { .. } = message.body {
            // Names a running invocation; the answer to a cancel is its
            // final status, input chunks get none.
            return self.routes.contains_key(route);
        }
        let invocation = matches!(message.body, Body::InvokeAction { .. });
        let fresh = self
            .routes
            .insert(
                route.to_owned(),
                Route {
                    thing: thing.to_owned(),
                    agent,
                    invocation,
                },
            )
            .is_none();
        if fresh {
            self.order.push_back(route.to_owned());
        }
        while self.order.len() > FOREIGN_LIMIT {
            if let Some(old) = self.order.pop_front() {
                self.routes.remove(&old);
            }
        }
        true
    }

    /// Whether the agent's message answers a foreign route of its Thing;
    /// forgets the route when nothing more will follow.
    pub fn answer(&mut self, thing: &str, agent: ConnId, message: &Message) -> bool {
        let Some(route) = message.correlation_id.as_deref() else {
            return false;
        };
        let Some(r) = self.routes.get(route) else {
            return false;
        };
        if r.thing != thing || r.agent != agent {
            return false;
        }
        let last = match &message.body {
            Body::ActionStatus { status, .. } if r.invocation => crate::lmos::is_terminal(status),
            _ => true,
        };
        if last {
            self.routes.remove(route);
        }
        true
    }

    /// The agent left: its routes are answered by the other sidecars, which
    /// see its presence go offline.
    pub fn agent_gone(&mut self, agent: ConnId) {
        self.routes.retain(|_, r| r.agent != agent);
        let routes = &self.routes;
        self.order.retain(|route| routes.contains_key(route));
    }

    pub fn len(&self) -> usize {
        self.routes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(v: serde_json::Value) -> Message {
        Message::parse(v.to_string().as_bytes()).unwrap()
    }

    fn invoke(route: &str) -> Message {
        message(
            json!({"thingID": "urn:t", "messageID": "m", "messageType": "invokeAction",
            "action": "a", "correlationID": route}),
        )
    }

    fn status(route: &str, status: &str) -> Message {
        message(
            json!({"thingID": "urn:t", "messageID": "s", "messageType": "actionStatus",
            "action": "a", "status": status, "correlationID": route}),
        )
    }

    #[test]
    fn an_invocation_is_answered_until_its_terminal_status() {
        let mut f = ForeignRoutes::default();
        assert!(f.admit("urn:t", 1, &invoke("r")));
        assert!(f.answer("urn:t", 1, &status("r", "running")));
        assert!(f.answer("urn:t", 1, &status("r", "completed")));
        assert!(
            !f.answer("urn:t", 1, &status("r", "completed")),
            "forgotten"
        );
        assert_eq!(f.len(), 0);
    }

    #[test]
    fn only_the_agent_and_thing_asked_answer() {
        let mut f = ForeignRoutes::default();
        f.admit("urn:t", 1, &invoke("r"));
        assert!(!f.answer("urn:t", 2, &status("r", "completed")));
        assert!(!f.answer("urn:other", 1, &status("r", "completed")));
        assert!(!f.answer("urn:t", 1, &status("unknown", "completed")));
        f.agent_gone(1);
        assert!(!f.answer("urn:t", 1, &status("r", "completed")));
    }

    #[test]
    fn a_read_is_answered_once_and_a_cancel_needs_its_invocation() {
        let mut f = ForeignRoutes::default();
        let read = message(json!({"thingID": "urn:t", "messageID": "m",
            "messageType": "readProperty", "name": "p", "correlationID": "q"}));
        assert!(f.admit("urn:t", 1, &read));
        let reading = message(json!({"thingID": "urn:t", "messageID": "m2",
            "messageType": "propertyReading", "name": "p", "value": 1, "timestamp": "2025-01-01T00:00:00Z", "correlationID": "q"}));
        assert!(f.answer("urn:t", 1, &reading));
        assert!(!f.answer("urn:t", 1, &reading));
        let cancel = message(json!({"thingID": "urn:t", "messageID": "c",
            "messageType": "cancelAction", "action": "a", "correlationID": "nope"}));
        assert!(!f.admit("urn:t", 1, &cancel));
        let without_route = message(json!({"thingID": "urn:t", "messageID": "m",
            "messageType": "readProperty", "name": "p"}));
        assert!(!f.admit("urn:t", 1, &without_route));
    }

    #[test]
    fn the_oldest_routes_go_past_the_limit() {
        let mut f = ForeignRoutes::default();
        for n in 0..FOREIGN_LIMIT + 10 {
            f.admit("urn:t", 1, &invoke(&n.to_string()));
        }
        assert_eq!(f.len(), FOREIGN_LIMIT);
        assert!(!f.answer("urn:t", 1, &status("0", "completed")));
    }
}
