//! One hop's span as both sinks write it: its name, kind and attributes,
//! and the SDK's finished record of it for the processor path.

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use super::{span_name, MessageInfo, Operation, Parent, RpcInfo};
use crate::telemetry::otlp_wire::{kind, nanos};
use crate::telemetry::recent::{AttrText, SpanHead, StoredSpan};

/// One hop's span, as both sinks write it.
pub(in crate::telemetry) struct Hop<'a> {
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
pub(in crate::telemetry) enum Attr<'a> {
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
            Some(rpc) if rpc.client => SpanKind::Client,
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
    pub fn attributes(&self) -> impl Iterator<Item = (&'static str, Attr<'a>)> + Clone + '_ {
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

    /// The finished span as the recent-span store keeps it.
    pub(in crate::telemetry) fn stored(&self) -> StoredSpan {
        let parent = self.parent_span_id();
        let head = SpanHead {
            trace_id: self.trace_id().to_bytes(),
            span_id: self.span_id.to_bytes(),
            parent_id: (parent != SpanId::INVALID).then(|| parent.to_bytes()),
            parent_remote: self.parent_is_remote(),
            kind: kind(&self.kind()) as u8,
            start_unix_nanos: nanos(self.start),
            end_unix_nanos: nanos(self.time),
        };
        let attributes = self.attributes().map(|(key, value)| {
            let text = match value {
                Attr::Str(s) => AttrText::Str(s),
                Attr::Int(n) => AttrText::Int(n),
            };
            (key, text)
        });
        StoredSpan::new(head, self.name_parts(), attributes, self.error)
    }

    /// The finished span as the SDK's processors take it.
    pub(in crate::telemetry) fn span_data(&self, scope: &InstrumentationScope) -> SpanData {
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
