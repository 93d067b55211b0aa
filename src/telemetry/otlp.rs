//! The OTLP exporter and the tracer provider behind the message spans.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::Context;

use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor,
};
use opentelemetry_sdk::Resource;

use super::batches::{self, Batches, Settings, QUEUE_FULL};
use super::hop_wire::Envelope;
use super::messaging::{self, SpanSink};
use super::metrics::SpanCounters;
use super::otlp_grpc::Grpc;
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

/// Where the message spans go: over gRPC written straight into batches the
/// sidecar sends itself; over HTTP through the SDK's batch processor and
/// `opentelemetry-otlp`'s exporter. Must run inside a Tokio runtime.
pub async fn sink(
    export: &Export,
    service_name: &str,
    counters: &SpanCounters,
) -> Result<SpanSink, TelemetryError> {
    let timeout = Duration::from_secs(5);
    let resource = match std::env::var("OTEL_SERVICE_NAME") {
        Ok(name) if !name.is_empty() => Resource::builder().build(),
        _ => Resource::builder()
            .with_service_name(service_name.to_owned())
            .build(),
    };
    let sink = match export.protocol {
        OtlpProtocol::Grpc => {
            let transport = Grpc::new(&export.endpoint, timeout)?;
            let envelope = Envelope::new(&resource, &messaging::scope());
            SpanSink::batches(Batches::start(
                transport,
                &export.endpoint,
                envelope,
                Settings::from_env(),
                counters.clone(),
            ))
        }
        OtlpProtocol::HttpProtobuf => {
            // The HTTP exporter's client blocks.
            let (export, counters) = (export.clone(), counters.clone());
            let processor = tokio::task::spawn_blocking(move || {
                http_processor(&export, resource, timeout, &counters)
            })
            .await
            .map_err(|e| TelemetryError::Otlp(e.to_string()))??;
            SpanSink::new(Arc::new(processor))
        }
    };
    Ok(sink.with_counters(counters.clone()))
}

/// The SDK's batch processor, bounded, in front of `opentelemetry-otlp`'s
/// HTTP exporter.
fn http_processor(
    export: &Export,
    resource: Resource,
    timeout: Duration,
    counters: &SpanCounters,
) -> Result<impl SpanProcessor, TelemetryError> {
    let failure = |e: opentelemetry_otlp::ExporterBuildError| TelemetryError::Otlp(e.to_string());
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(http_traces_url(&export.endpoint))
        .with_timeout(timeout)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .build()
        .map_err(failure)?;
    // The processor hands the resource to its exporter when a provider
    // builds it; the message spans need no provider, so it is set here.
    exporter.set_resource(&resource);
    Ok(bounded(exporter, export, counters))
}

/// What the exporter took so far, against what was handed to the batch
/// processor: the difference is what waits in its queue.
#[derive(Debug, Default)]
struct InFlight {
    handed: AtomicU64,
    taken: AtomicU64,
}

/// The batch processor behind a bound of the sidecar's own, so that every
/// span is accounted for in `/metrics`: exported, dropped because the
/// queue was full, or dropped because its export failed. The SDK's batch
/// processor counts its own drops but tells nobody until shutdown; with its
/// queue sized to the bound it never gets to drop one.
fn bounded<E: SpanExporter + 'static>(
    exporter: E,
    export: &Export,
    counters: &SpanCounters,
) -> Bounded {
    // The same bound as the gRPC path's: `OTEL_BSP_MAX_QUEUE_SIZE`, else
    // 32 768 spans (at roughly 1 KiB a `SpanData`, some 32 MiB).
    let capacity = Settings::from_env().max_queue;
    bounded_to(capacity, exporter, export, counters)
}

