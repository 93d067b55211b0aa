//! OTLP protobuf, written by hand: the wire primitives, and the resource
//! and scope messages every request carries ([`super::hop_wire`] writes the
//! spans and the request around them).
//!
//! The OTLP exporter of `opentelemetry-otlp` clones every batch (to be able
//! to retry it), turns each span into `opentelemetry-proto`'s structures (a
//! string allocated for every attribute's key and value) and only then
//! encodes them; under a fan-out that was most of what tracing cost
//! (issue 16). The field numbers are those of
//! `opentelemetry/proto/trace/v1/trace.proto`, `common/v1/common.proto` and
//! `resource/v1/resource.proto`; `hop_wire`'s tests decode the output with
//! the generated types and compare it with what the SDK's own conversion
//! makes of the same spans.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::SpanKind;
use opentelemetry::{Array, InstrumentationScope, Value};
use opentelemetry_sdk::Resource;

pub(super) const VARINT: u32 = 0;
pub(super) const FIXED64: u32 = 1;
pub(super) const LEN: u32 = 2;
pub(super) const FIXED32: u32 = 5;

/// `SpanFlags`: the span says whether its parent was remote, and if so.
pub(super) const CONTEXT_HAS_IS_REMOTE: u32 = 0x100;
pub(super) const CONTEXT_IS_REMOTE: u32 = 0x200;

/// The resource every batch is reported under, encoded once.
#[derive(Debug, Clone, Default)]
pub struct EncodedResource {
    /// The `Resource` message's fields.
    pub(super) fields: Vec<u8>,
    pub(super) schema_url: Option<String>,
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

/// The bytes a length-delimited field of `len` bytes takes.
pub(super) fn len_delimited(field: u32, len: usize) -> usize {
    tag_len(field) + varint_len(len as u64) + len
}

/// `InstrumentationScope` as field 1 of `ScopeSpans`.
pub(super) fn put_scope(out: &mut Vec<u8>, scope: &InstrumentationScope) {
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

/// `Span.SpanKind`.
pub(super) fn kind(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

pub(super) fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
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

pub(super) fn put_tag(out: &mut Vec<u8>, field: u32, wire: u32) {
    put_varint(out, u64::from(field << 3 | wire));
}

pub(super) fn tag_len(field: u32) -> usize {
    varint_len(u64::from(field << 3))
}

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn varint_len(v: u64) -> usize {
    // 1 byte per 7 bits, at least one.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

pub(super) fn put_varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    put_tag(out, field, VARINT);
    put_varint(out, v);
}

pub(super) fn put_fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    put_tag(out, field, FIXED64);
    out.extend_from_slice(&v.to_le_bytes());
}

pub(super) fn put_fixed32(out: &mut Vec<u8>, field: u32, v: u32) {
    put_tag(out, field, FIXED32);
    out.extend_from_slice(&v.to_le_bytes());
}

pub(super) fn put_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_tag(out, field, LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

pub(super) fn put_string(out: &mut Vec<u8>, field: u32, s: &str) {
    put_bytes(out, field, s.as_bytes());
}

pub(super) fn string_len(field: u32, s: &str) -> usize {
    tag_len(field) + varint_len(s.len() as u64) + s.len()
}

#[cfg(test)]
mod tests {
    use super::*;

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
