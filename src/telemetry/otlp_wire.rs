//! Finished spans written straight into an OTLP `ExportTraceServiceRequest`
//! (protobuf), without building the generated message types first.
//!
//! The OTLP exporter of `opentelemetry-otlp` clones every batch (to be able
//! to retry it), turns each span into `opentelemetry-proto`'s structures (a
//! string allocated for every attribute's key and value) and only then
//! encodes them; under a fan-out that was most of what tracing cost
//! (issue 16). Here each batch is encoded once, into one buffer, and a
//! retry would send the same bytes. The field numbers are those of
//! `opentelemetry/proto/trace/v1/trace.proto` and `common/v1/common.proto`;
//! the tests decode the output with the generated types and compare it with
//! what the SDK's own conversion makes of the same spans.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{Array, InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::SpanData;
use opentelemetry_sdk::Resource;

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

/// `SpanFlags`: the span says whether its parent was remote, and if so.
const CONTEXT_HAS_IS_REMOTE: u32 = 0x100;
const CONTEXT_IS_REMOTE: u32 = 0x200;

/// The resource every batch is reported under, encoded once.
#[derive(Debug, Clone, Default)]
pub struct EncodedResource {
    /// The `Resource` message's fields.
    fields: Vec<u8>,
    schema_url: Option<String>,
}

impl EncodedResource {
    pub fn new(resource: &Resource) -> EncodedResource {
        let mut fields = Vec::new();
        for (key, value) in resource.iter() {
            put_key_value(&mut fields, 1, key.as_str(), value);
        }
        EncodedResource {
            fields,
            schema_url: resource.schema_url().map(str::to_owned),
        }
    }
}

/// Reusable buffers; one per exporter.
#[derive(Debug, Default)]
pub struct Encoder {
    /// One span's fields, before its length is known.
    span: Vec<u8>,
    /// Per scope: the `ScopeSpans` fields (scope, spans, schema URL).
    scopes: Vec<Vec<u8>>,
}

impl Encoder {
    /// `ExportTraceServiceRequest` for `batch`: one `ResourceSpans`, one
    /// `ScopeSpans` per instrumentation scope, in the order first seen.
    ///
    /// A span is encoded once and copied twice: into its scope's buffer,
    /// then into the request, whose outer lengths are sums known by then.
    pub fn request(&mut self, resource: &EncodedResource, batch: &[SpanData]) -> Vec<u8> {
        let mut scopes: Vec<&InstrumentationScope> = Vec::new();
        for span in batch {
            if !scopes.contains(&&span.instrumentation_scope) {
                scopes.push(&span.instrumentation_scope);
            }
        }
        if self.scopes.len() < scopes.len() {
            self.scopes.resize_with(scopes.len(), Vec::new);
        }
        for (scope, out) in scopes.iter().zip(&mut self.scopes) {
            out.clear();
            put_scope(out, scope);
            for span in batch.iter().filter(|s| &&s.instrumentation_scope == scope) {
                self.span.clear();
                put_span(&mut self.span, span);
                put_bytes(out, 2, &self.span);
            }
            if let Some(url) = scope.schema_url() {
                put_string(out, 3, url);
            }
        }
        let bodies = &self.scopes[..scopes.len()];
        let schema_len = resource
            .schema_url
            .as_deref()
            .map_or(0, |u| string_len(3, u));
        let resource_spans_len = len_delimited(1, resource.fields.len())
            + bodies
                .iter()
                .map(|b| len_delimited(2, b.len()))
                .sum::<usize>()
            + schema_len;
        let mut request = Vec::with_capacity(len_delimited(1, resource_spans_len));
        put_tag(&mut request, 1, LEN);
        put_varint(&mut request, resource_spans_len as u64);
        put_bytes(&mut request, 1, &resource.fields);
        for body in bodies {
            put_bytes(&mut request, 2, body);
        }
        if let Some(url) = &resource.schema_url {
            put_string(&mut request, 3, url);
        }
        debug_assert_eq!(request.len(), request.capacity());
        request
    }
}

