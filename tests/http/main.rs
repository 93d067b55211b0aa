//! The HTTP port: the HTTP binding, the TD directory, authentication and
//! TLS, hosts and origins, limits, per-principal quotas, slow clients, and
//! what operators read there (health, readiness, metrics).
//!
//! One test binary of six (`cargo test --test http`); a module per former
//! `tests/<name>.rs`, each test keeping its name under that module
//! (`security::...`). New HTTP-port test files belong here: add the file
//! and a `mod` line below.

mod directory;
mod finished;
mod hosts_and_origins;
mod http_binding;
mod jwt_local;
mod limits;
mod mcp_oauth;
mod mqtt_ws;
mod mtls;
mod operations;
mod quotas;
mod security;
mod slow_clients;
