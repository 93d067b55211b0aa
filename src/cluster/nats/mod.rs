//! The cluster on NATS's own protocol (`cluster.mode = "nats"`): core NATS
//! subjects for what every sidecar may want, request/reply for requests to
//! the sidecar whose agent hosts a Thing. See [`relay`] for what crosses
//! how, [`subjects`] for the subject mapping.

mod answers;
pub mod batch;
mod buckets;
mod carrier;
pub mod durable;
mod intake;
pub mod jetstream;
pub mod kv;
pub mod link;
pub mod options;
mod ordered;
pub mod relay;
pub mod subjects;

pub use link::NatsLink;
pub use options::OptionsError;
