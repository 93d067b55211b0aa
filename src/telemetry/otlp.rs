//! The OTLP exporter and the tracer provider behind the message spans.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
};
use opentelemetry_sdk::Resource;
use tracing::{info, warn};

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

/// An OTLP/HTTP endpoint given as a base URL gets the traces path, as the
/// OpenTelemetry specification does for `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn http_traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    if trimmed.ends_with("/v1/traces") {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v1/traces")
    }
}

/// Builds the provider. Must run where blocking is allowed (the HTTP
/// exporter's client is a blocking one) and inside a Tokio runtime (gRPC).
pub fn provider(export: &Export, service_name: &str) -> Result<SdkTracerProvider, TelemetryError> {
    let timeout = Duration::from_secs(5);
    let failure = |e: opentelemetry_otlp::ExporterBuildError| TelemetryError::Otlp(e.to_string());
    let resource = match std::env::var("OTEL_SERVICE_NAME") {
        Ok(name) if !name.is_empty() => Resource::builder().build(),
        _ => Resource::builder()
            .with_service_name(service_name.to_owned())
            .build(),
    };
    let builder = SdkTracerProvider::builder().with_resource(resource);
    let provider = match export.protocol {
        OtlpProtocol::Grpc => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(export.endpoint.clone())
                .with_timeout(timeout)
                .build()
                .map_err(failure)?;
            builder
                .with_span_processor(batch(ReportFailures::new(exporter, export)))
                .build()
        }
        OtlpProtocol::HttpProtobuf => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(http_traces_url(&export.endpoint))
                .with_timeout(timeout)
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .build()
                .map_err(failure)?;
            builder
                .with_span_processor(batch(ReportFailures::new(exporter, export)))
                .build()
        }
    };
    Ok(provider)
}

/// Spans waiting for export before new ones are dropped. The SDK's 2048 is
/// gone in a few milliseconds of fan-out (one span per recipient);
/// `OTEL_BSP_MAX_QUEUE_SIZE` still wins. At roughly 1 KiB a span this bounds
/// the exporter's memory to some 32 MiB.
const MAX_QUEUE_SIZE: usize = 32 * 1024;

fn batch<E: SpanExporter + 'static>(exporter: E) -> BatchSpanProcessor {
    let mut config = BatchConfigBuilder::default();
    if std::env::var_os("OTEL_BSP_MAX_QUEUE_SIZE").is_none() {
        config = config.with_max_queue_size(MAX_QUEUE_SIZE);
    }
    BatchSpanProcessor::builder(exporter)
        .with_batch_config(config.build())
        .build()
}

/// Logs the first failed export (collector down, wrong address) and the
/// recovery, not every batch in between. Spans of failed batches are
/// dropped; messages are never held back for them.
#[derive(Debug)]
struct ReportFailures<E> {
    inner: E,
    target: String,
    failing: AtomicBool,
}

impl<E> ReportFailures<E> {
    fn new(inner: E, export: &Export) -> Self {
        ReportFailures {
            inner,
            target: export.endpoint.clone(),
            failing: AtomicBool::new(false),
        }
    }
}

impl<E: SpanExporter> SpanExporter for ReportFailures<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        match &result {
            Err(e) if !self.failing.swap(true, Ordering::Relaxed) => warn!(
                endpoint = %self.target,
                error = %e,
                "Cannot export spans to the OTLP collector; dropping them until it answers again."
            ),
            Ok(()) if self.failing.swap(false, Ordering::Relaxed) => {
                info!(endpoint = %self.target, "Exporting spans to the OTLP collector again.")
            }
            _ => {}
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_endpoints_get_the_traces_path_once() {
        assert_eq!(http_traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(http_traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            http_traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
    }
}
