//! One span per LMOS message hop through the sidecar, following the
//! OpenTelemetry messaging conventions: `publish {destination}` (PRODUCER)
//! when the sidecar sends a message on, `process {destination}` (CONSUMER)
//! when it hands one to a recipient. The incoming `traceparent` is the
//! parent; the message sent on carries the new span's `traceparent` and the
//! incoming `tracestate`, unchanged.

mod hop;
mod parent;
mod rpc;
mod sink;

pub(super) use hop::{Attr, Hop};
pub use parent::Parent;
pub use rpc::{RpcInfo, RpcSpan};
pub use sink::{scope, SpanSink};

use std::time::SystemTime;

use opentelemetry::trace::{SpanId, SpanKind, TraceFlags, TraceId};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SamplingDecision};

/// W3C trace context as carried in LMOS messages.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TraceContext {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// The sidecar sends the message on (to the bus, to an agent).
    Publish,
    /// The sidecar hands the message to one recipient.
    Process,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Publish => "publish",
            Operation::Process => "process",
        }
    }

    /// `messaging.operation.type` of the current conventions ("publish" is
    /// their older name for "send").
    fn kind(self) -> (&'static str, SpanKind) {
        match self {
            Operation::Publish => ("send", SpanKind::Producer),
            Operation::Process => ("process", SpanKind::Consumer),
        }
    }
}

/// What the span says about the message.
#[derive(Debug, Clone, Copy, Default)]
pub struct MessageInfo<'a> {
    pub message_type: Option<&'a str>,
    pub thing_id: Option<&'a str>,
    /// Event, property or action name.
    pub affordance: Option<&'a str>,
    pub message_id: Option<&'a str>,
    pub correlation_id: Option<&'a str>,
    /// How many recipients one `process` span stands for (a fan-out).
    pub recipients: Option<usize>,
}

/// Creates message spans; cheap to clone. Off: every call returns `None` and
/// messages pass untouched.
///
/// A span here is one hop, started and ended at once, so it is written as
/// the finished record (`SpanData`) the processor takes, without the SDK's
/// tracer: no sampler call, no `Context`, no live span object, no header
/// map to read the `traceparent` through. That path cost about 1.8 µs per
/// fanned-out event, on the dispatcher's one task, and with its batching a
/// sixth to a third of the WebSocket fan-out's throughput (issue 16); the
/// spans it made were the same as these.
#[derive(Clone, Default)]
pub struct MessageTracer {
    sink: Option<SpanSink>,
    new_trace_for_untraced: bool,
    mqtt5_user_properties: bool,
}

impl std::fmt::Debug for MessageTracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageTracer")
            .field("on", &self.sink.is_some())
            .finish()
    }
}

impl MessageTracer {
    pub fn new(
        sink: Option<SpanSink>,
        new_trace_for_untraced: bool,
        mqtt5_user_properties: bool,
    ) -> MessageTracer {
        MessageTracer {
            sink,
            new_trace_for_untraced,
            mqtt5_user_properties,
        }
    }

    /// Whether publications carry the context as MQTT 5 user properties too.
    pub fn mqtt5_user_properties(&self) -> bool {
        self.mqtt5_user_properties
    }

    pub fn is_on(&self) -> bool {
        self.sink.is_some()
    }

    /// The recent spans, when they are kept (the console's trace view).
    pub fn recent(&self) -> Option<&crate::telemetry::recent::SpanStore> {
        self.sink.as_ref()?.recent()
    }

    /// The parent of the spans for one message, read once however many
    /// recipients it has. `None` when tracing is off, or the message has no
    /// (valid) trace context and untraced messages do not start traces.
    pub fn parent(&self, incoming: Option<&TraceContext>) -> Option<Parent> {
        self.parent_of(
            incoming.map(|i| i.traceparent.as_str()),
            incoming.and_then(|i| i.tracestate.as_deref()),
        )
    }