/// The bytes a length-delimited field of `len` bytes takes.
fn len_delimited(field: u32, len: usize) -> usize {
    tag_len(field) + varint_len(len as u64) + len
}

/// `InstrumentationScope` as field 1 of `ScopeSpans`.
fn put_scope(out: &mut Vec<u8>, scope: &InstrumentationScope) {
    let mut fields = Vec::new();
    put_string(&mut fields, 1, scope.name());
    if let Some(version) = scope.version() {
        put_string(&mut fields, 2, version);
    }
    for kv in scope.attributes() {
        put_key_value(&mut fields, 3, kv.key.as_str(), &kv.value);
    }
    put_bytes(out, 1, &fields);
}

fn put_span(out: &mut Vec<u8>, span: &SpanData) {
    let context = &span.span_context;
    put_bytes(out, 1, &context.trace_id().to_bytes());
    put_bytes(out, 2, &context.span_id().to_bytes());
    let state = context.trace_state().header();
    if !state.is_empty() {
        put_string(out, 3, &state);
    }
    if span.parent_span_id != opentelemetry::trace::SpanId::INVALID {
        put_bytes(out, 4, &span.parent_span_id.to_bytes());
    }
    put_string(out, 5, &span.name);
    put_varint_field(out, 6, kind(&span.span_kind));
    put_fixed64(out, 7, nanos(span.start_time));
    put_fixed64(out, 8, nanos(span.end_time));
    for kv in &span.attributes {
        put_attribute(out, 9, kv);
    }
    if span.dropped_attributes_count > 0 {
        put_varint_field(out, 10, u64::from(span.dropped_attributes_count));
    }
    for event in span.events.iter() {
        let mut fields = Vec::new();
        put_fixed64(&mut fields, 1, nanos(event.timestamp));
        put_string(&mut fields, 2, &event.name);
        for kv in &event.attributes {
            put_attribute(&mut fields, 3, kv);
        }
        if event.dropped_attributes_count > 0 {
            put_varint_field(&mut fields, 4, u64::from(event.dropped_attributes_count));
        }
        put_bytes(out, 11, &fields);
    }
    if span.events.dropped_count > 0 {
        put_varint_field(out, 12, u64::from(span.events.dropped_count));
    }
    for link in span.links.iter() {
        let linked = &link.span_context;
        let mut fields = Vec::new();
        put_bytes(&mut fields, 1, &linked.trace_id().to_bytes());
        put_bytes(&mut fields, 2, &linked.span_id().to_bytes());
        let state = linked.trace_state().header();
        if !state.is_empty() {
            put_string(&mut fields, 3, &state);
        }
        for kv in &link.attributes {
            put_attribute(&mut fields, 4, kv);
        }
        if link.dropped_attributes_count > 0 {
            put_varint_field(&mut fields, 5, u64::from(link.dropped_attributes_count));
        }
        let remote = if linked.is_remote() {
            CONTEXT_IS_REMOTE
        } else {
            0
        };
        put_fixed32(
            &mut fields,
            6,
            u32::from(linked.trace_flags().to_u8()) | CONTEXT_HAS_IS_REMOTE | remote,
        );
        put_bytes(out, 13, &fields);
    }
    if span.links.dropped_count > 0 {
        put_varint_field(out, 14, u64::from(span.links.dropped_count));
    }
    // Always written, an unset status too (as the SDK's conversion does).
    let mut status = Vec::new();
    match &span.status {
        Status::Unset => {}
        Status::Ok => put_varint_field(&mut status, 3, 1),
        Status::Error { description } => {
            put_string(&mut status, 2, description);
            put_varint_field(&mut status, 3, 2);
        }
    }
    put_bytes(out, 15, &status);
    let remote = if span.parent_span_is_remote {
        CONTEXT_IS_REMOTE
    } else {
        0
    };
    put_fixed32(
        out,
        16,
        u32::from(context.trace_flags().to_u8()) | CONTEXT_HAS_IS_REMOTE | remote,
    );
}

