//! OTLP/gRPC export of the batches [`super::batches`] makes: one unary
//! `TraceService/Export` call per batch, its body the bytes as encoded,
//! through tonic's channel (HTTP/2, reconnecting on its own).
//!
//! What `opentelemetry-otlp`'s gRPC exporter read from the environment and
//! the sidecar relied on is read here too: `OTEL_EXPORTER_OTLP_TRACES_HEADERS`
//! / `OTEL_EXPORTER_OTLP_HEADERS` ([`transport::headers_from_env`]). The
//! sidecar was built without TLS and compression for OTLP before, and still
//! is: an `https` endpoint is refused at start.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

use super::transport::{self, ExportError, Request, Transport};
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
        let uri = transport::plain_http(endpoint)?;
        let metadata = metadata(&transport::headers_from_env()?)?;
        Ok(Grpc {
            channel: Endpoint::from(uri).timeout(timeout).connect_lazy(),
            metadata,
        })
    }
}

impl Transport for Grpc {
    async fn send(&self, body: Arc<Request>) -> Result<(), ExportError> {
        let mut client = tonic::client::Grpc::new(self.channel.clone());
        client
            .ready()
            .await
            .map_err(|e| ExportError::Transport(e.to_string()))?;
        let mut request = tonic::Request::new(body);
        *request.metadata_mut() = self.metadata.clone();
        client
            .unary::<Arc<Request>, (), Raw>(request, PathAndQuery::from_static(EXPORT), Raw)
            .await
            .map_err(|status| ExportError::Grpc {
                code: status.code(),
                message: status.message().to_owned(),
            })?;
        Ok(())
    }
}

fn metadata(pairs: &[(String, String)]) -> Result<MetadataMap, TelemetryError> {
    let mut metadata = MetadataMap::new();
    for (key, value) in pairs {
        let bad = || transport::bad_header(&format!("{key}={value}"));
        let key = MetadataKey::from_bytes(key.as_bytes()).map_err(|_| bad())?;
        let mut value = MetadataValue::try_from(value.as_str()).map_err(|_| bad())?;
        // Often an API key: never in a `Debug` print.
        value.set_sensitive(true);
        metadata.insert(key, value);
    }
    Ok(metadata)
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
    use super::metadata;
    use crate::telemetry::transport::header_pairs;

    fn headers(
        list: &str,
    ) -> Result<tonic::metadata::MetadataMap, crate::telemetry::TelemetryError> {
        metadata(&header_pairs(list)?)
    }

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
