//! A2A agents as upstreams (see `super::upstream`).

pub mod card;
pub mod message;
pub mod parts;
pub mod task;
mod url;