/// `Span.SpanKind`.
fn kind(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn put_attribute(out: &mut Vec<u8>, field: u32, kv: &KeyValue) {
    put_key_value(out, field, kv.key.as_str(), &kv.value);
}

/// A `KeyValue` message as field `field`. Its length is worked out first,
/// so that nothing is encoded twice.
fn put_key_value(out: &mut Vec<u8>, field: u32, key: &str, value: &Value) {
    let value_len = any_value_len(value);
    let len = string_len(1, key) + tag_len(2) + varint_len(value_len as u64) + value_len;
    put_tag(out, field, LEN);
    put_varint(out, len as u64);
    put_string(out, 1, key);
    put_tag(out, 2, LEN);
    put_varint(out, value_len as u64);
    put_any_value(out, value);
}

/// The fields of an `AnyValue` for `value`.
fn put_any_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Bool(b) => put_varint_field(out, 2, u64::from(*b)),
        Value::I64(n) => put_varint_field(out, 3, *n as u64),
        Value::F64(x) => put_fixed64(out, 4, x.to_bits()),
        Value::String(s) => put_string(out, 1, s.as_str()),
        Value::Array(array) => {
            let len = array_len(array);
            put_tag(out, 5, LEN);
            put_varint(out, len as u64);
            for_each_element(array, |element| {
                put_tag(out, 1, LEN);
                put_varint(out, any_value_len(&element) as u64);
                put_any_value(out, &element);
            });
        }
        other => put_string(out, 1, &other.to_string()),
    }
}

fn any_value_len(value: &Value) -> usize {
    match value {
        Value::Bool(b) => tag_len(2) + varint_len(u64::from(*b)),
        Value::I64(n) => tag_len(3) + varint_len(*n as u64),
        Value::F64(_) => tag_len(4) + 8,
        Value::String(s) => string_len(1, s.as_str()),
        Value::Array(array) => {
            let len = array_len(array);
            tag_len(5) + varint_len(len as u64) + len
        }
        other => string_len(1, &other.to_string()),
    }
}

/// The length of an `ArrayValue`'s fields.
fn array_len(array: &Array) -> usize {
    let mut len = 0;
    for_each_element(array, |element| {
        let n = any_value_len(&element);
        len += tag_len(1) + varint_len(n as u64) + n;
    });
    len
}

fn for_each_element(array: &Array, mut f: impl FnMut(Value)) {
    match array {
        Array::Bool(v) => v.iter().for_each(|b| f(Value::Bool(*b))),
        Array::I64(v) => v.iter().for_each(|n| f(Value::I64(*n))),
        Array::F64(v) => v.iter().for_each(|x| f(Value::F64(*x))),
        Array::String(v) => v.iter().for_each(|s| f(Value::String(s.clone()))),
        other => f(Value::String(other.to_string().into())),
    }
}

fn put_tag(out: &mut Vec<u8>, field: u32, wire: u32) {
    put_varint(out, u64::from(field << 3 | wire));
}

fn tag_len(field: u32) -> usize {
    varint_len(u64::from(field << 3))
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: u64) -> usize {
    // 1 byte per 7 bits, at least one.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    put_tag(out, field, VARINT);
    put_varint(out, v);
}

