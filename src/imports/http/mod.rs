//! The HTTP client both MCP (Streamable HTTP) and A2A upstreams use: hyper's
//! pooled HTTP/1.1 client, `https://` through rustls (ring, the system's
//! roots plus `tls_ca_file`), the configured headers and bearer token on
//! every request, and answers read only as far as `max_message_bytes`
//! allows, whole ([`Response::bytes_capped`]) or as Server-Sent Events
//! ([`Response::events`]).
//!
//! API: [`HttpClient::new`] from an [`ImportConfig`];
//! [`HttpClient::request`] `(method, url, headers, body) -> Response`;
//! [`Response`] `{ status, headers }` with `bytes_capped`, `json_capped`,
//! `events -> SseReader` whose `next()` yields [`SseEvent`]s.

use std::future::Future;
use std::pin::Pin;

use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, BodyDataStream};
use bytes::Bytes;
use futures_util::StreamExt;
use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{HeaderMap, Method, StatusCode, Uri};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tower_service::Service;

mod sse;
pub use sse::{SseEvent, SseReader};

use super::upstream::UpstreamError;
use crate::config::ImportConfig;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Connector = Timed<HttpsConnector<HttpConnector>>;

/// One upstream's HTTP client (cheap to clone: the pool is shared).
#[derive(Clone)]
pub struct HttpClient {
    client: Client<Connector, Body>,
    /// The configured headers and `Authorization`, on every request.
    headers: HeaderMap,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The headers may carry secrets; `HeaderValue::set_sensitive`
        // hides them from `HeaderMap`'s own `Debug` anyway.
        f.debug_struct("HttpClient").finish_non_exhaustive()
    }
}

impl HttpClient {
    /// Reads the bearer token and the CA file now. A configuration that
    /// cannot work (an unreadable token or CA file, a header that is no
    /// valid HTTP) is [`UpstreamError::Unreachable`]: the upstream cannot
    /// be reached as configured. Must be called inside a Tokio runtime.
    pub fn new(config: &ImportConfig) -> Result<HttpClient, UpstreamError> {
        let headers = configured_headers(config)?;
        let tls = tls_config(config)?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.connect_timeout()));
        let https = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        // The TCP connect has its own bound; this one covers TLS too.
        let connector = Timed {
            inner: https,
            limit: config.connect_timeout(),
        };
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(HttpClient { client, headers })
    }

    /// Sends one request; the answer's head is returned as soon as it
    /// arrives, its body is read by the caller. Failing to connect or a
    /// broken connection is [`UpstreamError::Unreachable`]; no bound on the
    /// wait for the answer here (the caller's `timeout_ms` counts from the
    /// last sign of life, which only it knows).
    pub async fn request(
        &self,
        method: Method,
        url: &str,
        headers: &[(HeaderName, String)],
        body: Option<Vec<u8>>,
    ) -> Result<Response, UpstreamError> {
        let uri: Uri = url
            .parse()
            .map_err(|_| UpstreamError::Unreachable(format!("`{url}` is no valid URL")))?;
        let mut request = hyper::Request::new(body.map(Body::from).unwrap_or_else(Body::empty));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        *request.headers_mut() = self.headers.clone();
        for (name, value) in headers {
            let value = HeaderValue::from_str(value).map_err(|_| {
                UpstreamError::Malformed(format!("a header `{name}` that is no valid HTTP"))
            })?;
            request.headers_mut().insert(name.clone(), value);
        }
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| UpstreamError::Unreachable(error_chain(&e)))?;
        let (head, body) = response.into_parts();
        Ok(Response {
            status: head.status,
            headers: head.headers,
            body: Body::new(body).into_data_stream(),
        })
    }
}

/// An answer's head, its body not yet read.
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: BodyDataStream,
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl Response {
    /// The media type, lower case, without its parameters
    /// (`text/event-stream`), if the answer names one.
    pub fn content_type(&self) -> Option<String> {
        let value = self.headers.get(CONTENT_TYPE)?.to_str().ok()?;
        let media = value.split(';').next().unwrap_or_default();
        Some(media.trim().to_ascii_lowercase())
    }

    /// The whole body, or [`UpstreamError::TooLarge`] as soon as it (or
    /// its announced `Content-Length`) passes `max` bytes.
    pub async fn bytes_capped(mut self, max: usize) -> Result<Bytes, UpstreamError> {
        let announced = self
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if announced.is_some_and(|n| n > max as u64) {
            return Err(UpstreamError::TooLarge(max));
        }
        let mut whole = Vec::new();
        while let Some(chunk) = self.body.next().await {
            let chunk = chunk.map_err(|e| UpstreamError::Unreachable(error_chain(&e)))?;
            if whole.len() + chunk.len() > max {
                return Err(UpstreamError::TooLarge(max));
            }
            whole.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(whole))
    }

    /// The body as JSON, at most `max` bytes of it.
    pub async fn json_capped(self, max: usize) -> Result<Value, UpstreamError> {
        let bytes = self.bytes_capped(max).await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| UpstreamError::Malformed(format!("the answer is no JSON: {e}")))
    }

    /// The body as a `text/event-stream`, each event's buffered bytes
    /// bounded by `max`.
    pub fn events(self, max: usize) -> SseReader {
        SseReader::new(self.body, max)
    }
}

