//! A2A agents as upstreams (see `super::upstream`).
