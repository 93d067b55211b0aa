//! Message spans written straight from the hop into OTLP protobuf (the
//! request around a batch of them is [`super::envelope`]'s).
//!
//! Through the SDK's processor, each span was built as `SpanData` on the
//! thread the message passed (a string for the name, the attribute list,
//! a string per attribute value), moved through its queue and freed on the
//! exporter's thread. Under a fan-out that exporting path cost some 5 µs
//! of CPU per span, most of it the allocator's: memory freed on another
//! thread than the one that took it goes back under the arena's lock, and
//! leaves the taking thread's cache empty (issue 16). Written here, a span
//! costs no allocation: its bytes go into the open batch's buffer, and
//! buffers go round between the hops and the exporter.
//!
//! The tests decode what is written with the generated OTLP types and
//! compare it with the SDK's own conversion of the `SpanData` the other
//! path (the tests' in-memory exporter) makes of the same hop.

use opentelemetry::trace::SpanId;

use super::messaging::{Attr, Hop};
use super::otlp_wire::{
    kind, nanos, put_bytes, put_fixed32, put_fixed64, put_string, put_tag, put_varint,
    put_varint_field, string_len, tag_len, varint_len, CONTEXT_HAS_IS_REMOTE, CONTEXT_IS_REMOTE,
    LEN,
};

/// Appends `hop` as one entry of `ScopeSpans.spans` (field 2), its fields
/// first written into `scratch` to learn their length.
pub(super) fn put_hop(out: &mut Vec<u8>, scratch: &mut Vec<u8>, hop: &Hop<'_>) {
    scratch.clear();
    put_span(scratch, hop);
    put_bytes(out, 2, scratch);
}

/// A `Span` message's fields, in their numbers' order.
fn put_span(out: &mut Vec<u8>, hop: &Hop<'_>) {
    put_bytes(out, 1, &hop.trace_id().to_bytes());
    put_bytes(out, 2, &hop.span_id.to_bytes());
    if hop.state != &Default::default() {
        let state = hop.state.header();
        if !state.is_empty() {
            put_string(out, 3, &state);
        }
    }
    if hop.parent_span_id() != SpanId::INVALID {
        put_bytes(out, 4, &hop.parent_span_id().to_bytes());
    }
    let (operation, destination) = hop.name_parts();
    put_tag(out, 5, LEN);
    put_varint(out, (operation.len() + 1 + destination.len()) as u64);
    out.extend_from_slice(operation.as_bytes());
    out.push(b' ');
    out.extend_from_slice(destination.as_bytes());
    put_varint_field(out, 6, kind(&hop.kind()));
    put_fixed64(out, 7, nanos(hop.start));
    put_fixed64(out, 8, nanos(hop.time));
    for (key, value) in hop.attributes() {
        put_attribute(out, key, value);
    }
    // Always written, an unset status too (as the SDK's conversion does).
    match hop.error {
        None => put_bytes(out, 15, &[]),
        Some(description) => {
            let len = string_len(2, description) + tag_len(3) + 1;
            put_tag(out, 15, LEN);
            put_varint(out, len as u64);
            put_string(out, 2, description);
            put_varint_field(out, 3, 2);
        }
    }
    let remote = if hop.parent_is_remote() {
        CONTEXT_IS_REMOTE
    } else {
        0
    };
    put_fixed32(
        out,
        16,
        u32::from(hop.flags.to_u8()) | CONTEXT_HAS_IS_REMOTE | remote,
    );
}

