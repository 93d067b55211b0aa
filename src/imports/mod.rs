//! Imports: MCP servers and A2A agents brought onto the bus, each as a
//! Thing of its own (`[[imports.mcp]]`, `[[imports.a2a]]`; docs/imports.md).
//!
//! Each upstream is an [`upstream::Upstream`] (`mcp/`, `a2a/`), served to
//! the gateway by a [`bridge`] through an in-process agent link
//! (`crate::gateway::agent_link`): to the router, the records, the faces
//! and the cluster it is one more agent hosting its Thing.

pub mod a2a;
pub mod http;
pub mod mcp;
pub mod upstream;
