//! The span of an MCP or A2A call: a SERVER span lasting the call, named
//! and described after OpenTelemetry's MCP conventions, the parent of the
//! LMOS message spans its invocation makes. Written through the same sink
//! as the message hops (a [`Hop`] with a start time and [`RpcInfo`]).

use std::time::SystemTime;

use opentelemetry::trace::{SpanId, SpanKind, TraceFlags, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, SamplingDecision};

use super::{ids, traceparent, Hop, MessageInfo, MessageTracer, Operation, Parent, TraceContext};

/// What an MCP or A2A call's span says, after OpenTelemetry's MCP
/// conventions (`{mcp.method.name} {target}`, SERVER, `mcp.*`, `jsonrpc.*`,
/// `gen_ai.tool.name`); A2A has none of its own and is written alike with
/// `rpc.*`.
#[derive(Debug, Clone, Copy)]
pub struct RpcInfo<'a> {
    /// `mcp` or `a2a`.
    pub protocol: &'static str,
    pub method: &'a str,
    /// The tool (MCP) or the agent's Thing (A2A).
    pub target: &'a str,
    pub request_id: Option<&'a str>,
    pub session_id: Option<&'a str>,
    pub protocol_version: Option<&'a str>,
    /// A call the sidecar makes to an imported upstream (`crate::imports`):
    /// a CLIENT span; else the SERVER span of a call it serves.
    pub client: bool,
}

/// An RPC span begun: its context is the parent of what the call sends on.
#[derive(Debug, Clone)]
pub struct RpcSpan {
    parent: Parent,
    span_id: SpanId,
    flags: TraceFlags,
    state: TraceState,
    start: SystemTime,
    /// What the call's LMOS request carries.
    pub context: TraceContext,
}

impl MessageTracer {
    /// Begins an MCP or A2A call's SERVER span under the request's
    /// `traceparent` (or a new trace, as for untraced messages); `None`
    /// when tracing is off. The call's LMOS request carries its context.
    pub fn begin_rpc(
        &self,
        incoming: Option<&str>,
        incoming_state: Option<&str>,
        name: &str,
    ) -> Option<RpcSpan> {
        let sink = self.sink.as_ref()?;
        // The call's LMOS request is the sidecar's own message, so it
        // starts a trace whether or not the spans are exported.
        let parent = self.read_parent(incoming, incoming_state, true)?;
        let span_id = ids().new_span_id();
        let (flags, state) = match &sink.sampler {
            None => (parent.flags, parent.state.clone()),
            Some(sampler) => {
                let result = sampler.should_sample(
                    Some(&parent.context()),
                    parent.trace_id,
                    name,
                    &SpanKind::Server,
                    &[],
                    &[],
                );
                let sampled = result.decision == SamplingDecision::RecordAndSample;
                (parent.flags.with_sampled(sampled), result.trace_state)
            }
        };
        let context = TraceContext {
            traceparent: traceparent(parent.trace_id, span_id, flags),
            tracestate: parent.tracestate.clone(),
        };
        Some(RpcSpan {
            parent,
            span_id,
            flags,
            state,
            start: SystemTime::now(),
            context,
        })
    }

    /// Ends the span begun by [`MessageTracer::begin_rpc`] and records it.
    pub fn end_rpc(&self, span: &RpcSpan, info: &RpcInfo<'_>, error: Option<&str>) {
        let Some(sink) = self.sink.as_ref() else {
            return;
        };
        if !span.flags.is_sampled() {
            return;
        }
        sink.record(&Hop {
            span_id: span.span_id,
            flags: span.flags,
            state: &span.state,
            parent: &span.parent,
            operation: Operation::Process,
            destination: info.target,
            info: &MessageInfo::default(),
            error,
            time: SystemTime::now(),
            start: span.start,
            rpc: Some(info),
        });
    }
}
