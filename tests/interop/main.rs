//! Against software nobody here wrote: the official MCP and A2A SDKs, node-wot,
//! headless Chromium (console and cross-site attacks), NATS clusters, and
//! OpenTelemetry (OTLP receivers, the SDK's in-memory exporter).
//!
//! One test binary of six (`cargo test --test interop`); a module per former
//! `tests/<name>.rs`, each test keeping its name under that module
//! (`nats_native::...`). The non-Rust helpers stay where they were
//! (`tests/mcp/`, `tests/a2a/`, `tests/node-wot/`). New tests that need an
//! external program belong here: add the file and a `mod` line below.

mod a2a;
mod a2a_tck;
mod browser;
mod cluster;
mod cluster_streams;
mod console;
mod console_broker;
mod console_history;
mod console_traces;
mod imports;
mod mcp;
mod mcp_features;
mod mcp_oauth;
mod mcp_oauth_clients;
mod mcp_stateless;
mod mqtt_websocket;
mod nats_cluster;
mod nats_native;
mod node_wot;
mod oidc;
mod otlp;
mod tracing;
