//! One span per LMOS message hop through the sidecar, following the
//! OpenTelemetry messaging conventions: `publish {destination}` (PRODUCER)
//! when the sidecar sends a message on, `process {destination}` (CONSUMER)
//! when it hands one to a recipient. The incoming `traceparent` is the
//! parent; the message sent on carries the new span's `traceparent` and the
//! incoming `tracestate`, unchanged.

mod rpc;

pub use rpc::{RpcInfo, RpcSpan};

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::batches::Batches;
use super::metrics::SpanCounters;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, SamplingDecision, ShouldSample, SpanData, SpanEvents,
    SpanLinks, SpanProcessor,
};

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

/// Where finished message spans go: written into the OTLP batches the
/// sidecar exports itself (gRPC), or handed to an SDK span processor (the
/// HTTP exporter's, the tests' in-memory one) as `SpanData`.
#[derive(Debug, Clone)]
pub struct SpanSink {
    target: Target,
    scope: InstrumentationScope,
    /// `None`: the default, parent-based always-on, decided without a call.
    sampler: Option<Arc<dyn ShouldSample>>,
    counters: SpanCounters,
    probes: Arc<Probes>,
}

#[derive(Debug, Clone)]
enum Target {
    Processor(Arc<dyn SpanProcessor>),
    Batches(Arc<Batches>),
}

/// While the collector is not answering, spans are not built at all, but
/// for one probe every [`PROBE_EVERY`] that tells when it answers again:
/// they would only be encoded and then dropped by the failed export, and
/// building them cost a tenth of the fan-out's throughput with the
/// collector down (issue 16). They are counted as dropped
/// (`export_failed`), as they would have been.
#[derive(Debug)]
struct Probes {
    since: Instant,
    /// Milliseconds since `since` of the last probe.
    last_probe: AtomicU64,
}

const PROBE_EVERY: Duration = Duration::from_millis(100);

impl SpanSink {
    /// With the sampler `OTEL_TRACES_SAMPLER` (and `_ARG`) choose, as the
    /// SDK reads them.
    pub fn new(processor: Arc<dyn SpanProcessor>) -> SpanSink {
        SpanSink::to(Target::Processor(processor))
    }

    /// Spans written straight into export batches (see [`Batches`]).
    pub fn batches(batches: Arc<Batches>) -> SpanSink {
        SpanSink::to(Target::Batches(batches))
    }

    fn to(target: Target) -> SpanSink {
        let chosen = std::env::var("OTEL_TRACES_SAMPLER")
            .is_ok_and(|s| !s.is_empty() && s != "parentbased_always_on");
        SpanSink {
            target,
            scope: scope(),
            sampler: chosen.then(|| Arc::from(opentelemetry_sdk::trace::Config::default().sampler)),
            counters: SpanCounters::default(),
            probes: Arc::new(Probes {
                since: Instant::now(),
                last_probe: AtomicU64::new(0),
            }),
        }
    }

    /// Counting with `counters`, and holding spans back while they say the
    /// exports fail.
    pub fn with_counters(mut self, counters: SpanCounters) -> SpanSink {
        self.counters = counters;
        self
    }

    /// Whether to build this span: not while exports fail, but for a probe.
    fn takes_span(&self) -> bool {
        if !self.counters.failing() {
            return true;
        }
        let held = &self.probes;
        let now = held.since.elapsed().as_millis() as u64;
        let last = held.last_probe.load(Ordering::Relaxed);
        let probe = now.saturating_sub(last) >= PROBE_EVERY.as_millis() as u64
            && held
                .last_probe
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        if !probe {
            self.counters.held_back();
        }
        probe
    }

    fn record(&self, hop: &Hop<'_>) {
        match &self.target {
            Target::Processor(processor) => processor.on_end(hop.span_data(&self.scope)),
            Target::Batches(batches) => batches.push(hop),
        }
    }

