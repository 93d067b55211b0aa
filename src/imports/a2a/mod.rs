//! A2A agents as upstreams (see `super::upstream`).

pub mod card;
mod url;
