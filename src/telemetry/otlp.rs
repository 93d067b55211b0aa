//! Where the message spans go: the collector's address and protocol, and
//! the one batcher ([`Batches`]) feeding the transport for that protocol.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry_sdk::Resource;

use super::batches::{Batches, Settings};
use super::envelope::Envelope;
use super::messaging::{self, SpanSink};
use super::metrics::SpanCounters;
use super::otlp_grpc::Grpc;
use super::otlp_http::Http;
use super::transport::Transport;
use super::TelemetryError;
use crate::config::{OtlpProtocol, TracingConfig};

/// Where spans go, after the standard environment variables had their say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub endpoint: String,
    pub protocol: OtlpProtocol,
}

/// `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_PROTOCOL` win over the
/// configuration, as operators expect of OpenTelemetry software. `None`:
/// tracing is off.
pub fn export_target(config: &TracingConfig) -> Result<Option<Export>, TelemetryError> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .or_else(|| Some(config.endpoint.clone()).filter(|e| !e.is_empty()));
    let Some(endpoint) = endpoint else {
        return Ok(None);
    };
    let protocol = match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
    {
        None => config.protocol,
        Some(p) if p == "grpc" => OtlpProtocol::Grpc,
        Some(p) if p == "http/protobuf" => OtlpProtocol::HttpProtobuf,
        Some(p) => {
            return Err(TelemetryError::Otlp(format!(
            "OTEL_EXPORTER_OTLP_PROTOCOL is `{p}`; the sidecar speaks `grpc` and `http/protobuf`"
        )))
        }
    };
    Ok(Some(Export { endpoint, protocol }))
}

/// How long one export may take before it counts as failed.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the message spans go: written straight into batches the sidecar
/// sends itself, over gRPC or HTTP/protobuf alike. Must run inside a Tokio
/// runtime (the exporting task is spawned on it; connections open lazily,
/// at the first export).
pub fn sink(
    export: &Export,
    service_name: &str,
    counters: &SpanCounters,
) -> Result<SpanSink, TelemetryError> {
    let resource = match std::env::var("OTEL_SERVICE_NAME") {
        Ok(name) if !name.is_empty() => Resource::builder().build(),
        _ => Resource::builder()
            .with_service_name(service_name.to_owned())
            .build(),
    };
    let envelope = Envelope::new(&resource, &messaging::scope());
    let batches = match export.protocol {
        OtlpProtocol::Grpc => {
            let transport = Grpc::new(&export.endpoint, EXPORT_TIMEOUT)?;
            start(transport, export, envelope, counters)
        }
        OtlpProtocol::HttpProtobuf => {
            let transport = Http::new(&export.endpoint, EXPORT_TIMEOUT)?;
            start(transport, export, envelope, counters)
        }
    };
    Ok(SpanSink::batches(batches).with_counters(counters.clone()))
}

fn start<T: Transport>(
    transport: T,
    export: &Export,
    envelope: Envelope,
    counters: &SpanCounters,
) -> Arc<Batches> {
    Batches::start(
        transport,
        &export.endpoint,
        envelope,
        Settings::from_env(),
        counters.clone(),
    )
}