fn configured_headers(config: &ImportConfig) -> Result<HeaderMap, UpstreamError> {
    let mut map = HeaderMap::new();
    let bad =
        |what: &str| UpstreamError::Unreachable(format!("the header {what} is no valid HTTP"));
    for (name, value) in &config.headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad(name))?;
        let mut value = HeaderValue::from_str(value).map_err(|_| bad(name.as_str()))?;
        // Often an API key: never in a `Debug` print.
        value.set_sensitive(true);
        map.insert(name, value);
    }
    let token = config
        .bearer_token()
        .map_err(|e| UpstreamError::Unreachable(format!("cannot read the bearer token: {e}")))?;
    if let Some(token) = token {
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| bad("Authorization (the bearer token)"))?;
        value.set_sensitive(true);
        map.insert(AUTHORIZATION, value);
    }
    Ok(map)
}

fn tls_config(config: &ImportConfig) -> Result<rustls::ClientConfig, UpstreamError> {
    let file = config.tls_ca_file.as_deref();
    crate::tls::client_config(file).map_err(|e| {
        let file = file.map(|f| f.display().to_string()).unwrap_or_default();
        UpstreamError::Unreachable(format!("tls_ca_file {file}: {e}"))
    })
}

/// An error and its causes on one line (hyper's own message is often just
/// "client error (Connect)").
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A connector whose every connection (TCP and TLS) must be made within
/// `limit`.
#[derive(Clone)]
struct Timed<C> {
    inner: C,
    limit: Duration,
}

impl<C> Service<Uri> for Timed<C>
where
    C: Service<Uri>,
    C::Error: Into<BoxError>,
    C::Future: Send + 'static,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let (connecting, limit) = (self.inner.call(uri), self.limit);
        Box::pin(async move {
            match tokio::time::timeout(limit, connecting).await {
                Ok(done) => done.map_err(Into::into),
                Err(_) => Err(format!("no connection within {} ms", limit.as_millis()).into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_connection_is_unreachable_and_headers_go_out() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = vec![0; 4096];
            let n = socket.read(&mut seen).await.unwrap();
            let body = "data: one\n\ndata: two\n\n";
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&seen[..n]).to_lowercase()
        });
        let config = ImportConfig {
            headers: [("x-api-key".to_owned(), "k".to_owned())].into(),
            ..ImportConfig::default()
        };
        let client = HttpClient::new(&config).unwrap();
        let extra = [(
            HeaderName::from_static("accept"),
            "text/event-stream".to_owned(),
        )];
        let url = format!("http://127.0.0.1:{port}/mcp");
        let response = client.request(Method::POST, &url, &extra, Some(b"{}".to_vec()));
        let response = response.await.unwrap();
        assert_eq!(
            response.content_type().as_deref(),
            Some("text/event-stream")
        );
        let mut events = response.events(1024);
        assert_eq!(events.next().await.unwrap().unwrap().data, "one");
        assert_eq!(events.next().await.unwrap().unwrap().data, "two");
        assert!(events.next().await.is_none());
        let request = server.await.unwrap();
        assert!(request.contains("x-api-key: k") && request.contains("accept: text/event-stream"));

        let gone = client.request(Method::GET, &url, &[], None).await;
        assert!(
            matches!(gone, Err(UpstreamError::Unreachable(_))),
            "{gone:?}"
        );
    }

    #[tokio::test]
    async fn an_announced_length_past_max_is_refused_before_reading() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let _ = socket.read(&mut [0; 4096]).await;
            let head = "HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n";
            let _ = socket.write_all(head.as_bytes()).await;
            tokio::time::sleep(Duration::from_secs(5)).await;
        });
        let client = HttpClient::new(&ImportConfig::default()).unwrap();
        let url = format!("http://127.0.0.1:{port}/");
        let response = client.request(Method::GET, &url, &[], None).await.unwrap();
        assert_eq!(
            response.bytes_capped(1000).await,
            Err(UpstreamError::TooLarge(1000))
        );
    }
}
