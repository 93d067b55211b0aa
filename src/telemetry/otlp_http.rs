//! OTLP/HTTP export (`http/protobuf`) of the batches [`super::batches`]
//! makes: one `POST /v1/traces` per batch, its body the request as encoded,
//! through hyper's pooled HTTP/1.1 client (connections kept alive between
//! exports, reopened when the collector closed them).
//!
//! What `opentelemetry-otlp`'s HTTP exporter did and the sidecar relied on
//! is done here too: the traces path appended to a base endpoint, the
//! headers variables, a 5 s bound on each export, any 2xx a success. Plain
//! `http://` only, as before (that exporter was built without TLS too).

use std::time::Duration;

use axum::body::Body;
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::{HeaderMap, Method, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;

use super::transport::{self, ExportError, Request, Transport};
use super::TelemetryError;

/// The most of a collector's answer read (an `ExportTraceServiceResponse`,
/// a few bytes, or a `Status` with an error message); the rest is left
/// unread, and the connection with it.
const MAX_ANSWER: usize = 64 * 1024;

/// One `POST` per batch.
#[derive(Debug, Clone)]
pub struct Http {
    client: Client<HttpConnector, Body>,
    url: Uri,
    headers: HeaderMap,
    timeout: Duration,
}

impl Http {
    /// `endpoint` is the collector's base URL, or its traces URL; each
    /// export gives up after `timeout`. Must be built inside a Tokio
    /// runtime.
    pub fn new(endpoint: &str, timeout: Duration) -> Result<Http, TelemetryError> {
        let url = transport::plain_http(&traces_url(endpoint))?;
        let headers = headers(&transport::headers_from_env()?)?;
        let client = Client::builder(TokioExecutor::new()).build_http();
        Ok(Http {
            client,
            url,
            headers,
            timeout,
        })
    }

    async fn post(&self, body: Vec<u8>) -> Result<(), ExportError> {
        let mut request = hyper::Request::new(Body::from(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.url.clone();
        *request.headers_mut() = self.headers.clone();
        request.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| ExportError::Transport(e.to_string()))?;
        let status = response.status();
        let answer = axum::body::to_bytes(Body::new(response.into_body()), MAX_ANSWER).await;
        if status.is_success() {
            return Ok(());
        }
        let detail = answer
            .map(|b| String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned())
            .unwrap_or_default();
        Err(ExportError::Http { status, detail })
    }
}

impl Transport for Http {
    async fn send(&self, request: Arc<Request>) -> Result<(), ExportError> {
        // One copy of the batch into the body: hyper takes its body by
        // value, and the request's buffers go back to the batches after.
        // (gRPC, the default and the measured path, writes them directly.)
        let body = [&request.header[..], &request.spans, &request.trailer].concat();
        tokio::time::timeout(self.timeout, self.post(body))
            .await
            .map_err(|_| ExportError::Timeout(self.timeout))?
    }
}

/// An OTLP/HTTP endpoint given as a base URL gets the traces path, as the
/// OpenTelemetry specification does for `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    if trimmed.ends_with("/v1/traces") {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v1/traces")
    }
}

