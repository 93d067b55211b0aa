//! The parent of a message's spans: read from its W3C trace context, or
//! the root of a new trace.

use std::str::FromStr;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use opentelemetry_sdk::trace::IdGenerator;

use super::{ids, TraceContext};

/// The parent of a message's spans.
#[derive(Debug, Clone)]
pub struct Parent {
    pub(super) trace_id: TraceId,
    /// `INVALID` for the root of a new trace.
    pub(super) span_id: SpanId,
    /// Only the sampled flag: the others are not passed on (W3C trace
    /// context, "other flags").
    pub(super) flags: TraceFlags,
    /// Read from a message (another process's span), not one of ours.
    pub(super) remote: bool,
    /// The `tracestate` as parsed, for the spans; as it came, for the
    /// messages.
    pub(super) state: TraceState,
    pub(super) tracestate: Option<String>,
}

impl Parent {
    /// From a message's `traceparent` and `tracestate`, read as the W3C
    /// trace context says: lowercase hex, version `ff` invalid, version
    /// `00` exactly 55 characters, later versions at least that with any
    /// further part after a `-`; IDs not all zeros. An unreadable
    /// `tracestate` is kept in the message but not in the span, as the
    /// SDK's propagator did.
    pub(in crate::telemetry) fn remote(
        traceparent: &str,
        tracestate: Option<&str>,
    ) -> Option<Parent> {
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
    pub(in crate::telemetry) fn root() -> Parent {
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
    pub(super) fn context(&self) -> Context {
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

pub(super) fn read_traceparent(tp: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
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
