//! The WebSocket gateway and the LMOS protocol end to end: handshake,
//! events, properties, requests and streams, resume, slow consumers, the
//! Kotlin dialect, faults and fuzzing, the example agent.
//!
//! One test binary of six (`cargo test --test gateway`); a module per former
//! `tests/<name>.rs`, each test keeping its name under that module
//! (`requests::...`). New gateway and protocol test files belong here: add
//! the file and a `mod` line below.

mod binary_stream;
mod events;
mod faults;
mod fuzz;
mod handshake;
mod imported;
mod kotlin_dialect;
mod properties;
mod requests;
mod resume;
mod slow_consumer;
mod streaming;
mod weather_agent;
