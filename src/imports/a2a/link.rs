//! The bytes to and from one A2A agent: the card fetched, JSON-RPC
//! requests posted (answered by JSON or by an event stream), each bounded
//! in time and size.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper::header::{HeaderName, ACCEPT, CONTENT_TYPE};
use hyper::Method as HttpMethod;
use serde_json::Value;

use super::card::{Dialect, Endpoint};
use super::message::{request, rpc_result, Method};
use crate::config::ImportConfig;
use crate::imports::http::{HttpClient, Response};
use crate::imports::upstream::UpstreamError;
use crate::telemetry::TraceContext;

/// One agent's HTTP side and the bounds the configuration sets.
#[derive(Debug)]
pub(super) struct Link {
    http: HttpClient,
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub max_bytes: usize,
    pub max_updates_per_second: u32,
    ids: AtomicU64,
}

impl Link {
    pub fn new(config: &ImportConfig) -> Result<Link, UpstreamError> {
        Ok(Link {
            http: HttpClient::new(config)?,
            timeout: config.timeout(),
            connect_timeout: config.connect_timeout(),
            max_bytes: config.max_message_bytes,
            max_updates_per_second: config.max_updates_per_second,
            ids: AtomicU64::new(1),
        })
    }

    pub fn timeout_ms(&self) -> u64 {
        u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX)
    }

    /// The Agent Card, read whole within `connect_timeout`.
    pub async fn card(&self, url: &str) -> Result<Value, UpstreamError> {
        let accept = [(ACCEPT, "application/json".to_owned())];
        let fetch = async {
            let response = self
                .http
                .request(HttpMethod::GET, url, &accept, None)
                .await?;
            checked(response)?.json_capped(self.max_bytes).await
        };
        let limit = self.connect_timeout;
        let ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
        tokio::time::timeout(limit, fetch)
            .await
            .map_err(|_| UpstreamError::Timeout(ms))?
    }

    /// Posts one request; the answer's head within `timeout`. `stream`
    /// asks for an event stream (the agent may still answer plain JSON,
    /// e.g. an error).
    pub async fn post(
        &self,
        endpoint: &Endpoint,
        method: Method,
        params: Value,
        trace: Option<&TraceContext>,
        stream: bool,
    ) -> Result<Response, UpstreamError> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let body = request(id, endpoint, method, params)
            .to_string()
            .into_bytes();
        let accept = if stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        let mut headers = vec![
            (CONTENT_TYPE, "application/json".to_owned()),
            (ACCEPT, accept.to_owned()),
        ];
        // a2a-sdk reads a request without the header as 0.3, and refuses
        // 1.0 methods then.
        if endpoint.dialect == Dialect::V1 {
            headers.push((HeaderName::from_static("a2a-version"), "1.0".to_owned()));
        }
        if let Some(trace) = trace {
            headers.push((
                HeaderName::from_static("traceparent"),
                trace.traceparent.clone(),
            ));
            if let Some(state) = &trace.tracestate {
                headers.push((HeaderName::from_static("tracestate"), state.clone()));
            }
        }
        let post = self
            .http
            .request(HttpMethod::POST, &endpoint.url, &headers, Some(body));
        let response = tokio::time::timeout(self.timeout, post)
            .await
            .map_err(|_| UpstreamError::Timeout(self.timeout_ms()))??;
        checked(response)
    }

    /// One request answered by one JSON-RPC response: its `result`.
    pub async fn call_once(
        &self,
        endpoint: &Endpoint,
        method: Method,
        params: Value,
        trace: Option<&TraceContext>,
    ) -> Result<Value, UpstreamError> {
        let exchange = async {
            let response = self.post(endpoint, method, params, trace, false).await?;
            rpc_result(response.json_capped(self.max_bytes).await?)
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| UpstreamError::Timeout(self.timeout_ms()))?
    }
}

/// A 2xx answer, or its status as an error: a 4xx as it is (401, 403,
/// 404, …), anything else as 502 (the agent failed, not the consumer).
fn checked(response: Response) -> Result<Response, UpstreamError> {
    let status = response.status;
    if status.is_success() {
        return Ok(response);
    }
    let lmos = if status.is_client_error() {
        status.as_u16()
    } else {
        502
    };
    Err(UpstreamError::Refused {
        status: lmos,
        message: format!("the agent answered HTTP {status}"),
    })
}
