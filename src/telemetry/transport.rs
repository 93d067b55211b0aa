//! How a batch leaves: one `ExportTraceServiceRequest` handed to a
//! [`Transport`], gRPC ([`super::otlp_grpc`]) or HTTP/protobuf
//! ([`super::otlp_http`]). One batcher ([`super::batches`]) feeds either,
//! so that both count, bound and drop spans the same way.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::http::uri::InvalidUri;
use hyper::Uri;

use super::TelemetryError;

/// Sends one `ExportTraceServiceRequest`: `header`, `spans`, `trailer`.
pub trait Transport: Send + Sync + 'static {
    fn send(&self, request: Arc<Request>) -> impl Future<Output = Result<(), ExportError>> + Send;
}

/// Why an export failed: logged once, its spans counted as
/// `export_failed`.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// No connection, or it broke.
    #[error("transport error: {0}")]
    Transport(String),
    #[error("export failed with gRPC code {code:?}: {message}")]
    Grpc { code: tonic::Code, message: String },
    #[error("export failed with HTTP status {status}: {detail}")]
    Http {
        status: hyper::StatusCode,
        /// The start of the collector's answer, for the log.
        detail: String,
    },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// One request's bytes, in three parts.
#[derive(Debug, Default)]
pub struct Request {
    pub header: Vec<u8>,
    pub spans: Vec<u8>,
    pub trailer: Vec<u8>,
}

impl Request {
    pub fn len(&self) -> usize {
        self.header.len() + self.spans.len() + self.trailer.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The collector's address as a URI, refused unless plain `http://`: the
/// sidecar was built without TLS for OTLP (put a collector beside it).
pub(super) fn plain_http(endpoint: &str) -> Result<Uri, TelemetryError> {
    let invalid = |why: String| TelemetryError::Otlp(format!("endpoint `{endpoint}`: {why}"));
    if !endpoint.contains("://") {
        // `OTEL_EXPORTER_OTLP_ENDPOINT=127.0.0.1:4317` would otherwise
        // read as a URI with the scheme `127.0.0.1`.
        return Err(invalid(format!(
            "no scheme; add http://, e.g. http://{endpoint}"
        )));
    }
    let uri: Uri = endpoint
        .parse()
        .map_err(|e: InvalidUri| invalid(e.to_string()))?;
    if uri.scheme_str() != Some("http") {
        return Err(invalid(
            "the OTLP exporter speaks plain `http://` (no TLS); put a collector beside the sidecar"
                .into(),
        ));
    }
    Ok(uri)
}

/// The headers every export carries: `OTEL_EXPORTER_OTLP_TRACES_HEADERS`,
/// else `OTEL_EXPORTER_OTLP_HEADERS`, as the OTLP exporter specification
/// says.
pub(super) fn headers_from_env() -> Result<Vec<(String, String)>, TelemetryError> {
    let value = std::env::var("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_HEADERS"))
        .unwrap_or_default();
    header_pairs(&value)
}

/// `key=value` pairs, comma-separated, values URL-encoded; keys lowercase.
pub(super) fn header_pairs(list: &str) -> Result<Vec<(String, String)>, TelemetryError> {
    let mut pairs = Vec::new();
    for pair in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').ok_or_else(|| bad_header(pair))?;
        let value = percent_decoded(value.trim()).ok_or_else(|| bad_header(pair))?;
        pairs.push((key.trim().to_ascii_lowercase(), value));
    }
    Ok(pairs)
}

/// The error for a pair of the headers variable a transport cannot use.
pub(super) fn bad_header(pair: &str) -> TelemetryError {
    TelemetryError::Otlp(format!("OTEL_EXPORTER_OTLP_HEADERS: cannot use `{pair}`"))
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
