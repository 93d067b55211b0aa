//! One request to an upstream, from start to its last answer: a task of its
//! own, so a slow upstream call holds up nothing else. It writes the
//! call's CLIENT span (the trace goes on upstream in its context), counts
//! the call, and hands every LMOS message it makes to the bridge, which
//! sends them on the Thing's agent link in order.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::replies::{chunk, Answering, Speaker};
use super::upstream::{Call, Outcome, Update, Upstream, UpstreamError};
use crate::telemetry::metrics::Metrics;
use crate::telemetry::{MessageTracer, RpcInfo, RpcSpan};

/// Updates a call may have waiting for the bridge; the upstream drops
/// further ones (they are progress, not the answer).
const UPDATES: usize = 64;

/// What a request's task hands the bridge.
#[derive(Debug)]
pub enum Outgoing {
    /// An LMOS message for the agent link.
    Message(String),
    /// The request with this route has had its last answer.
    Done(String),
}

/// What every call of one upstream shares.
pub struct Calls {
    pub speaker: Speaker,
    pub tracer: MessageTracer,
    pub metrics: Metrics,
    pub out: mpsc::Sender<Outgoing>,
}

/// An `invokeAction` as the bridge hands it over.
pub struct Invocation {
    pub action: String,
    pub input: Option<Value>,
    pub stream: bool,
    pub answering: Answering,
}

impl Calls {
    /// Runs one invocation to its end: `pending`, `running` per update, then
    /// `completed`, `failed` or `cancelled`; an LMOS `error` for an upstream
    /// that answered nothing usable.
    pub async fn invoke<U: Upstream>(
        self: Arc<Self>,
        upstream: Arc<U>,
        invocation: Invocation,
        cancel: CancellationToken,
    ) {
        let started = Instant::now();
        let Invocation {
            action,
            input,
            stream,
            answering,
        } = invocation;
        let method = match upstream.protocol() {
            "mcp" => "tools/call",
            _ => "SendStreamingMessage",
        };
        let span = self.begin(&answering, method, &action);
        // The replies go on from the upstream call's span.
        let answering = Answering {
            trace: span.as_ref().map(|s| s.context.clone()).or(answering.trace),
            ..answering
        };
        let call = Call {
            action: action.clone(),
            input,
            id: answering.route.clone(),
            stream,
            trace: span.as_ref().map(|s| s.context.clone()),
        };
        let speaker = &self.speaker;
        self.send(speaker.status(&answering, &action, "pending", None, None))
            .await;
        let (updates, mut updates_rx) = mpsc::channel(UPDATES);
        let running = upstream.call(call, updates, cancel);
        tokio::pin!(running);
        let mut seq = 0u64;
        let result = loop {
            tokio::select! {
                biased;
                Some(update) = updates_rx.recv() => self.update(&answering, &action, stream, &mut seq, update).await,
                result = &mut running => break result,
            }
        };
        // Updates the upstream sent just before its answer come first.
        while let Ok(update) = updates_rx.try_recv() {
            self.update(&answering, &action, stream, &mut seq, update)
                .await;
        }
        let end = (stream && seq > 0).then(|| json!({"seq": seq, "end": true}));
        let (text, outcome) = match result {
            Ok(Outcome::Completed(output)) => (
                speaker.status(&answering, &action, "completed", Some(output), end),
                "completed",
            ),
            Ok(Outcome::Failed(output)) => (
                speaker.status(&answering, &action, "failed", Some(output), None),
                "failed",
            ),
            Ok(Outcome::Cancelled) => (
                speaker.status(&answering, &action, "cancelled", None, None),
                "cancelled",
            ),
            // The upstream went away mid-call: the invocation failed, as
            // when a WebSocket agent disconnects.
            Err(UpstreamError::Unreachable(why)) => {
                let output = json!({"error": format!("{} went away: {why}.", speaker.who())});
                let text = speaker.status(&answering, &action, "failed", Some(output), None);
                (text, "unreachable")
            }
            Err(e) => {
                let problem = speaker.problem(&e);
                let slug = problem.kind.slug();
                (speaker.error(&answering, problem), slug)
            }
        };
        self.end(span.as_ref(), method, &action, &answering, outcome);
        self.send(text).await;
        self.finish("call", outcome, started, &answering.route)
            .await;
    }

    /// Reads one property: a `propertyReading`, or an LMOS `error`.
    pub async fn read<U: Upstream>(self: Arc<Self>, upstream: Arc<U>, name: String, to: Answering) {
        let started = Instant::now();
        let method = match upstream.protocol() {
            "mcp" => "resources/read",
            _ => "read",
        };
        let span = self.begin(&to, method, &name);
        let trace = span.as_ref().map(|s| s.context.clone());
        let to = Answering {
            trace: trace.clone().or(to.trace),
            ..to
        };
        let (text, outcome) = match upstream.read(&name, trace).await {
            Ok(value) => (self.speaker.reading(&to, &name, value), "completed"),
            Err(e) => {
                let problem = self.speaker.problem(&e);
                let slug = problem.kind.slug();
                (self.speaker.error(&to, problem), slug)
            }
        };
        self.end(span.as_ref(), method, &name, &to, outcome);
        self.send(text).await;
        self.finish("read", outcome, started, &to.route).await;
    }

    async fn update(
        &self,
        to: &Answering,
        action: &str,
        stream: bool,
        seq: &mut u64,
        update: Update,
    ) {
        let text = match update {
            Update::Progress(output) => {
                self.speaker
                    .status(to, action, "running", Some(output), None)
            }
            // Chunks only for a consumer that asked for a stream; the
            // final output holds the whole answer for the others.
            Update::Chunk { .. } if !stream => return,
            Update::Chunk {
                data,
                content_type,
                base64,
            } => {
                let member = chunk(*seq, data, content_type.as_deref(), base64);
                *seq += 1;
                self.speaker
                    .status(to, action, "running", None, Some(member))
            }
        };
        self.send(text).await;
    }

    fn begin(&self, to: &Answering, method: &str, target: &str) -> Option<RpcSpan> {
        let trace = to.trace.as_ref();
        let name = format!("{method} {target}");
        self.tracer.begin_rpc(
            trace.map(|t| t.traceparent.as_str()),
            trace.and_then(|t| t.tracestate.as_deref()),
            &name,
        )
    }

    fn end(
        &self,
        span: Option<&RpcSpan>,
        method: &str,
        target: &str,
        to: &Answering,
        outcome: &str,
    ) {
        let Some(span) = span else {
            return;
        };
        let info = RpcInfo {
            protocol: self.speaker.protocol,
            method,
            target,
            request_id: Some(&to.route),
            session_id: None,
            protocol_version: None,
            client: true,
        };
        let error = (!matches!(outcome, "completed" | "cancelled")).then_some(outcome);
        self.tracer.end_rpc(span, &info, error);
    }

    async fn send(&self, text: String) {
        // Fails only once the bridge has stopped, i.e. during shutdown.
        let _ = self.out.send(Outgoing::Message(text)).await;
    }

    async fn finish(
        &self,
        operation: &'static str,
        outcome: &'static str,
        started: Instant,
        route: &str,
    ) {
        let speaker = &self.speaker;
        self.metrics.import_call(
            &speaker.name,
            speaker.protocol,
            operation,
            outcome,
            started.elapsed(),
        );
        let _ = self.out.send(Outgoing::Done(route.to_owned())).await;
    }
}