fn headers(pairs: &[(String, String)]) -> Result<HeaderMap, TelemetryError> {
    let mut map = HeaderMap::new();
    for (key, value) in pairs {
        let bad = || transport::bad_header(&format!("{key}={value}"));
        let name = HeaderName::from_bytes(key.as_bytes()).map_err(|_| bad())?;
        let mut value = HeaderValue::from_str(value).map_err(|_| bad())?;
        // Often an API key: never in a `Debug` print.
        value.set_sensitive(true);
        map.insert(name, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::{headers, traces_url, Http};
    use crate::telemetry::transport::{header_pairs, Request, Transport};

    /// A collector on a real socket: answers each POST with the next status
    /// of `statuses` (then 200), keeping the bodies and content types.
    async fn collector(statuses: &[u16]) -> (String, Arc<Mutex<Vec<(String, Vec<u8>)>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let statuses = statuses.to_vec();
        let kept = got.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(
                move |headers: hyper::HeaderMap, body: axum::body::Bytes| async move {
                    let content_type = headers[hyper::header::CONTENT_TYPE].to_str().unwrap();
                    let mut got = kept.lock().unwrap();
                    got.push((content_type.to_owned(), body.to_vec()));
                    let status = statuses.get(got.len() - 1).copied().unwrap_or(200);
                    (hyper::StatusCode::from_u16(status).unwrap(), "why")
                },
            ),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), got)
    }

    fn request(spans: &[u8]) -> Arc<Request> {
        Arc::new(Request {
            header: vec![1, 2],
            spans: spans.to_vec(),
            trailer: vec![3],
        })
    }

    #[tokio::test]
    async fn a_batch_is_one_protobuf_post_and_only_2xx_is_a_success() {
        let (endpoint, got) = collector(&[503]).await;
        let http = Http::new(&endpoint, Duration::from_secs(5)).unwrap();
        let refused = http.send(request(b"ab")).await.unwrap_err().to_string();
        assert!(
            refused.contains("503") && refused.contains("why"),
            "{refused}"
        );
        http.send(request(b"cd")).await.unwrap();
        let got = got.lock().unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].0, "application/x-protobuf");
        assert_eq!(got[1].1, [1, 2, b'c', b'd', 3], "header, spans, trailer");
    }

    /// The whole path over HTTP: hops written into batches, each batch one
    /// POST the collector decodes, every span counted, exported or failed.
    #[tokio::test]
    async fn batches_over_http_are_decoded_by_the_collector_and_counted() {
        use crate::telemetry::batches::{Batches, Settings};
        use crate::telemetry::envelope::Envelope;
        use crate::telemetry::messaging::{self, MessageInfo, MessageTracer, Operation};
        use crate::telemetry::metrics::{Metrics, SpanCounters};
        use crate::telemetry::SpanSink;
        use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
        use prost::Message as _;

        let (endpoint, got) = collector(&[200, 503]).await;
        let counters = SpanCounters::default();
        let settings = Settings {
            max_batch: 4,
            delay: Duration::from_secs(3600),
            max_queue: 64,
        };
        let resource = opentelemetry_sdk::Resource::builder().build();
        let envelope = Envelope::new(&resource, &messaging::scope());
        let http = Http::new(&endpoint, Duration::from_secs(5)).unwrap();
        let batches = Batches::start(http, &endpoint, envelope, settings, counters.clone());
        let sink = SpanSink::batches(batches.clone()).with_counters(counters.clone());
        let tracer = MessageTracer::new(Some(sink), true, false);
        let info = MessageInfo::default();
        for round in 0..2 {
            for _ in 0..4 {
                tracer.hop(Operation::Publish, "lmos/urn:t/events/e", None, &info, None);
            }
            batches.flush(Duration::from_secs(5)).await.unwrap();
            assert_eq!(got.lock().unwrap().len(), round + 1, "one POST per batch");
        }
        let first = ExportTraceServiceRequest::decode(&got.lock().unwrap()[0].1[..]).unwrap();
        let spans = &first.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 4);
        assert_eq!(spans[0].name, "publish lmos/urn:t/events/e");
        let metrics = Metrics::with_spans(&counters).render();
        assert!(
            metrics.contains("lmos_sidecar_spans_exported_total 4\n"),
            "{metrics}"
        );
        assert!(
            metrics.contains(r#"lmos_sidecar_spans_dropped_total{reason="export_failed"} 4"#),
            "{metrics}"
        );
        assert!(counters.failing(), "the 503 is known");
    }

    #[tokio::test]
    async fn https_and_schemeless_endpoints_are_refused_at_start() {
        for endpoint in ["https://c:4318", "127.0.0.1:4318"] {
            let e = Http::new(endpoint, Duration::from_secs(5)).unwrap_err();
            assert!(e.to_string().contains(endpoint), "{e}");
        }
    }

    #[test]
    fn http_endpoints_get_the_traces_path_once() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
    }

    #[test]
    fn headers_go_on_every_post() {
        let map = headers(&header_pairs("api-key=s%3Dcret , X-Tenant=a b,").unwrap()).unwrap();
        assert_eq!(map.get("api-key").unwrap(), "s=cret");
        assert_eq!(map.get("x-tenant").unwrap(), "a b");
        assert!(headers(&header_pairs("bad key=v").unwrap()).is_err());
        assert!(!format!("{map:?}").contains("cret"), "kept out of Debug");
    }
}
