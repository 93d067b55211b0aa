//! MCP servers as upstreams, over Streamable HTTP or stdio (see `super::upstream`).
//! (A stub until the MCP client lands.)

use super::upstream::UpstreamError;
use crate::config::ImportConfig;

pub enum McpUpstream {}

impl McpUpstream {
    pub fn new(_config: &ImportConfig) -> Result<Stub, UpstreamError> {
        Err(UpstreamError::Unreachable("not built yet".into()))
    }
}

pub type Stub = super::a2a::A2aUpstream;
