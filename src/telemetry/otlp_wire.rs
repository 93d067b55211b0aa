//! The protobuf wire primitives [`super::hop_wire`] writes a message's
//! span with, by hand, and the OTLP values it needs.
//!
//! The OTLP exporter of `opentelemetry-otlp` cloned every batch (to be able
//! to retry it), turned each span into `opentelemetry-proto`'s structures (a
//! string allocated for every attribute's key and value) and only then
//! encoded them; under a fan-out that was most of what tracing cost
//! (issue 16). Only the spans are written by hand: the resource and scope
//! around them are encoded once, with the generated types
//! ([`super::hop_wire::Envelope`]). The field numbers are those of
//! `opentelemetry/proto/trace/v1/trace.proto` and `common/v1/common.proto`;
//! `hop_wire`'s tests decode the output with the generated types and
//! compare it with what the SDK's own conversion makes of the same spans.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::SpanKind;

pub(super) const VARINT: u32 = 0;
pub(super) const FIXED64: u32 = 1;
pub(super) const LEN: u32 = 2;
pub(super) const FIXED32: u32 = 5;

/// `SpanFlags`: the span says whether its parent was remote, and if so.
pub(super) const CONTEXT_HAS_IS_REMOTE: u32 = 0x100;
pub(super) const CONTEXT_IS_REMOTE: u32 = 0x200;

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
