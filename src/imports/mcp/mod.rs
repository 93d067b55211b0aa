//! MCP servers as upstreams (see `super::upstream`): over Streamable HTTP
//! (`url`) or stdio (`command`), speaking MCP 2025-11-25 (and accepting
//! servers that answer 2025-06-18 or 2025-03-26) or, over HTTP with a
//! server that speaks it, the stateless 2026-07-28 (`revision`).
//!
//! Tools are the Thing's actions, readable resources its properties
//! ([`map`]); a call is a `tools/call` whose progress notifications become
//! updates; a property read is a `resources/read`; `ping` probes it.
//!
//! - `session`: JSON-RPC state (IDs, waiting requests, progress, news);
//! - `connection`: the handshake and a request's life;
//! - `revision`: what 2026-07-28 changes on the wire (pure);
//! - `stdio`, `streamable`: the two transports;
//! - `map`: MCP's shapes to the contract's (pure).

mod connection;
mod map;
mod revision;
mod session;
mod stdio;
mod streamable;

#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod stateless_tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::connection::{Connection, Progress, Request};
use self::session::News;
use super::upstream::{Call, Change, Offer, Outcome, Update, Upstream, UpstreamError};
use crate::config::ImportConfig;
use crate::telemetry::TraceContext;

/// One `[[imports.mcp]]` server.
#[derive(Debug)]
pub struct McpUpstream {
    config: ImportConfig,
    target: String,
    news: Arc<News>,
    connection: Mutex<Option<Arc<Connection>>>,
    /// The readable resources of the last offer (property name to URI).
    resources: Mutex<Vec<map::Resource>>,
    /// The tools' arguments mirrored in `Mcp-Param-*` headers (2026-07-28).
    params: Mutex<HashMap<String, revision::ParamTokens>>,
    /// One connect or close at a time.
    lifecycle: tokio::sync::Mutex<()>,
}

impl McpUpstream {
    /// Nothing is started yet: [`Upstream::connect`] does. Fails when the
    /// configuration names neither a `url` nor a `command`.
    pub fn new(config: &ImportConfig) -> Result<McpUpstream, UpstreamError> {
        let target = match (&config.url, config.command.is_empty()) {
            (Some(url), _) => url.clone(),
            (None, false) => config.command.join(" "),
            (None, true) => {
                return Err(UpstreamError::Unreachable(format!(
                    "imports `{}`: an MCP server needs a `url` or a `command`",
                    config.name
                )))
            }
        };
        Ok(McpUpstream {
            config: config.clone(),
            target,
            news: Arc::new(News::default()),
            connection: Mutex::new(None),
            resources: Mutex::new(Vec::new()),
            params: Mutex::new(HashMap::new()),
            lifecycle: tokio::sync::Mutex::new(()),
        })
    }

    fn current(&self) -> Result<Arc<Connection>, UpstreamError> {
        let connection = lock(&self.connection).clone();
        let connection =
            connection.ok_or_else(|| UpstreamError::Unreachable("not connected".into()))?;
        match connection.session.lost() {
            Some(reason) => Err(UpstreamError::Unreachable(reason)),
            None => Ok(connection),
        }
    }

    async fn read_offer(&self, connection: &Connection) -> Result<Offer, UpstreamError> {
        let timeout = self.config.timeout();
        let tools = optional(connection.list("tools/list", "tools", timeout).await)?;
        let listed = optional(
            connection
                .list("resources/list", "resources", timeout)
                .await,
        )?;
        let resources = map::resources(&listed);
        let offer = map::offer(&connection.init, &tools, &resources, &self.target);
        *lock(&self.resources) = resources;
        *lock(&self.params) = tools
            .iter()
            .filter_map(|tool| {
                let tokens = revision::param_tokens(&tool["inputSchema"]);
                let name = tool["name"].as_str()?;
                (!tokens.is_empty()).then(|| (name.to_owned(), tokens))
            })
            .collect();
        Ok(offer)
    }

    /// Lets go of the current connection; news of it is no news any more.
    async fn let_go(&self) {
        self.news.begin();
        let connection = lock(&self.connection).take();
        if let Some(connection) = connection {
            connection.close().await;
        }
    }

    /// The MCP revision spoken, while connected (`2026-07-28`,
    /// `2025-11-25`, …).
    pub fn protocol_version(&self) -> Option<String> {
        let connection = lock(&self.connection).clone()?;
        Some(connection.version().to_owned())
    }

