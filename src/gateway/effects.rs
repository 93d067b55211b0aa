//! Carrying out what [`super::decide`] decided about a client's message:
//! the same for a WebSocket connection and for an agent inside the sidecar
//! ([`super::agent_link`]), so an imported agent's messages take exactly the
//! checks, the traces and the one reply path a WebSocket agent's take.

use std::sync::Arc;

use tracing::info;

use super::decide::Effect;
use super::outbound::{Offer, Outbound};
use super::{trace_publication, Shared};
use crate::auth::Principal;
use crate::lmos::{Body, Problem, ProblemKind};

/// A connection's side of the effects: whose they are and where its own
/// messages queue.
pub(super) struct Effects<'a> {
    pub shared: &'a Arc<Shared>,
    pub principal: &'a Principal,
    pub outbound: &'a Outbound,
    /// Counted under this transport in the metrics.
    pub transport: &'static str,
}

impl Effects<'_> {
    pub async fn apply(&self, effect: Effect) {
        match effect {
            Effect::Refuse {
                problem,
                thing,
                correlation,
            } => self.reply(problem, thing.as_deref(), correlation.as_deref()),
            Effect::Send(text) => self.queue(text),
            Effect::Command(command) => self.shared.command(command).await,
            Effect::Publish {
                message,
                publications,
            } => {
                for mut publication in publications {
                    trace_publication(&self.shared.tracer, &message, &mut publication);
                    if self.shared.bus.publish(publication).await.is_err() {
                        let problem = Problem::new(
                            ProblemKind::Unavailable,
                            "The message bus has stopped; the message was not published.",
                        );
                        let correlation = message.reply_correlation_id();
                        return self.reply(problem, Some(&message.thing_id), Some(correlation));
                    }
                }
            }
            Effect::RegisterTd { id, text } => self.register_td(&id, &text).await,
        }
    }

    /// Queues a message of the connection's own behind what the dispatcher
    /// queued before it.
    fn queue(&self, text: String) {
        match self.outbound.offer(text.into()) {
            Offer::Queued | Offer::Closed => {}
            Offer::Dropped => self.shared.metrics.dropped("slow_consumer"),
            // The connection sees the signal and closes.
            Offer::Disconnected => self.shared.metrics.dropped("slow_consumer_disconnected"),
        }
    }

    /// A hosting agent's Thing Description: registered as by `PUT
    /// /things/{id}`, on its principal's quota. Errors go back as LMOS
    /// `error`s (413 too large, 429 a quota or a full directory); success
    /// is quiet.
    async fn register_td(&self, id: &str, text: &str) {
        let owner = Some(self.principal.name());
        let result = self
            .shared
            .directory
            .directory()
            .put_as(owner, Some(id), text.as_bytes());
        match result {
            Ok((registered, td)) => {
                self.shared
                    .directory
                    .announce(id, Some(&td), registered)
                    .await;
            }
            Err(e) => {
                let problem = Problem::new(e.problem_kind(), e.to_string());
                self.reply(problem, Some(id), None);
            }
        }
    }

    /// Sends an LMOS `error` to this connection.
    fn reply(&self, problem: Problem, thing: Option<&str>, correlation: Option<&str>) {
        let thing = thing.unwrap_or(&self.shared.thing_id);
        self.shared.metrics.error(problem.kind.slug());
        self.shared.metrics.sent(self.transport, "error");
        if problem.kind == ProblemKind::MessageTooLarge {
            self.shared.metrics.dropped("too_large");
        }
        let message = problem.to_message(thing, correlation);
        if let Body::Error(e) = &message.body {
            info!(kind = problem.kind.slug(), instance = %e.instance, "Rejected a client's message.");
        }
        self.queue(message.to_json());
    }
}
