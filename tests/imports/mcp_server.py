"""The MCP fixture server the imports tests talk to (Python `mcp` 2.3.0,
whose FastMCP is now `MCPServer`).

    python3 tests/imports/mcp_server.py stdio   # MCP over stdin/stdout
    python3 tests/imports/mcp_server.py http    # Streamable HTTP at /mcp

Over HTTP it binds 127.0.0.1 on a free port, prints `LISTENING <port>`
(flushed) and serves until killed, or until its parent process is gone.

Tools: add, echo, count (progress, cancellable), fail, add_tool (the tool
list changes), whoami (the traceparent it got in `_meta`); resource
memo://greeting.
"""

import asyncio
import os
import socket
import sys
import threading
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel

server = MCPServer(
    name="mcp-fixture",
    version="1.0.0",
    instructions="A fixture for the sidecar's imports tests.",
    log_level="WARNING",
)


class Sum(BaseModel):
    sum: float


@server.tool(
    description="Adds two numbers.",
    annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True),
)
def add(a: float, b: float) -> Sum:
    return Sum(sum=a + b)


@server.tool(description="Echoes the text.", structured_output=False)
def echo(text: str) -> str:
    return text


@server.tool(description="Counts to `to`, one progress step every `delay_ms`.", structured_output=False)
async def count(to: int, delay_ms: int, ctx: Context) -> str:
    for i in range(1, to + 1):
        await asyncio.sleep(delay_ms / 1000)
        await ctx.report_progress(i, to, f"step {i}")
    return f"counted to {to}"


@server.tool(description="Fails, on purpose.")
def fail() -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text="the tool failed on purpose")], is_error=True)


@server.tool(description="Adds a tool named `name` (the tool list changes).", structured_output=False)
async def add_tool(name: str, ctx: Context) -> str:
    def greet() -> str:
        return f"I am {name}"

    server.add_tool(greet, name=name, description=f"The tool {name}.", structured_output=False)
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool(description="Answers the traceparent of its request's _meta.", structured_output=False)
def whoami(ctx: Context) -> str:
    meta = ctx.request_context.meta or {}
    return meta.get("traceparent") or "none"


@server.resource("memo://greeting", name="greeting", mime_type="text/plain")
def greeting() -> str:
    return "hello from the fixture"


def exit_with_parent() -> None:
    """Exits when the process that started this one is gone."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


async def serve_http() -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is told: a client may connect at once (its
    # connection waits in the backlog until uvicorn accepts it).
    sock.listen(128)
    app = server.streamable_http_app(streamable_http_path="/mcp")
    config = uvicorn.Config(app, log_level="warning")
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    exit_with_parent()
    if mode == "stdio":
        server.run("stdio")
    elif mode == "http":
        asyncio.run(serve_http())
    else:
        sys.exit(f"usage: {sys.argv[0]} stdio|http")


if __name__ == "__main__":
    main()