    /// The stdio child's process ID, while connected (tests kill it).
    pub fn child_pid(&self) -> Option<u32> {
        lock(&self.connection).as_ref().and_then(|c| c.pid())
    }
}

impl Upstream for McpUpstream {
    fn protocol(&self) -> &'static str {
        "mcp"
    }

    fn target(&self) -> &str {
        &self.target
    }

    async fn connect(&self) -> Result<Offer, UpstreamError> {
        let _one = self.lifecycle.lock().await;
        self.let_go().await;
        let generation = self.news.begin();
        let connection = Connection::open(&self.config, self.news.clone(), generation).await?;
        *lock(&self.connection) = Some(connection.clone());
        self.read_offer(&connection).await
    }

    async fn offer(&self) -> Result<Offer, UpstreamError> {
        let connection = self.current()?;
        self.read_offer(&connection).await
    }

    async fn call(
        &self,
        call: Call,
        updates: mpsc::Sender<Update>,
        cancel: CancellationToken,
    ) -> Result<Outcome, UpstreamError> {
        let arguments = match call.input {
            None | Some(Value::Null) => json!({}),
            Some(input @ Value::Object(_)) => input,
            Some(_) => {
                return Err(UpstreamError::Refused {
                    status: 400,
                    message: "an MCP tool's input is an object".into(),
                })
            }
        };
        let connection = self.current()?;
        let mut meta = trace_meta(call.trace.as_ref());
        meta.insert("progressToken".into(), json!(call.id));
        let headers = match (connection.is_modern(), lock(&self.params).get(&call.action)) {
            (true, Some(tokens)) => revision::param_headers(tokens, &arguments),
            _ => Vec::new(),
        };
        let params = json!({"name": call.action, "arguments": arguments, "_meta": meta});
        let request = Request {
            trace: call.trace.as_ref(),
            headers,
            progress: Some(Progress {
                token: call.id.clone(),
                updates,
                per_second: self.config.max_updates_per_second,
            }),
            cancel: Some(&cancel),
            ..Request::new("tools/call", params, self.config.timeout())
        };
        match connection.call(request).await? {
            Some(result) => map::outcome(&result),
            None => Ok(Outcome::Cancelled),
        }
    }

    async fn read(
        &self,
        property: &str,
        trace: Option<TraceContext>,
    ) -> Result<Value, UpstreamError> {
        let uri = lock(&self.resources)
            .iter()
            .find(|r| r.property.name == property)
            .map(|r| r.uri.clone())
            .ok_or_else(|| UpstreamError::NotFound(property.to_owned()))?;
        let connection = self.current()?;
        let params = json!({"uri": uri, "_meta": trace_meta(trace.as_ref())});
        let request = Request {
            trace: trace.as_ref(),
            ..Request::new("resources/read", params, self.config.timeout())
        };
        let result = connection.exchange(request).await?;
        map::read_value(&result, &uri)
    }

    async fn probe(&self) -> Result<(), UpstreamError> {
        let connection = self.current()?;
        // 2026-07-28 has no `ping`; `server/discover` answers as cheaply.
        let method = match connection.is_modern() {
            true => "server/discover",
            false => "ping",
        };
        let ping = Request::new(method, json!({}), self.config.connect_timeout());
        connection.exchange(ping).await.map(drop)
    }

    async fn changed(&self) -> Change {
        self.news.next().await
    }

    async fn close(&self) {
        let _one = self.lifecycle.lock().await;
        self.let_go().await;
    }
}

/// A list the server may not offer at all (no such capability: "method
/// not found") is empty.
fn optional(listed: Result<Vec<Value>, UpstreamError>) -> Result<Vec<Value>, UpstreamError> {
    match listed {
        Err(UpstreamError::Refused { status: 404, .. }) => Ok(Vec::new()),
        other => other,
    }
}

/// `_meta` carrying the W3C trace context (as the MCP OpenTelemetry
/// conventions have it: `traceparent`, `tracestate`).
fn trace_meta(trace: Option<&TraceContext>) -> serde_json::Map<String, Value> {
    let mut meta = serde_json::Map::new();
    if let Some(trace) = trace {
        meta.insert("traceparent".into(), json!(trace.traceparent));
        if let Some(state) = &trace.tracestate {
            meta.insert("tracestate".into(), json!(state));
        }
    }
    meta
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
