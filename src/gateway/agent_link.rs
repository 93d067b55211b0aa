//! An agent inside the sidecar: a gateway connection without a socket.
//!
//! An imported MCP server or A2A agent (`crate::imports`) hosts its Thing
//! through an [`AgentLink`]: it claims the Thing as a WebSocket agent's
//! `?host=` does, receives the requests the router sends it on the same
//! bounded queue, and what it sends is decided by the same
//! [`super::decide`] and carried out by the same [`super::effects`] as a
//! WebSocket agent's frames. So the router, the invocation records, the
//! faces and the cluster see one kind of host, whatever answers behind it.

use std::sync::Arc;

use serde_json::json;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use super::decide::{self, Peer};
use super::dispatcher::Command;
use super::effects::Effects;
use super::outbound::{self, Inbox, Outbound};
use super::subscriptions::ConnId;
use super::{ClaimError, Gateway, Shared};
use crate::auth::Principal;
use crate::broker::Publication;
use crate::lmos::dialect::{Dialect, Gatherer};

/// One in-process agent's connection to the gateway, hosting `things`.
/// Dropping it without [`AgentLink::close`] leaves the Thing claimed until
/// the gateway stops.
pub struct AgentLink {
    conn: ConnId,
    principal: Principal,
    things: Vec<String>,
    outbound: Outbound,
    inbox: Inbox,
    shared: Arc<Shared>,
    dialect: Option<Dialect>,
    gatherer: Gatherer,
}

/// Whether an imported agent's upstream answers, as its Thing's retained
/// `agent/status` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    Online,
    /// Unreachable, with the last error seen.
    Offline(String),
}

impl Gateway {
    /// Makes an in-process agent the host of `things`, under `principal`
    /// (which needs `host` access to them for its messages to pass), or
    /// refuses if another agent hosts one of them.
    pub async fn attach(
        &self,
        principal: Principal,
        things: Vec<String>,
    ) -> Result<AgentLink, ClaimError> {
        let conn = self.next_connection();
        self.claim(conn, things.clone()).await?;
        let shared = &self.shared;
        let (outbound, inbox) = outbound::channel(&shared.queue_limits);
        // Drained by the sidecar's own task: nothing slow to close.
        outbound.account().exempt();
        let register = Command::Register {
            conn,
            outbound: outbound.clone(),
            principal: principal.name().to_owned(),
        };
        shared.command(register).await;
        Ok(AgentLink {
            conn,
            principal,
            things,
            outbound,
            inbox,
            shared: shared.clone(),
            dialect: Some(Dialect::Draft),
            gatherer: Gatherer::default(),
        })
    }
}

impl AgentLink {
    /// The next message the gateway sends this agent: a routed request, or
    /// an `error` about something it sent. `None` once the gateway stops.
    pub async fn recv(&mut self) -> Option<Utf8Bytes> {
        Some(self.inbox.recv().await?.into_text())
    }

    /// A message from the agent (a reply, an event, its Thing Description),
    /// taken as a WebSocket agent's text frame would be.
    pub async fn send(&mut self, text: String) {
        let mut peer = Peer {
            id: self.conn,
            principal: &self.principal,
            hosts: &self.things,
            dialect: &mut self.dialect,
            gatherer: &mut self.gatherer,
        };
        let effects = decide::text(&mut peer, &self.shared.context(), Utf8Bytes::from(text));
        let carrier = Effects {
            shared: &self.shared,
            principal: &self.principal,
            outbound: &self.outbound,
            transport: crate::telemetry::metrics::IMPORT,
        };
        for effect in effects {
            carrier.apply(effect).await;
        }
    }

    /// Publishes whether the agent behind the link answers, retained on
    /// each Thing's `agent/status` (the router keeps routing to the link,
    /// which answers for an unreachable upstream itself).
    pub async fn presence(&self, transport: &str, presence: &Presence) {
        for thing in &self.things {
            let mut payload = json!({
                "thingID": thing,
                "status": if *presence == Presence::Online { "online" } else { "offline" },
                "transport": transport,
            });
            if let Presence::Offline(error) = presence {
                payload["error"] = json!(error);
            }
            let topic = self.shared.topics.agent_status(thing);
            let publication = Publication::new(topic, payload.to_string(), true);
            // Fails only once the bus has stopped, i.e. during shutdown.
            let _ = self.shared.bus.publish(publication).await;
        }
    }

    /// Whether the directory holds a description of every hosted Thing
    /// (e.g. kept in the store across a restart).
    pub fn described(&self) -> bool {
        let directory = self.shared.directory.directory();
        self.things.iter().all(|t| directory.get(t).is_some())
    }

    /// Releases the Things: the router fails what waits on the agent.
    pub async fn close(self) {
        self.shared
            .command(Command::Deregister { conn: self.conn })
            .await;
    }
}
