//! The MQTT face: the guard in front of the embedded rumqttd, MQTT 3.1.1
//! and 5 on the wire, authentication and authorization on the MQTT
//! listeners, the broker's memory for filters (measured in a child
//! process). A broker that panics is in `tests/alone/`.
//!
//! One test binary of six (`cargo test --test mqtt`); a module per former
//! `tests/<name>.rs`, each test keeping its name under that module
//! (`mqtt_guard::...`). New MQTT-only test files belong here: add the file
//! and a `mod` line below. Tests that need the whole process to themselves
//! go to `tests/alone/`.

mod client_ids;
mod filter_memory;
mod jwt_local;
mod mqtt5_features;
mod mqtt5_subscriptions;
mod mqtt_conformance;
mod mqtt_guard;
mod mqtt_keeps;
mod mqtt_security;
mod mtls;
mod shared_subscriptions;
