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

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
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
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde_json::Value;
use tower_service::Service;

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
        SseReader {
            body: Some(self.body),
            parser: SseParser::new(max),
            ready: VecDeque::new(),
        }
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// Its `event:` type; empty for the default (`message`).
    pub event: String,
    /// Its `data:` lines, joined by `\n`.
    pub data: String,
    /// The last event ID the stream set, if any (for resumption).
    pub id: Option<String>,
}

/// The events of a streamed answer, read as they arrive.
pub struct SseReader {
    /// `None` once the stream ended or failed.
    body: Option<BodyDataStream>,
    parser: SseParser,
    ready: VecDeque<SseEvent>,
}

impl SseReader {
    /// The next event; `None` at the end of the stream (an event not
    /// finished by a blank line is dropped, as the specification says),
    /// an error once (then `None`) when the connection broke or an event
    /// grew past `max`.
    pub async fn next(&mut self) -> Option<Result<SseEvent, UpstreamError>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(Ok(event));
            }
            let body = self.body.as_mut()?;
            match body.next().await {
                Some(Ok(chunk)) => {
                    if let Err(e) = self.parser.feed(&chunk, &mut self.ready) {
                        self.body = None;
                        return Some(Err(e));
                    }
                }
                Some(Err(e)) => {
                    self.body = None;
                    return Some(Err(UpstreamError::Unreachable(error_chain(&e))));
                }
                None => self.body = None,
            }
        }
    }
}

/// The `text/event-stream` parser (sans-IO): bytes in, events out.
#[derive(Debug)]
pub(crate) struct SseParser {
    max: usize,
    /// The line being read (not yet terminated).
    line: Vec<u8>,
    data: String,
    event: String,
    last_id: Option<String>,
    /// Whether anything was read yet (a leading BOM is skipped).
    started: bool,
    /// The last chunk ended in a CR: an LF starting the next one belongs to it.
    after_cr: bool,
}

impl SseParser {
    pub(crate) fn new(max: usize) -> SseParser {
        SseParser {
            max,
            line: Vec::new(),
            data: String::new(),
            event: String::new(),
            last_id: None,
            started: false,
            after_cr: false,
        }
    }

    /// Reads a chunk, appending each event it completes to `out`.
    pub(crate) fn feed(
        &mut self,
        mut chunk: &[u8],
        out: &mut VecDeque<SseEvent>,
    ) -> Result<(), UpstreamError> {
        if !self.started && !chunk.is_empty() {
            self.started = true;
            chunk = chunk.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(chunk);
        }
        if std::mem::take(&mut self.after_cr) {
            chunk = chunk.strip_prefix(b"\n").unwrap_or(chunk);
        }
        while let Some(end) = chunk.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.line.extend_from_slice(&chunk[..end]);
            self.check()?;
            let cr = chunk[end] == b'\r';
            chunk = &chunk[end + 1..];
            if cr {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            self.field(&String::from_utf8_lossy(&line), out);
        }
        self.line.extend_from_slice(chunk);
        self.check()
    }

    /// Everything the event under way holds stays within `max`.
    fn check(&self) -> Result<(), UpstreamError> {
        if self.line.len() + self.data.len() + self.event.len() > self.max {
            return Err(UpstreamError::TooLarge(self.max));
        }
        Ok(())
    }

