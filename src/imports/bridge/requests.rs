//! The router's requests for an imported Thing: each starts a task of its
//! own (`super::super::calls`), or is answered at once (the upstream is
//! down, has no such affordance, or cannot do what is asked).

use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{Bridge, Running, State};
use crate::gateway::incoming_trace;
use crate::imports::calls::Invocation;
use crate::imports::replies::Answering;
use crate::imports::upstream::Upstream;
use crate::lmos::{Body, Message, Problem, ProblemKind};

impl<U: Upstream> Bridge<U> {
    /// A message from the router: a request for the Thing, or an `error`
    /// about something the bridge sent.
    pub(super) async fn on_request(&mut self, text: &str) {
        let message = match Message::parse(text.as_bytes()) {
            Ok(m) => m,
            Err(e) => {
                warn!(upstream = %self.speaker().name, error = ?e, "The gateway sent an imported upstream's link what it cannot read.");
                return;
            }
        };
        if let Body::Error(e) = &message.body {
            warn!(upstream = %self.speaker().name, status = %e.status, detail = %e.detail, "The gateway refused a message of an imported upstream's.");
            return;
        }
        let Some(route) = message.correlation_id.clone() else {
            return;
        };
        let answering = Answering {
            route,
            trace: incoming_trace(&message),
        };
        let problem = match message.body {
            Body::InvokeAction { action, input } => {
                let stream = message.extra.get("stream") == Some(&serde_json::Value::Bool(true));
                self.invoke(action, input, stream, answering)
            }
            Body::CancelAction { .. } => self.cancel(&answering),
            Body::ReadProperty { name } => self.read(name, answering),
            Body::WriteProperty { .. } | Body::WriteMultipleProperties { .. } => Some((
                answering,
                Problem::new(
                    ProblemKind::NotSupported,
                    format!(
                        "{}'s properties are read-only (its resources or card).",
                        self.speaker().who()
                    ),
                ),
            )),
            other => {
                let detail = format!(
                    "{} does not take `{}`.",
                    self.speaker().who(),
                    other.message_type()
                );
                Some((answering, Problem::new(ProblemKind::NotSupported, detail)))
            }
        };
        if let Some((answering, problem)) = problem {
            let text = self.speaker().error(&answering, problem);
            self.link.send(text).await;
        }
    }

    /// Starts a call; the error to answer instead, if any.
    fn invoke(
        &mut self,
        action: String,
        input: Option<serde_json::Value>,
        stream: bool,
        answering: Answering,
    ) -> Option<(Answering, Problem)> {
        if let Some(problem) = self.unavailable() {
            return Some((answering, problem));
        }
        let offered = self
            .offer
            .as_ref()
            .is_some_and(|o| o.actions.iter().any(|a| a.name == action));
        if !offered {
            let detail = format!("{} has no action `{action}`.", self.speaker().who());
            return Some((answering, Problem::new(ProblemKind::NotFound, detail)));
        }
        let cancel = CancellationToken::new();
        let invocation = Invocation {
            action: action.clone(),
            input,
            stream,
            answering: answering.clone(),
        };
        let task = tokio::spawn(self.calls.clone().invoke(
            self.upstream.clone(),
            invocation,
            cancel.clone(),
        ));
        let running = Running {
            action,
            cancel,
            task: task.abort_handle(),
            answering: answering.clone(),
        };
        self.running.insert(answering.route, running);
        None
    }

    /// A cancel: the call's own task tells the upstream and answers
    /// `cancelled` (which answers the cancel, as the router expects).
    fn cancel(&mut self, answering: &Answering) -> Option<(Answering, Problem)> {
        match self.running.get(&answering.route) {
            Some(running) => {
                running.cancel.cancel();
                None
            }
            None => {
                let detail = "The invocation is no longer running upstream.";
                Some((
                    answering.clone(),
                    Problem::new(ProblemKind::Conflict, detail),
                ))
            }
        }
    }

    fn read(&mut self, name: String, answering: Answering) -> Option<(Answering, Problem)> {
        if let Some(problem) = self.unavailable() {
            return Some((answering, problem));
        }
        let offered = self
            .offer
            .as_ref()
            .is_some_and(|o| o.properties.iter().any(|p| p.name == name));
        if !offered {
            let detail = format!("{} has no property `{name}`.", self.speaker().who());
            return Some((answering, Problem::new(ProblemKind::NotFound, detail)));
        }
        tokio::spawn(
            self.calls
                .clone()
                .read(self.upstream.clone(), name, answering),
        );
        None
    }

    fn unavailable(&self) -> Option<Problem> {
        match &self.state {
            State::Up => None,
            State::Down(why) => Some(self.speaker().down(why)),
        }
    }
}
