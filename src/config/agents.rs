//! `[mcp]` and `[a2a]`: the agent protocols on the HTTP port (MCP at
//! `/mcp`, A2A at `/a2a/...`), with what a client may make the sidecar hold.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// Serve MCP (Streamable HTTP) at `/mcp`.
    pub enabled: bool,
    /// MCP sessions the sidecar holds at once; past it `initialize` is
    /// refused (503) until sessions end or idle out.
    pub max_sessions: usize,
    /// Sessions one principal may hold; its next `initialize` closes its
    /// least recently used one (a client that never says `DELETE` cannot
    /// lock itself, or anyone else, out).
    pub max_sessions_per_principal: usize,
    /// A session unused this long (ms) is forgotten.
    pub session_idle_ms: u64,
    /// Bytes an SSE stream may have queued for a client that does not read;
    /// past it progress notifications are dropped (the result never is).
    pub max_stream_queue_bytes: usize,
    /// Bytes all SSE streams (MCP and A2A) together may have queued for
    /// clients that do not read: one client's many calls share it.
    pub max_total_stream_bytes: usize,
    /// Bytes of binary stream chunks (audio, images) one tool call may
    /// hold until it answers with them as content.
    pub max_media_bytes: usize,
    /// Bytes of such media all tool calls together may hold.
    pub max_total_media_bytes: usize,
    /// `subscriptions/listen` streams (revision 2026-07-28) open at once;
    /// past it a new one is refused (503).
    pub max_listens: usize,
    /// Listen streams one principal may hold; its next one ends its oldest.
    pub max_listens_per_principal: usize,
    /// Resource URIs one listen stream may follow (`resourceSubscriptions`);
    /// the acknowledgment names those it follows.
    pub max_listen_resources: usize,
    /// MCP's OAuth 2.1 resource-server face (with `auth.jwt`).
    pub oauth: super::McpOAuthConfig,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            enabled: true,
            max_sessions: 1_024,
            max_sessions_per_principal: 32,
            session_idle_ms: 30 * 60 * 1_000,
            max_stream_queue_bytes: 1024 * 1024,
            max_total_stream_bytes: 64 * 1024 * 1024,
            max_media_bytes: 8 * 1024 * 1024,
            max_total_media_bytes: 64 * 1024 * 1024,
            max_listens: 1_024,
            max_listens_per_principal: 32,
            max_listen_resources: 64,
            oauth: super::McpOAuthConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct A2aConfig {
    /// Serve A2A (JSON-RPC, Agent Cards) at `/a2a/...` and
    /// `/.well-known/agent-card.json`.
    pub enabled: bool,
    /// A2A tasks the sidecar keeps at once, all principals together; past
    /// it a new task evicts the oldest finished one, or is refused when
    /// none has finished.
    pub max_tasks: usize,
    /// Tasks one principal may have kept; past it its oldest finished task
    /// is forgotten (or the new one refused when all still run).
    pub max_tasks_per_principal: usize,
    /// A task not updated this long (ms) is forgotten: `GetTask` then
    /// answers "task not found".
    pub task_ttl_ms: u64,
}

impl Default for A2aConfig {
    fn default() -> Self {
        A2aConfig {
            enabled: true,
            max_tasks: 10_000,
            max_tasks_per_principal: 1_000,
            task_ttl_ms: 60 * 60 * 1_000,
        }
    }
}
