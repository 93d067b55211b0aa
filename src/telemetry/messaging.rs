//! One span per LMOS message hop through the sidecar, following the
//! OpenTelemetry messaging conventions: `publish {destination}` (PRODUCER)
//! when the sidecar sends a message on, `process {destination}` (CONSUMER)
//! when it hands one to a recipient. The incoming `traceparent` is the
//! parent; the message sent on carries the new span's `traceparent` and the
//! incoming `tracestate`, unchanged.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracer;

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
#[derive(Clone, Default)]
pub struct MessageTracer {
    tracer: Option<SdkTracer>,
    new_trace_for_untraced: bool,
    mqtt5_user_properties: bool,
}

impl std::fmt::Debug for MessageTracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageTracer")
            .field("on", &self.tracer.is_some())
            .finish()
    }
}

impl MessageTracer {
    pub fn new(
        tracer: Option<SdkTracer>,
        new_trace_for_untraced: bool,
        mqtt5_user_properties: bool,
    ) -> MessageTracer {
        MessageTracer {
            tracer,
            new_trace_for_untraced,
            mqtt5_user_properties,
        }
    }

    /// Whether publications carry the context as MQTT 5 user properties too.
    pub fn mqtt5_user_properties(&self) -> bool {
        self.mqtt5_user_properties
    }

    pub fn is_on(&self) -> bool {
        self.tracer.is_some()
    }

    fn extract(incoming: &TraceContext) -> Option<Context> {
        let mut carrier = HashMap::with_capacity(2);
        carrier.insert("traceparent".to_owned(), incoming.traceparent.clone());
        if let Some(s) = &incoming.tracestate {
            carrier.insert("tracestate".to_owned(), s.clone());
        }
        let cx = TraceContextPropagator::new().extract(&carrier);
        cx.span().span_context().is_valid().then_some(cx)
    }

    /// The parent of the spans for one message, read once however many
    /// recipients it has. `None` when tracing is off, or the message has no
    /// (valid) trace context and untraced messages do not start traces.
    pub fn parent(&self, incoming: Option<&TraceContext>) -> Option<Parent> {
        self.tracer.as_ref()?;
        let context = match incoming.and_then(Self::extract) {
            Some(cx) => cx,
            None if self.new_trace_for_untraced => Context::new(),
            None => return None,
        };
        Some(Parent {
            context,
            tracestate: incoming.and_then(|i| i.tracestate.clone()),
        })
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
        let tracer = self.tracer.as_ref()?;
        let (operation_type, kind) = operation.kind();
        let mut attributes = Vec::with_capacity(10);
        attributes.extend([
            KeyValue::new("messaging.system", "lmos"),
            KeyValue::new("messaging.destination.name", destination.to_owned()),
            KeyValue::new("messaging.operation.type", operation_type),
            KeyValue::new("messaging.operation.name", operation.name()),
        ]);
        let optional = [
            ("messaging.message.id", info.message_id),
            ("lmos.message_type", info.message_type),
            ("lmos.thing_id", info.thing_id),
            ("lmos.affordance", info.affordance),
            ("lmos.correlation_id", info.correlation_id),
        ];
        for (key, value) in optional {
            if let Some(v) = value {
                attributes.push(KeyValue::new(key, v.to_owned()));
            }
        }
        if let Some(n) = info.recipients {
            attributes.push(KeyValue::new("lmos.recipients", n as i64));
        }
        let mut span = tracer
            .span_builder(format!("{} {destination}", operation.name()))
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(tracer, &parent.context);
        if let Some(e) = error {
            span.set_status(Status::error(e.to_owned()));
        }
        let span_context = span.span_context().clone();
        span.end();
        Some(TraceContext {
            traceparent: format!(
                "00-{}-{}-{:02x}",
                span_context.trace_id(),
                span_context.span_id(),
                span_context.trace_flags().to_u8()
            ),
            // Passed on as it came, not as the propagator re-encodes it.
            tracestate: parent.tracestate.clone(),
        })
    }
}

/// The parent of a message's spans.
#[derive(Debug, Clone)]
pub struct Parent {
    context: Context,
    tracestate: Option<String>,
}

impl Parent {
    /// The context of a span of this message, as the parent of further ones
    /// (e.g. the consumer spans under a stand-in producer).
    pub fn child(&self, span: &TraceContext) -> Option<Parent> {
        let context = MessageTracer::extract(span)?;
        Some(Parent {
            context,
            tracestate: self.tracestate.clone(),
        })
    }
}
