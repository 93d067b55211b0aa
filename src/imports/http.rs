//! The HTTP client both MCP (Streamable HTTP) and A2A upstreams use.
