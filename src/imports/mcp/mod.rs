//! MCP servers as upstreams, over Streamable HTTP or stdio (see `super::upstream`).
