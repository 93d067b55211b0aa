//! lmos-sidecar: a publish-subscribe sidecar for LMOS agents.
//!
//! - [`lmos`]: the LMOS message model (no I/O);
//! - [`topics`]: the LMOS-to-MQTT topic mapping (pure functions);
//! - [`broker`]: the message bus, here an embedded rumqttd;
//! - [`gateway`]: the `lmosprotocol` WebSocket gateway;
//! - [`http`]: the HTTP port that hosts it;
//! - [`wot`]: value-only topics for W3C WoT consumers;
//! - [`directory`]: the Thing Description directory;
//! - [`auth`]: principals, secrets and per-Thing rights; [`tls`]: PEM files;
//! - [`quotas`]: per-principal shares of what the sidecar holds;
//! - [`cluster`]: links to other sidecars (MQTT bridge, NATS, JetStream);
//! - [`client`]: the command-line client and its `check`;
//! - [`demo_agent`]: the draft's WeatherAgent (`lmos-sidecar demo-agent`);
//! - [`telemetry`]: logs, spans, metrics; [`config`], [`app`]: wiring.
//!
//! Where to change what: `docs/architecture.md`.

pub mod app;
pub mod auth;
pub mod broker;
pub mod client;
pub mod cluster;
pub mod config;
pub mod demo_agent;
pub mod directory;
pub mod gateway;
pub mod http;
pub mod imports;
pub mod listen;
pub mod lmos;
pub mod quotas;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod topics;
pub mod wot;

pub use app::Application;
pub use config::Config;
