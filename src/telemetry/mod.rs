//! Telemetry set-up, in one place: logs, and the OpenTelemetry tracer
//! behind the message spans.

pub mod batches;
pub mod envelope;
mod exporter;
pub mod hop_wire;
pub mod log_fields;
pub mod memory;
pub mod messaging;
pub mod metrics;
pub mod otlp;
pub mod otlp_grpc;
pub mod otlp_http;
pub mod otlp_wire;
pub mod recent;
pub mod transport;

use std::sync::Arc;
use std::time::Duration;

use opentelemetry_sdk::trace::{SimpleSpanProcessor, SpanExporter};

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat, TracingConfig};
pub use log_fields::EscapedFields;
pub use messaging::{
    MessageInfo, MessageTracer, Operation, RpcInfo, RpcSpan, SpanSink, TraceContext,
};

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("invalid log filter `{filter}`: {reason}")]
    Filter { filter: String, reason: String },
    #[error("a global logger is already installed")]
    AlreadyInstalled,
    #[error("cannot set up the OTLP exporter: {0}")]
    Otlp(String),
}

/// Message tracing: off, or a span processor exporting somewhere.
#[derive(Clone, Default)]
pub struct Tracing {
    sink: Option<SpanSink>,
    spans: metrics::SpanCounters,
    new_trace_for_untraced: bool,
    mqtt5_user_properties: bool,
}

/// How long shutdown waits for the last spans to reach the collector.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// The same when the last export failed: the collector is down, and
/// waiting out the exporter's timeout would only delay the stop (a
/// restart, a rolling deploy) for spans that are lost anyway.
const FLUSH_TIMEOUT_FAILING: Duration = Duration::from_millis(500);

impl Tracing {
    pub fn off() -> Tracing {
        Tracing::default()
    }

    /// From the configuration and the standard `OTEL_*` variables.
    pub async fn from_config(config: &TracingConfig) -> Result<Tracing, TelemetryError> {
        let Some(export) = otlp::export_target(config)? else {
            // No export; the recent-span store may still take spans
            // (`with_recent_spans`), under these settings.
            return Ok(Tracing {
                new_trace_for_untraced: config.new_trace_for_untraced,
                mqtt5_user_properties: config.mqtt5_user_properties,
                ..Tracing::off()
            });
        };
        let spans = metrics::SpanCounters::default();
        let sink = otlp::sink(&export, &config.service_name, &spans)?;
        tracing::info!(endpoint = %export.endpoint, protocol = ?export.protocol, "Exporting traces over OTLP.");
        Ok(Tracing {
            sink: Some(sink),
            spans,
            new_trace_for_untraced: config.new_trace_for_untraced,
            mqtt5_user_properties: config.mqtt5_user_properties,
        })
    }

    /// Every span handed to `exporter` as it ends, e.g. the SDK's in-memory
    /// exporter in tests.
    pub fn with_exporter<E: SpanExporter + 'static>(
        exporter: E,
        new_trace_for_untraced: bool,
    ) -> Tracing {
        let spans = metrics::SpanCounters::default();
        let processor = Arc::new(SimpleSpanProcessor::new(exporter));
        Tracing {
            sink: Some(SpanSink::new(processor).with_counters(spans.clone())),
            spans,
            new_trace_for_untraced,
            mqtt5_user_properties: false,
        }
    }

    /// See `tracing.mqtt5_user_properties`.
    pub fn with_mqtt5_user_properties(mut self, on: bool) -> Tracing {
        self.mqtt5_user_properties = on;
        self
    }

    /// Also keeps the spans in a store of `budget` bytes for the console
    /// (`tracing.recent_spans_bytes`); 0 keeps none. Without an export
    /// the spans are made for the store alone, and messages pass on
    /// untouched (see [`MessageTracer::hop`]).
    pub fn with_recent_spans(mut self, budget: usize) -> Tracing {
        if budget == 0 {
            return self;
        }
        let store = recent::SpanStore::new(budget);
        self.sink = Some(match self.sink.take() {
            Some(sink) => sink.with_recent(store),
            None => SpanSink::recent_only(store).with_counters(self.spans.clone()),
        });
        self
    }

    /// The recent spans, when they are kept.
    pub fn recent_spans(&self) -> Option<recent::SpanStore> {
        self.sink.as_ref()?.recent().cloned()
    }

    /// What became of the spans (for `/metrics`).
    pub fn span_counters(&self) -> &metrics::SpanCounters {
        &self.spans
    }

    pub fn messages(&self) -> MessageTracer {
        MessageTracer::new(
            self.sink.clone(),
            self.new_trace_for_untraced,
            self.mqtt5_user_properties,
        )
    }

    /// Exports what is left, bounded in time: shortly when the collector
    /// was not answering.
    pub async fn shutdown(&self) {
        let Some(sink) = self.sink.clone() else {
            return;
        };
        let bound = if self.spans.failing() {
            FLUSH_TIMEOUT_FAILING
        } else {
            FLUSH_TIMEOUT
        };
        let flush = sink.shutdown(bound);
        match tokio::time::timeout(bound + Duration::from_secs(1), flush).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if self.spans.failing() => tracing::warn!(
                error = %e,
                "The OTLP collector is not answering; the last spans are lost."
            ),
            Ok(Err(e)) => tracing::warn!(error = %e, "Could not export the last spans."),
            Err(_) => tracing::warn!("Gave up exporting the last spans."),
        }
    }
}

/// Installs the global subscriber: `RUST_LOG` when set, else `log.filter`.
pub fn init(config: &LogConfig) -> Result<(), TelemetryError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(f) if !f.is_empty() => f,
        _ => config.filter.clone(),
    };
    let env_filter = EnvFilter::try_new(&filter).map_err(|e| TelemetryError::Filter {
        filter: filter.clone(),
        reason: e.to_string(),
    })?;
    let registry = tracing_subscriber::registry().with(env_filter);
    let result = match config.format {
        // Client-chosen strings are escaped (log_fields); colour only on a
        // terminal, so redirected logs hold no escape codes.
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .fmt_fields(log_fields::EscapedFields)
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout())),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(tracing_subscriber::fmt::layer().json().flatten_event(true))
            .try_init(),
    };
    result.map_err(|_| TelemetryError::AlreadyInstalled)
}