    /// Exports what is left, for at most `bound`.
    pub async fn shutdown(&self, bound: Duration) -> Result<(), String> {
        match &self.target {
            // The SDK's shutdown blocks, and on a current-thread runtime it
            // would wait for the very runtime it blocks.
            Target::Processor(processor) => {
                let processor = processor.clone();
                tokio::task::spawn_blocking(move || processor.shutdown_with_timeout(bound))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())
            }
            Target::Batches(batches) => batches.flush(bound).await,
        }
    }
}

/// The scope message spans are reported under.
pub fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("lmos-sidecar")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
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
    pub fn parent_of(&self, traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Parent> {
        self.sink.as_ref()?;
        match traceparent.and_then(|tp| Parent::remote(tp, tracestate)) {
            Some(parent) => Some(parent),
            None if self.new_trace_for_untraced => Some(Parent::root()),
            None => None,
        }
    }

    /// Records one hop and returns the trace context the message carries on.
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
        let traceparent = traceparent(parent.trace_id, span_id, flags);
        let time = SystemTime::now();
        if flags.is_sampled() && sink.takes_span() {
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
        Some(TraceContext {
            traceparent,
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

/// One hop's span, as both sinks write it.
pub(super) struct Hop<'a> {
    pub span_id: SpanId,
    pub flags: TraceFlags,
    /// As sampled: the parent's, or what the sampler made of it.
    pub state: &'a TraceState,
    pub parent: &'a Parent,
    pub operation: Operation,
    pub destination: &'a str,
    pub info: &'a MessageInfo<'a>,
    pub error: Option<&'a str>,
    pub time: SystemTime,
    /// When the span began: `time` for a hop, earlier for an RPC span.
    pub start: SystemTime,
    /// An MCP or A2A call's SERVER span instead of a message hop.
    pub rpc: Option<&'a RpcInfo<'a>>,
}

/// An attribute's value: the two kinds a hop has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Attr<'a> {
    Str(&'a str),
    Int(i64),
}

impl<'a> Hop<'a> {
    pub fn trace_id(&self) -> TraceId {
        self.parent.trace_id
    }

    /// `INVALID` for the root of a new trace.
    pub fn parent_span_id(&self) -> SpanId {
        self.parent.span_id
    }

    pub fn parent_is_remote(&self) -> bool {
        self.parent.remote
    }

    pub fn kind(&self) -> SpanKind {
        match self.rpc {
            Some(_) => SpanKind::Server,
            None => self.operation.kind().1,
        }
    }

    /// The two parts of `{operation} {destination}`, as the messaging
    /// conventions name spans (`{method} {target}` for an RPC).
    pub fn name_parts(&self) -> (&'a str, &'a str) {
        match self.rpc {
            Some(rpc) => (rpc.method, rpc.target),
            None => (self.operation.name(), self.destination),
        }
    }

    /// In the order both sinks write them.
    pub fn attributes(&self) -> impl Iterator<Item = (&'static str, Attr<'a>)> + '_ {
        let info = self.info;
        let hop = self.rpc.is_none();
        let rpc = self.rpc;
        let mcp = rpc.filter(|r| r.protocol == "mcp");
        let tool = mcp.filter(|r| r.method == "tools/call");
        let a2a = rpc.filter(|r| r.protocol != "mcp");
        let rpc_attributes = [
            ("mcp.method.name", mcp.map(|r| Attr::Str(r.method))),
            (
                "mcp.session.id",
                mcp.and_then(|r| r.session_id).map(Attr::Str),
            ),
            (
                "mcp.protocol.version",
                mcp.and_then(|r| r.protocol_version).map(Attr::Str),
            ),
            ("gen_ai.tool.name", tool.map(|r| Attr::Str(r.target))),
            (
                "gen_ai.operation.name",
                tool.map(|_| Attr::Str("execute_tool")),
            ),
            ("rpc.system", a2a.map(|_| Attr::Str("jsonrpc"))),
            ("rpc.method", a2a.map(|r| Attr::Str(r.method))),
            ("a2a.agent", a2a.map(|r| Attr::Str(r.target))),
            (
                "jsonrpc.request.id",
                rpc.and_then(|r| r.request_id).map(Attr::Str),
            ),
            ("network.protocol.name", rpc.map(|_| Attr::Str("http"))),
            ("network.transport", rpc.map(|_| Attr::Str("tcp"))),
        ];
        let fixed = [
            ("messaging.system", Some(Attr::Str("lmos"))),
            (
                "messaging.destination.name",
                Some(Attr::Str(self.destination)),
            ),
            (
                "messaging.operation.type",
                Some(Attr::Str(self.operation.kind().0)),
            ),
            (
                "messaging.operation.name",
                Some(Attr::Str(self.operation.name())),
            ),
            ("messaging.message.id", info.message_id.map(Attr::Str)),
            ("lmos.message_type", info.message_type.map(Attr::Str)),
            ("lmos.thing_id", info.thing_id.map(Attr::Str)),
            ("lmos.affordance", info.affordance.map(Attr::Str)),
            ("lmos.correlation_id", info.correlation_id.map(Attr::Str)),
            (
                "lmos.recipients",
                info.recipients.map(|n| Attr::Int(n as i64)),
            ),
        ];
        fixed
            .into_iter()
            .filter(move |_| hop)
            .chain(rpc_attributes)
            .filter_map(|(key, value)| Some((key, value?)))
    }

    /// The finished span as the SDK's processors take it.
    pub(super) fn span_data(&self, scope: &InstrumentationScope) -> SpanData {
        let context = SpanContext::new(
            self.trace_id(),
            self.span_id,
            self.flags,
            false,
            self.state.clone(),
        );
        let attributes = self
            .attributes()
            .map(|(key, value)| match value {
                Attr::Str(s) => KeyValue::new(key, s.to_owned()),
                Attr::Int(n) => KeyValue::new(key, n),
            })
            .collect();
        SpanData {
            span_context: context,
            parent_span_id: self.parent_span_id(),
            parent_span_is_remote: self.parent_is_remote(),
            span_kind: self.kind(),
            name: Cow::Owned(span_name(self.name_parts())),
            start_time: self.start,
            end_time: self.time,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: self
                .error
                .map_or(Status::Unset, |e| Status::error(e.to_owned())),
            instrumentation_scope: scope.clone(),
        }
    }
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

/// The parent of a message's spans.
#[derive(Debug, Clone)]
pub struct Parent {
    trace_id: TraceId,
    /// `INVALID` for the root of a new trace.
    span_id: SpanId,
    /// Only the sampled flag: the others are not passed on (W3C trace
    /// context, "other flags").
    flags: TraceFlags,
    /// Read from a message (another process's span), not one of ours.
    remote: bool,
    /// The `tracestate` as parsed, for the spans; as it came, for the
    /// messages.
    state: TraceState,
    tracestate: Option<String>,
}

impl Parent {
    /// From a message's `traceparent` and `tracestate`, read as the W3C
    /// trace context says: lowercase hex, version `ff` invalid, version
    /// `00` exactly 55 characters, later versions at least that with any
    /// further part after a `-`; IDs not all zeros. An unreadable
    /// `tracestate` is kept in the message but not in the span, as the
    /// SDK's propagator did.
    pub(super) fn remote(traceparent: &str, tracestate: Option<&str>) -> Option<Parent> {
        let (trace_id, span_id, flags) = read_traceparent(traceparent.trim())?;
        Some(Parent {
            trace_id,
            span_id,
            flags,
            remote: true,
            state: tracestate
                .and_then(|ts| TraceState::from_str(ts).ok())
                .unwrap_or_default(),
            tracestate: tracestate.map(str::to_owned),
        })
    }

    /// The root of a new trace, for an untraced message.
    pub(super) fn root() -> Parent {
        Parent {
            trace_id: ids().new_trace_id(),
            span_id: SpanId::INVALID,
            flags: TraceFlags::SAMPLED,
            remote: false,
            state: TraceState::default(),
            tracestate: None,
        }
    }

    /// As the SDK's samplers take a parent.
    fn context(&self) -> Context {
        if self.span_id == SpanId::INVALID {
            return Context::new();
        }
        Context::new().with_remote_span_context(SpanContext::new(
            self.trace_id,
            self.span_id,
            self.flags,
            self.remote,
            self.state.clone(),
        ))
    }

    /// The context of a span of this message, as the parent of further ones
    /// (e.g. the consumer spans under a stand-in producer).
    pub fn child(&self, span: &TraceContext) -> Option<Parent> {
        let (trace_id, span_id, flags) = read_traceparent(&span.traceparent)?;
        Some(Parent {
            trace_id,
            span_id,
            flags,
            remote: false,
            ..self.clone()
        })
    }
}

fn read_traceparent(tp: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
    let b = tp.as_bytes();
    let lower_hex = |s: &[u8]| s.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    let well_formed = b.len() >= 55
        && lower_hex(&b[..2])
        && &b[..2] != b"ff"
        && (b.len() == 55 || (&b[..2] != b"00" && b[55] == b'-'))
        && b[2] == b'-'
        && b[35] == b'-'
        && b[52] == b'-'
        && lower_hex(&b[3..35])
        && lower_hex(&b[36..52])
        && lower_hex(&b[53..55]);
    if !well_formed {
        return None;
    }
    let trace_id = TraceId::from_hex(&tp[3..35]).ok()?;
    let span_id = SpanId::from_hex(&tp[36..52]).ok()?;
    let flags = u8::from_str_radix(&tp[53..55], 16).ok()?;
    (trace_id != TraceId::INVALID && span_id != SpanId::INVALID).then_some((
        trace_id,
        span_id,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SimpleSpanProcessor};

    const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const SPAN: &str = "b7ad6b7169203331";

    fn traced() -> (MessageTracer, InMemorySpanExporter) {
        let exporter = InMemorySpanExporter::default();
        let processor = SimpleSpanProcessor::new(exporter.clone());
        let sink = SpanSink::new(Arc::new(processor));
        (MessageTracer::new(Some(sink), true, false), exporter)
    }

    fn incoming(flags: &str) -> TraceContext {
        TraceContext {
            traceparent: format!("00-{TRACE}-{SPAN}-{flags}"),
            tracestate: Some("congo=t61rcWkgMzE".into()),
        }
    }

    #[test]
    fn traceparents_are_read_as_the_w3c_says() {
        let ok = format!("00-{TRACE}-{SPAN}-01");
        assert!(read_traceparent(&ok).is_some());
        // A later version may carry more after a dash; `00` may not.
        assert!(read_traceparent(&format!("01-{TRACE}-{SPAN}-01-more")).is_some());
        for bad in [
            format!("00-{TRACE}-{SPAN}-01-more"),
            format!("ff-{TRACE}-{SPAN}-01"),
            format!("00-{}-{SPAN}-01", TRACE.to_uppercase()),
            format!("00-{}-{SPAN}-01", "0".repeat(32)),
            format!("00-{TRACE}-{}-01", "0".repeat(16)),
            format!("00-{TRACE}-{SPAN}-0x"),
            format!("00-{}-{SPAN}-01", &TRACE[1..]),
            format!("00_{TRACE}-{SPAN}-01"),
            String::new(),
        ] {
            assert_eq!(read_traceparent(&bad), None, "{bad}");
        }
        // Flags other than sampled are not passed on.
        let (_, _, flags) = read_traceparent(&format!("00-{TRACE}-{SPAN}-ff")).unwrap();
        assert_eq!(flags, TraceFlags::SAMPLED);
    }

    #[test]
    fn a_hop_is_one_finished_span_under_the_message_and_its_context_goes_on() {
        let (tracer, exporter) = traced();
        let info = MessageInfo {
            message_type: Some("event"),
            thing_id: Some("urn:t"),
            affordance: Some("e"),
            message_id: Some("m1"),
            correlation_id: None,
            recipients: Some(3),
        };
        let out = tracer
            .hop(
                Operation::Process,
                "lmos/urn:t/events/e",
                Some(&incoming("01")),
                &info,
                None,
            )
            .unwrap();
        let spans = exporter.get_finished_spans().unwrap();
        let [span] = &spans[..] else {
            panic!("one span: {spans:?}")
        };
        assert_eq!(span.name, "process lmos/urn:t/events/e");
        assert_eq!(span.span_kind, SpanKind::Consumer);
        assert_eq!(span.span_context.trace_id().to_string(), TRACE);
        assert_eq!(span.parent_span_id.to_string(), SPAN);
        assert!(span.parent_span_is_remote);
        assert_eq!(
            span.span_context.trace_state().header(),
            "congo=t61rcWkgMzE"
        );
        assert!(span
            .attributes
            .contains(&KeyValue::new("lmos.recipients", 3_i64)));
        assert_eq!(
            out.traceparent,
            format!("00-{TRACE}-{}-01", span.span_context.span_id())
        );
        assert_eq!(out.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
    }

    #[test]
    fn an_unsampled_parent_gets_an_unsampled_context_and_no_span() {
        let (tracer, exporter) = traced();
        let out = tracer
            .hop(
                Operation::Publish,
                "t",
                Some(&incoming("00")),
                &MessageInfo::default(),
                None,
            )
            .unwrap();
        assert!(exporter.get_finished_spans().unwrap().is_empty());
        let (trace, span, flags) = read_traceparent(&out.traceparent).unwrap();
        assert_eq!(trace.to_string(), TRACE);
        assert_ne!(span.to_string(), SPAN, "a span ID of its own");
        assert_eq!(flags, TraceFlags::default());
    }

    #[test]
    fn while_exports_fail_spans_are_counted_not_built_but_for_a_probe() {
        let exporter = InMemorySpanExporter::default();
        let counters = SpanCounters::default();
        let sink = SpanSink::new(Arc::new(SimpleSpanProcessor::new(exporter.clone())))
            .with_counters(counters.clone());
        let tracer = MessageTracer::new(Some(sink), true, false);
        let hop = || {
            tracer
                .hop(
                    Operation::Publish,
                    "t",
                    Some(&incoming("01")),
                    &MessageInfo::default(),
                    None,
                )
                .expect("the context goes on either way")
        };
        hop();
        assert_eq!(exporter.get_finished_spans().unwrap().len(), 1);
        counters.set_failing(true);
        for _ in 0..10 {
            hop();
        }
        assert_eq!(exporter.get_finished_spans().unwrap().len(), 1, "held back");
        let dropped = crate::telemetry::metrics::Metrics::with_spans(&counters).render();
        assert!(
            dropped.contains(r#"lmos_sidecar_spans_dropped_total{reason="export_failed"} 10"#),
            "{dropped}"
        );
        std::thread::sleep(PROBE_EVERY);
        hop();
        hop();
        assert_eq!(exporter.get_finished_spans().unwrap().len(), 2, "one probe");
        counters.set_failing(false);
        hop();
        assert_eq!(exporter.get_finished_spans().unwrap().len(), 3);
    }

    #[test]
    fn an_untraced_message_starts_a_sampled_trace() {
        let (tracer, exporter) = traced();
        let out = tracer
            .hop(
                Operation::Publish,
                "t",
                None,
                &MessageInfo::default(),
                Some("boom"),
            )
            .unwrap();
        let spans = exporter.get_finished_spans().unwrap();
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].parent_span_id, SpanId::INVALID);
        assert_eq!(spans[0].status, Status::error("boom"));
        let (trace, _, flags) = read_traceparent(&out.traceparent).unwrap();
        assert_eq!(trace, spans[0].span_context.trace_id());
        assert!(flags.is_sampled());
    }
}
