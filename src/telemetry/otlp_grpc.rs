//! OTLP/gRPC export of the batches [`super::batches`] makes: one unary
//! `TraceService/Export` call per batch, its body the bytes as encoded,
//! through tonic's channel (HTTP/2, reconnecting on its own).
//!
//! What `opentelemetry-otlp`'s gRPC exporter read from the environment and
//! the sidecar relied on is read here too: `OTEL_EXPORTER_OTLP_TRACES_HEADERS`
//! / `OTEL_EXPORTER_OTLP_HEADERS` (`key=value` pairs, comma-separated, values
//! URL-encoded). The sidecar was built without TLS and compression for OTLP
//! before, and still is: an `https` endpoint is refused at start.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

use super::batches::{Request, Transport};
use super::TelemetryError;

const EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// One unary `TraceService/Export` call per batch.
#[derive(Debug, Clone)]
pub struct Grpc {
    channel: Channel,
    metadata: MetadataMap,
}

impl Grpc {
    /// Connects lazily (at the first export), so it must be built inside a
    /// Tokio runtime; each call gives up after `timeout`.
    pub fn new(endpoint: &str, timeout: Duration) -> Result<Grpc, TelemetryError> {
        let invalid = |why: String| TelemetryError::Otlp(format!("endpoint `{endpoint}`: {why}"));
        if !endpoint.contains("://") {
            // `OTEL_EXPORTER_OTLP_ENDPOINT=127.0.0.1:4317` would otherwise
            // read as a URI with the scheme `127.0.0.1`.
            return Err(invalid(format!(
                "no scheme; add http://, e.g. http://{endpoint}"
            )));
        }
        let parsed =
            Endpoint::from_shared(endpoint.to_owned()).map_err(|e| invalid(e.to_string()))?;
        if parsed.uri().scheme_str() != Some("http") {
            return Err(invalid(
                "the OTLP exporter speaks plain `http://` (gRPC without TLS); put a collector beside the sidecar".into(),
            ));
        }
        let metadata = headers_from_env()?;
        Ok(Grpc {
            channel: parsed.timeout(timeout).connect_lazy(),
            metadata,
        })
    }
}

impl Transport for Grpc {
    async fn send(&self, body: Arc<Request>) -> Result<(), String> {
        let mut client = tonic::client::Grpc::new(self.channel.clone());
        client
            .ready()
            .await
            .map_err(|e| format!("transport error: {e}"))?;
        let mut request = tonic::Request::new(body);
        *request.metadata_mut() = self.metadata.clone();
        client
            .unary::<Arc<Request>, (), Raw>(request, PathAndQuery::from_static(EXPORT), Raw)
            .await
            .map_err(|status| {
                format!(
                    "export failed with gRPC code {:?}: {}",
                    status.code(),
                    status.message()
                )
            })?;
        Ok(())
    }
}

/// The signal's variable, else the general one, as the OTLP exporter
/// specification says.
fn headers_from_env() -> Result<MetadataMap, TelemetryError> {
    let value = std::env::var("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_HEADERS"))
        .unwrap_or_default();
    headers(&value)
}

fn headers(list: &str) -> Result<MetadataMap, TelemetryError> {
    let mut metadata = MetadataMap::new();
    for pair in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad =
            || TelemetryError::Otlp(format!("OTEL_EXPORTER_OTLP_HEADERS: cannot use `{pair}`"));
        let (key, value) = pair.split_once('=').ok_or_else(bad)?;
        let key = MetadataKey::from_bytes(key.trim().to_ascii_lowercase().as_bytes())
            .map_err(|_| bad())?;
        let value = percent_decoded(value.trim()).ok_or_else(bad)?;
        let value = MetadataValue::try_from(value.as_str()).map_err(|_| bad())?;
        metadata.insert(key, value);
    }
    Ok(metadata)
}

fn percent_decoded(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

/// Sends bytes already encoded; the reply (`ExportTraceServiceResponse`)
/// is not read.
#[derive(Debug, Clone, Copy)]
struct Raw;

impl Codec for Raw {
    type Encode = Arc<Request>;
    type Decode = ();
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Arc<Request>;
    type Error = Status;

    fn encode(&mut self, item: Arc<Request>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(item.len());
        dst.put_slice(&item.header);
        dst.put_slice(&item.spans);
        dst.put_slice(&item.trailer);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = ();
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<()>, Status> {
        src.advance(src.remaining());
        Ok(Some(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_read_as_the_otlp_exporters_read_them() {
        let m = headers("api-key=s%3Dcret , X-Tenant=a b,").unwrap();
        assert_eq!(m.get("api-key").unwrap(), "s=cret");
        assert_eq!(m.get("x-tenant").unwrap(), "a b");
        assert!(headers("novalue").is_err());
        assert!(headers("k=%zz").is_err());
        assert!(headers("").unwrap().is_empty());
    }
}