    fn field(&mut self, line: &str, out: &mut VecDeque<SseEvent>) {
        if line.is_empty() {
            return self.dispatch(out);
        }
        let (name, value) = match line.split_once(':') {
            Some((name, value)) => (name, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match name {
            "" => {} // a comment (keep-alive)
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            "event" => value.clone_into(&mut self.event),
            "id" if !value.contains('\0') => self.last_id = Some(value.to_owned()),
            _ => {} // `retry` and unknown fields
        }
    }

    fn dispatch(&mut self, out: &mut VecDeque<SseEvent>) {
        let event = std::mem::take(&mut self.event);
        if self.data.is_empty() {
            return;
        }
        let mut data = std::mem::take(&mut self.data);
        data.pop(); // the last line's `\n`
        out.push_back(SseEvent {
            event,
            data,
            id: self.last_id.clone(),
        });
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

/// The system's roots (read once per process: they are the same for every
/// upstream) and the configured CA file's.
fn tls_config(config: &ImportConfig) -> Result<rustls::ClientConfig, UpstreamError> {
    static NATIVE: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    let native = NATIVE.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for error in &found.errors {
            tracing::debug!(%error, "imports: a system CA certificate could not be read");
        }
        found.certs
    });
    let mut roots = rustls::RootCertStore::empty();
    // Unusable system certificates are skipped, as browsers do.
    let _ = roots.add_parsable_certificates(native.iter().cloned());
    if let Some(file) = &config.tls_ca_file {
        let bad =
            |e: String| UpstreamError::Unreachable(format!("tls_ca_file {}: {e}", file.display()));
        let certs = CertificateDer::pem_file_iter(file)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| bad(e.to_string()))?;
        if certs.is_empty() {
            return Err(bad("no certificate in it".into()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| UpstreamError::Unreachable(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
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

    fn parse(max: usize, chunks: &[&[u8]]) -> Result<Vec<SseEvent>, UpstreamError> {
        let mut parser = SseParser::new(max);
        let mut out = VecDeque::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out)?;
        }
        Ok(out.into_iter().collect())
    }

    fn event(event: &str, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: id.map(Into::into),
        }
    }

    #[test]
    fn events_split_anywhere_across_chunks_come_out_whole() {
        let stream = b"event: message\nid: 7\ndata: {\"a\":1}\n\ndata: two\n\n";
        let whole = parse(1024, &[stream]).unwrap();
        assert_eq!(
            whole,
            vec![
                event("message", "{\"a\":1}", Some("7")),
                event("", "two", Some("7"))
            ]
        );
        for cut in 0..stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(parse(1024, &[a, b]).unwrap(), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(parse(1024, &bytes).unwrap(), whole);
    }

    #[test]
    fn crlf_and_lone_cr_end_lines_even_split_between_chunks() {
        let crlf = parse(1024, &[b"data: a\r", b"\ndata: b\r\n\r", b"\n"]).unwrap();
        assert_eq!(crlf, vec![event("", "a\nb", None)]);
        let cr = parse(1024, &[b"data: a\rdata: b\r\r"]).unwrap();
        assert_eq!(cr, vec![event("", "a\nb", None)]);
    }

    #[test]
    fn comments_and_unknown_fields_are_skipped_and_data_lines_join() {
        let stream = b"\xEF\xBB\xBF: keep-alive\nretry: 10\nfoo: bar\ndata\ndata:x\ndata:  y\n\n";
        assert_eq!(
            parse(1024, &[stream]).unwrap(),
            vec![event("", "\nx\n y", None)]
        );
        // Only comments, or an event type without data: nothing to dispatch.
        assert_eq!(parse(1024, &[b":\n\nevent: e\n\n"]).unwrap(), vec![]);
        // An unfinished event at the end is not an event.
        assert_eq!(parse(1024, &[b"data: half"]).unwrap(), vec![]);
    }

    #[test]
    fn an_event_past_max_is_refused_whether_one_line_or_many() {
        let long = vec![b'x'; 100];
        let one_line = parse(64, &[b"data: ", &long]);
        assert_eq!(one_line, Err(UpstreamError::TooLarge(64)));
        let many: Vec<&[u8]> = std::iter::repeat_n(&b"data: 0123456789\n"[..], 10).collect();
        assert_eq!(parse(64, &many), Err(UpstreamError::TooLarge(64)));
        // Many small events in a row are fine: the bound is per event.
        let events: Vec<&[u8]> = std::iter::repeat_n(&b"data: 0123456789\n\n"[..], 100).collect();
        assert_eq!(parse(64, &events).unwrap().len(), 100);
    }

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
