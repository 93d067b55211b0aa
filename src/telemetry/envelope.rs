//! What goes around a batch of spans to make an `ExportTraceServiceRequest`:
//! one `ResourceSpans` with one `ScopeSpans`, its resource and scope built
//! with `opentelemetry-proto`'s generated types and encoded once by prost.
//! Only the lengths change from batch to batch, so each request gets a
//! header and a trailer of a few bytes around the spans
//! [`super::hop_wire`] wrote; nothing about a span is encoded here.

use opentelemetry::InstrumentationScope;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope as ProtoScope;
use opentelemetry_proto::tonic::resource::v1::Resource as ProtoResource;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_sdk::Resource;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, string, WireType};

/// `ExportTraceServiceRequest.resource_spans`, `ResourceSpans.scope_spans`,
/// and the `resource` and `scope` fields they open with: all field 1 but
/// `scope_spans`.
const RESOURCE_SPANS: u32 = 1;
const RESOURCE: u32 = 1;
const SCOPE_SPANS: u32 = 2;
const SCOPE: u32 = 1;
/// `schema_url` of both `ResourceSpans` and `ScopeSpans`.
const SCHEMA_URL: u32 = 3;

/// The resource and scope every batch is reported under, encoded.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// `ResourceSpans.resource`, key and length included.
    resource: Vec<u8>,
    /// `ScopeSpans.scope`, key and length included.
    scope: Vec<u8>,
    /// `ResourceSpans.schema_url`, when set (proto3 leaves an empty one out).
    resource_schema_url: Option<String>,
    scope_schema_url: Option<String>,
}

impl Envelope {
    pub fn new(resource: &Resource, scope: &InstrumentationScope) -> Envelope {
        let with_schema = ResourceAttributesWithSchema::from(resource);
        let resource_message = ProtoResource {
            attributes: with_schema.attributes.0,
            ..Default::default()
        };
        let scope_message = ProtoScope::from((scope, None));
        let mut encoded_resource = Vec::new();
        prost::encoding::message::encode(RESOURCE, &resource_message, &mut encoded_resource);
        let mut encoded_scope = Vec::new();
        prost::encoding::message::encode(SCOPE, &scope_message, &mut encoded_scope);
        Envelope {
            resource: encoded_resource,
            scope: encoded_scope,
            resource_schema_url: with_schema.schema_url.filter(|u| !u.is_empty()),
            scope_schema_url: scope
                .schema_url()
                .filter(|u| !u.is_empty())
                .map(str::to_owned),
        }
    }

    /// The bytes before and after `spans_len` bytes of spans, fields in
    /// their numbers' order as prost would write them.
    pub fn wrap(&self, spans_len: usize, header: &mut Vec<u8>, trailer: &mut Vec<u8>) {
        header.clear();
        trailer.clear();
        let scope_spans_len = self.scope.len() + spans_len + schema_url_len(&self.scope_schema_url);
        let resource_spans_len = self.resource.len()
            + key_len(SCOPE_SPANS)
            + encoded_len_varint(scope_spans_len as u64)
            + scope_spans_len
            + schema_url_len(&self.resource_schema_url);
        encode_key(RESOURCE_SPANS, WireType::LengthDelimited, header);
        encode_varint(resource_spans_len as u64, header);
        header.extend_from_slice(&self.resource);
        encode_key(SCOPE_SPANS, WireType::LengthDelimited, header);
        encode_varint(scope_spans_len as u64, header);
        header.extend_from_slice(&self.scope);
        put_schema_url(trailer, &self.scope_schema_url);
        put_schema_url(trailer, &self.resource_schema_url);
    }
}

/// A `schema_url` field's bytes, if it is written.
fn schema_url_len(url: &Option<String>) -> usize {
    url.as_ref()
        .map_or(0, |u| string::encoded_len(SCHEMA_URL, u))
}

fn put_schema_url(out: &mut Vec<u8>, url: &Option<String>) {
    if let Some(u) = url {
        string::encode(SCHEMA_URL, u, out);
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::{InstrumentationScope, KeyValue};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use opentelemetry_sdk::Resource;
    use prost::Message as _;

    use super::Envelope;

    /// Both schema URLs, attributes of every kind on resource and scope,
    /// and no spans: what is written decodes as what was given.
    #[test]
    fn the_envelope_decodes_as_the_resource_and_scope_it_was_built_from() {
        let resource = Resource::builder_empty()
            .with_schema_url(
                [
                    KeyValue::new("service.name", "s"),
                    KeyValue::new("n", 7_i64),
                    KeyValue::new("on", true),
                    KeyValue::new("x", 0.5),
                    KeyValue::new("a", opentelemetry::Value::Array(vec![1_i64, 2].into())),
                ],
                "https://example.com/r",
            )
            .build();
        let scope = InstrumentationScope::builder("lib")
            .with_version("1.2")
            .with_schema_url("https://example.com/s")
            .with_attributes([KeyValue::new("k", "v")])
            .build();
        let (mut header, mut trailer) = (Vec::new(), Vec::new());
        let envelope = Envelope::new(&resource, &scope);
        envelope.wrap(0, &mut header, &mut trailer);
        let request = ExportTraceServiceRequest::decode(&[header, trailer].concat()[..]).unwrap();
        let rs = &request.resource_spans[0];
        assert_eq!(rs.schema_url, "https://example.com/r");
        let mut keys: Vec<_> = rs.resource.as_ref().unwrap().attributes.iter().collect();
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        let value = |i: usize| keys[i].value.as_ref().unwrap().value.clone().unwrap();
        assert!(matches!(value(0), Value::ArrayValue(a) if a.values.len() == 2));
        assert_eq!(value(1), Value::IntValue(7));
        assert_eq!(value(2), Value::BoolValue(true));
        assert_eq!(value(4), Value::DoubleValue(0.5));
        let ss = &rs.scope_spans[0];
        assert_eq!(ss.schema_url, "https://example.com/s");
        assert!(ss.spans.is_empty());
        let decoded_scope = ss.scope.as_ref().unwrap();
        assert_eq!(
            (&decoded_scope.name[..], &decoded_scope.version[..]),
            ("lib", "1.2")
        );
        assert_eq!(decoded_scope.attributes[0].key, "k");
    }
}