    /// As [`MessageTracer::parent`], from the two members as they came.
    ///
    /// With no export (spans kept for the console only), an untraced
    /// message starts no trace: the sidecar then passes messages on
    /// untouched, so nothing downstream would ever join it.
    pub fn parent_of(&self, traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Parent> {
        let sink = self.sink.as_ref()?;
        self.read_parent(traceparent, tracestate, sink.exports())
    }

    /// The remote parent, else a new trace's root when `may_start` and
    /// untraced messages start traces.
    fn read_parent(
        &self,
        traceparent: Option<&str>,
        tracestate: Option<&str>,
        may_start: bool,
    ) -> Option<Parent> {
        match traceparent.and_then(|tp| Parent::remote(tp, tracestate)) {
            Some(parent) => Some(parent),
            None if may_start && self.new_trace_for_untraced => Some(Parent::root()),
            None => None,
        }
    }

    /// Records one hop and returns the trace context the message carries
    /// on: `None` when it goes on as it came (tracing off, no parent, or
    /// spans kept for the console only and never exported).
    pub fn hop(
        &self,
        operation: Operation,
        destination: &str,
        incoming: Option<&TraceContext>,
        info: &MessageInfo<'_>,
        error: Option<&str>,
    ) -> Option<TraceContext> {
        let parent = self.parent(incoming)?;
        self.hop_from(&parent, operation, destination, info, error)
    }

    /// As [`MessageTracer::hop`], under a parent already read.
    pub fn hop_from(
        &self,
        parent: &Parent,
        operation: Operation,
        destination: &str,
        info: &MessageInfo<'_>,
        error: Option<&str>,
    ) -> Option<TraceContext> {
        let sink = self.sink.as_ref()?;
        let span_id = ids().new_span_id();
        let (flags, state) = match &sink.sampler {
            // The default sampler, parent-based always-on: a parent that was
            // not sampled gets children that are not either (they still
            // carry a span ID of their own on); a new trace is sampled.
            None => (parent.flags, parent.state.clone()),
            Some(sampler) => {
                let result = sampler.should_sample(
                    Some(&parent.context()),
                    parent.trace_id,
                    &span_name((operation.name(), destination)),
                    &operation.kind().1,
                    &[],
                    &[],
                );
                let sampled = result.decision == SamplingDecision::RecordAndSample;
                (parent.flags.with_sampled(sampled), result.trace_state)
            }
        };
        let time = SystemTime::now();
        if flags.is_sampled() {
            sink.record(&Hop {
                span_id,
                flags,
                state: &state,
                parent,
                operation,
                destination,
                info,
                error,
                // A hop has no duration of its own worth a second clock
                // reading.
                time,
                start: time,
                rpc: None,
            });
        }
        if !sink.exports() {
            return None;
        }
        Some(TraceContext {
            traceparent: traceparent(parent.trace_id, span_id, flags),
            // Passed on as it came, not as the propagator re-encodes it.
            tracestate: parent.tracestate.clone(),
        })
    }
}

/// The SDK's generator (a thread-local random source, nothing to hold):
/// IDs as the SDK's tracer made them.
fn ids() -> RandomIdGenerator {
    RandomIdGenerator::default()
}

/// `{operation} {destination}`, as the messaging conventions name spans.
fn span_name((operation, destination): (&str, &str)) -> String {
    let mut name = String::with_capacity(operation.len() + 1 + destination.len());
    name.push_str(operation);
    name.push(' ');
    name.push_str(destination);
    name
}

/// `00-{trace-id}-{span-id}-{flags}`, in lowercase hex.
fn traceparent(trace_id: TraceId, span_id: SpanId, flags: TraceFlags) -> String {
    let mut out = String::with_capacity(55);
    out.push_str("00-");
    push_hex(&mut out, &trace_id.to_bytes());
    out.push('-');
    push_hex(&mut out, &span_id.to_bytes());
    out.push('-');
    push_hex(&mut out, &[flags.to_u8()]);
    out
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
}

#[cfg(test)]
mod tests;