fn put_fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    put_tag(out, field, FIXED64);
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_fixed32(out: &mut Vec<u8>, field: u32, v: u32) {
    put_tag(out, field, FIXED32);
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_tag(out, field, LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn put_string(out: &mut Vec<u8>, field: u32, s: &str) {
    put_bytes(out, field, s.as_bytes());
}

fn string_len(field: u32, s: &str) -> usize {
    tag_len(field) + varint_len(s.len() as u64) + s.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceFlags, TraceId, TraceState, Tracer as _, TracerProvider as _,
    };
    use opentelemetry::{Context, Key};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use prost::Message as _;
    use std::str::FromStr;

    /// Spans of every shape the SDK makes: kinds, statuses, remote and local
    /// parents, trace state, events, links, every attribute type, two scopes.
    fn spans() -> Vec<SpanData> {
        use opentelemetry::trace::{Span as _, TraceContextExt as _};
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let scoped = provider.tracer_with_scope(
            InstrumentationScope::builder("other")
                .with_version("1.2")
                .with_schema_url("https://opentelemetry.io/schemas/1.21.0")
                .with_attributes([KeyValue::new("scope.attr", 7)])
                .build(),
        );
        let tracer = provider.tracer("lmos-sidecar");
        let remote = SpanContext::new(
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
            SpanId::from_hex("b7ad6b7169203331").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::from_str("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7").unwrap(),
        );
        let parent = Context::new().with_remote_span_context(remote.clone());
        let mut span = tracer
            .span_builder("process lmos/urn:t/events/e")
            .with_kind(SpanKind::Consumer)
            .with_attributes([
                KeyValue::new("messaging.system", "lmos"),
                KeyValue::new("lmos.recipients", 10_000_i64),
                KeyValue::new("negative", -3_i64),
                KeyValue::new("ratio", 0.25),
                KeyValue::new("flag", true),
                KeyValue::new(
                    Key::new("list"),
                    Value::Array(Array::String(vec!["a".into(), "b".into()])),
                ),
                KeyValue::new(Key::new("numbers"), Value::Array(Array::I64(vec![1, -1]))),
                KeyValue::new("escaped", "é \"quoted\" \u{0}"),
            ])
            .with_links(vec![opentelemetry::trace::Link::with_context(
                remote.clone(),
            )])
            .start_with_context(&tracer, &parent);
        span.add_event("chunk", vec![KeyValue::new("n", 1)]);
        span.set_status(Status::error("agent failed"));
        span.end();
        let mut ok = tracer.start("ok");
        ok.set_status(Status::Ok);
        ok.end();
        scoped.in_span("root in another scope", |cx| {
            tracer
                .span_builder("local child")
                .with_kind(SpanKind::Producer)
                .start_with_context(&tracer, &cx)
                .end();
        });
        provider.force_flush().unwrap();
        exporter.get_finished_spans().unwrap()
    }

    #[test]
    fn requests_decode_as_the_sdks_own_conversion_of_the_same_spans() {
        let spans = spans();
        assert_eq!(spans.len(), 4);
        let resource = Resource::builder()
            .with_service_name("lmos-sidecar")
            .with_schema_url([KeyValue::new("host.name", "h")], "https://example.com/s")
            .build();
        let ours = Encoder::default().request(&EncodedResource::new(&resource), &spans);
        let decoded = ExportTraceServiceRequest::decode(&ours[..]).unwrap();
        let mut expected = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(
                spans,
                &ResourceAttributesWithSchema::from(&resource),
            ),
        };
        // The SDK groups scopes through a hash map; the order of the
        // groups means nothing.
        let by_name = |r: &mut ExportTraceServiceRequest| {
            for rs in &mut r.resource_spans {
                rs.scope_spans.sort_by(|a, b| {
                    a.scope
                        .as_ref()
                        .map(|s| s.name.clone())
                        .cmp(&b.scope.as_ref().map(|s| s.name.clone()))
                });
                if let Some(resource) = &mut rs.resource {
                    resource.attributes.sort_by(|a, b| a.key.cmp(&b.key));
                }
            }
        };
        let mut decoded = decoded;
        by_name(&mut decoded);
        by_name(&mut expected);
        assert_eq!(decoded, expected);
    }

    #[test]
    fn varint_lengths_match_what_is_written() {
        for v in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
        }
    }
}