/// A `KeyValue` as `Span.attributes` (field 9).
fn put_attribute(out: &mut Vec<u8>, key: &str, value: Attr<'_>) {
    let value_len = match value {
        Attr::Str(s) => string_len(1, s),
        Attr::Int(n) => tag_len(3) + varint_len(n as u64),
    };
    let len = string_len(1, key) + tag_len(2) + varint_len(value_len as u64) + value_len;
    put_tag(out, 9, LEN);
    put_varint(out, len as u64);
    put_string(out, 1, key);
    put_tag(out, 2, LEN);
    put_varint(out, value_len as u64);
    match value {
        Attr::Str(s) => put_string(out, 1, s),
        Attr::Int(n) => put_varint_field(out, 3, n as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::envelope::Envelope;
    use crate::telemetry::messaging::{self, MessageInfo, Operation, Parent};
    use opentelemetry::trace::{TraceFlags, TraceState};
    use opentelemetry::KeyValue;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::Resource;
    use prost::Message as _;
    use std::str::FromStr;
    use std::time::{Duration, SystemTime};

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    /// The request the exporter sends for `hops`, decoded.
    fn encoded(
        hops: &[Hop<'_>],
        resource: &Resource,
        scope: &opentelemetry::InstrumentationScope,
    ) -> ExportTraceServiceRequest {
        let (mut spans, mut scratch) = (Vec::new(), Vec::new());
        for h in hops {
            put_hop(&mut spans, &mut scratch, h);
        }
        let (mut header, mut trailer) = (Vec::new(), Vec::new());
        Envelope::new(resource, scope).wrap(spans.len(), &mut header, &mut trailer);
        ExportTraceServiceRequest::decode(&[header, spans, trailer].concat()[..]).unwrap()
    }

    /// The SDK gathers the resource's attributes in a hash map.
    fn sorted(mut request: ExportTraceServiceRequest) -> ExportTraceServiceRequest {
        for rs in &mut request.resource_spans {
            if let Some(resource) = &mut rs.resource {
                resource.attributes.sort_by(|a, b| a.key.cmp(&b.key));
            }
        }
        request
    }

    /// Every shape a hop's span takes: remote parent with and without
    /// trace state, a new trace's root, an error, each kind, every
    /// optional attribute, a recipient count, non-ASCII text.
    #[test]
    fn requests_decode_as_the_sdks_own_conversion_of_the_same_hops() {
        let with_state =
            Parent::remote(PARENT, Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")).unwrap();
        let plain = Parent::remote(PARENT, None).unwrap();
        let root = Parent::root();
        let full = MessageInfo {
            message_type: Some("event"),
            thing_id: Some("urn:t"),
            affordance: Some("température"),
            message_id: Some("m1"),
            correlation_id: Some("c1"),
            recipients: Some(10_000),
        };
        let none = MessageInfo::default();
        let state = TraceState::from_str("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7").unwrap();
        let empty = TraceState::default();
        let time = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_732_000_000_123_456_789);
        let hop = |parent, state, operation, info, error, n: u64| Hop {
            span_id: SpanId::from(n),
            flags: TraceFlags::SAMPLED,
            state,
            parent,
            operation,
            destination: "lmos/urn:t/events/e",
            info,
            error,
            time,
            start: time,
            rpc: None,
        };
        let hops = [
            hop(&with_state, &state, Operation::Process, &full, None, 1),
            hop(
                &plain,
                &empty,
                Operation::Publish,
                &none,
                Some("agent failed"),
                2,
            ),
            hop(&root, &empty, Operation::Publish, &full, None, 3),
        ];
        let resource = Resource::builder()
            .with_service_name("lmos-sidecar")
            .with_schema_url([KeyValue::new("host.name", "h")], "https://example.com/s")
            .build();
        let scope = messaging::scope();

        let decoded = sorted(encoded(&hops, &resource, &scope));
        let expected = sorted(ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(
                hops.iter().map(|h| h.span_data(&scope)).collect(),
                &ResourceAttributesWithSchema::from(&resource),
            ),
        });
        assert_eq!(decoded, expected);
        let spans = &decoded.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 3);
        assert_eq!(
            spans[0].trace_state,
            "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
        );
        assert_eq!(spans[1].status.as_ref().unwrap().message, "agent failed");
        assert!(spans[2].parent_span_id.is_empty(), "a root has no parent");
    }
}