fn bounded_to<E: SpanExporter + 'static>(
    capacity: usize,
    exporter: E,
    export: &Export,
    counters: &SpanCounters,
) -> Bounded {
    let in_flight = Arc::new(InFlight::default());
    let exporter = ReportFailures::new(exporter, export, counters.clone(), in_flight.clone());
    let config = BatchConfigBuilder::default()
        .with_max_queue_size(capacity)
        .build();
    Bounded {
        inner: BatchSpanProcessor::builder(exporter)
            .with_batch_config(config)
            .build(),
        capacity: capacity as u64,
        in_flight,
        counters: counters.clone(),
    }
}

#[derive(Debug)]
struct Bounded {
    inner: BatchSpanProcessor,
    capacity: u64,
    in_flight: Arc<InFlight>,
    counters: SpanCounters,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        // Spans the exporter has taken but not yet sent count as waiting
        // too: the processor's queue holds at most this many. A place is
        // claimed before the check, so that spans ending at once on several
        // threads cannot all pass it and overfill the processor's queue.
        let handed = self.in_flight.handed.fetch_add(1, Ordering::AcqRel);
        let taken = self.in_flight.taken.load(Ordering::Acquire);
        if handed.saturating_sub(taken) >= self.capacity {
            self.in_flight.handed.fetch_sub(1, Ordering::AcqRel);
            self.counters.dropped(QUEUE_FULL);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Logs the first failed export (collector down, wrong address) and the
/// recovery, not every batch in between. Spans of failed batches are
/// dropped; messages are never held back for them.
#[derive(Debug)]
struct ReportFailures<E> {
    inner: E,
    target: String,
    counters: SpanCounters,
    in_flight: Arc<InFlight>,
}

impl<E> ReportFailures<E> {
    fn new(inner: E, export: &Export, counters: SpanCounters, in_flight: Arc<InFlight>) -> Self {
        ReportFailures {
            inner,
            target: export.endpoint.clone(),
            counters,
            in_flight,
        }
    }
}

impl<E: SpanExporter> SpanExporter for ReportFailures<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        self.in_flight.taken.fetch_add(n, Ordering::AcqRel);
        let result = self.inner.export(batch).await;
        batches::account(&self.counters, &self.target, n, &result);
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
    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::SdkTracerProvider;

    /// An exporter stuck until released, like one waiting on a slow
    /// collector.
    #[derive(Debug, Default)]
    struct Stuck(Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>);

    impl Stuck {
        fn release(&self) {
            *self.0 .0.lock().unwrap() = true;
            self.0 .1.notify_all();
        }
    }

    impl SpanExporter for Stuck {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            let (released, wake) = &*self.0;
            let _open = wake
                .wait_while(released.lock().unwrap(), |open| !*open)
                .unwrap();
            Ok(())
        }
    }

    #[test]
    fn spans_past_the_queue_are_counted_as_dropped_and_the_rest_as_exported() {
        let counters = SpanCounters::default();
        let export = Export {
            endpoint: "http://test".into(),
            protocol: OtlpProtocol::Grpc,
        };
        let stuck = Stuck::default();
        let gate = Stuck(stuck.0.clone());
        // The SDK exports batches of at most the queue's size: with the
        // exporter stuck on one batch of 4, at most 4 more wait; the rest of
        // the 20 find the queue full.
        let provider = SdkTracerProvider::builder()
            .with_span_processor(bounded_to(4, stuck, &export, &counters))
            .build();
        let tracer = provider.tracer("test");
        for _ in 0..20 {
            tracer.in_span("hop", |_| {});
        }
        gate.release();
        provider.shutdown().unwrap();
        let metrics = crate::telemetry::metrics::Metrics::with_spans(&counters).render();
        let count = |prefix: &str| -> u64 {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(prefix))
                .map_or(0, |n| n.trim().parse().unwrap())
        };
        let exported = count("lmos_sidecar_spans_exported_total ");
        let dropped = count(r#"lmos_sidecar_spans_dropped_total{reason="queue_full"} "#);
        assert_eq!(
            exported + dropped,
            20,
            "every span accounted for: {metrics}"
        );
        assert!(exported <= 8 && dropped >= 12, "{metrics}");
    }

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
