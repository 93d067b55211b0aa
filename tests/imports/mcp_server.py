"""The MCP fixture server the imports tests talk to (Python `mcp` 2.3.0,
whose FastMCP is now `MCPServer`).

    python3 tests/imports/mcp_server.py stdio   # MCP over stdin/stdout
    python3 tests/imports/mcp_server.py http    # Streamable HTTP at /mcp
    python3 tests/imports/mcp_server.py http --revision 2026-07-28
    python3 tests/imports/mcp_server.py http --revision 2025-11-25

Over HTTP the SDK serves both eras of the protocol: the handshake revisions
(`initialize`, sessions; up to 2025-11-25) and the stateless 2026-07-28
(`server/discover`, the version in every request's `_meta` and
`MCP-Protocol-Version` header). `--revision` serves only one of them, as a
server of that era alone would answer the other's requests.

Over HTTP it binds 127.0.0.1 on a free port, prints `LISTENING <port>`
(flushed) and serves until killed, or until its parent process is gone.

Tools: add, echo, count (progress, cancellable), fail, add_tool (the tool
list changes), whoami (the traceparent it got in `_meta`), locate (its
argument annotated `x-mcp-header`: at 2026-07-28 the server checks the
`Mcp-Param-Region` header against it); resource memo://greeting.
"""

import asyncio
import os
import socket
import sys
import threading
import time
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

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
    try:
        for i in range(1, to + 1):
            await asyncio.sleep(delay_ms / 1000)
            await ctx.report_progress(i, to, f"step {i}")
    except asyncio.CancelledError:
        # On stderr, for a human reading a test's output: the cancel arrived.
        print(f"count cancelled at step {i} of {to}", file=sys.stderr, flush=True)
        raise
    return f"counted to {to}"


@server.tool(description="Fails, on purpose.")
def fail() -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text="the tool failed on purpose")], is_error=True)


@server.tool(description="Adds a tool named `name` (the tool list changes).", structured_output=False)
async def add_tool(name: str, ctx: Context) -> str:
    def greet() -> str:
        return f"I am {name}"

    server.add_tool(greet, name=name, description=f"The tool {name}.", structured_output=False)
    if ctx.request_context.protocol_version in MODERN_PROTOCOL_VERSIONS:
        # 2026-07-28: news goes to the `subscriptions/listen` streams only.
        await ctx.notify_tools_changed()
    else:
        await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool(description="Says where: its region, mirrored in the Mcp-Param-Region header.", structured_output=False)
def locate(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
    return f"in {region}"


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


def only(revision: str, app):
    """`app` serving one era: requests of the other are answered as a server
    of this era alone answers them (a handshake-era server knows neither
    `server/discover` nor requests without a session: 400; a 2026-07-28-only
    server refuses any other version: -32022 naming the one it supports)."""
    modern = revision in MODERN_PROTOCOL_VERSIONS
    if not modern and revision not in HANDSHAKE_PROTOCOL_VERSIONS:
        sys.exit(f"unknown revision {revision}")

    async def serve(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        headers = dict(scope["headers"])
        requested = headers.get(b"mcp-protocol-version", b"").decode("latin-1")
        session = headers.get(b"mcp-session-id")
        if modern and requested not in MODERN_PROTOCOL_VERSIONS:
            data = {"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": requested}
            error = {"code": -32022, "message": "Unsupported protocol version", "data": data}
            return await refuse(send, receive, error)
        if not modern and requested in MODERN_PROTOCOL_VERSIONS and session is None:
            error = {"code": -32000, "message": "Bad Request: Missing session ID"}
            return await refuse(send, receive, error)
        await app(scope, receive, send)

    return serve


async def refuse(send, receive, error) -> None:
    import json

    # The request's body is read first: the client is sending it.
    while (await receive()).get("more_body"):
        pass
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def serve_http(revision: str | None) -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is told: a client may connect at once (its
    # connection waits in the backlog until uvicorn accepts it).
    sock.listen(128)
    app = server.streamable_http_app(streamable_http_path="/mcp")
    if revision is not None:
        app = only(revision, app)
    config = uvicorn.Config(app, log_level="warning")
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    exit_with_parent()
    if mode == "stdio":
        server.run("stdio")
    elif mode == "http":
        revision = None
        if sys.argv[2:3] == ["--revision"] and len(sys.argv) > 3:
            revision = sys.argv[3]
        asyncio.run(serve_http(revision))
    else:
        sys.exit(f"usage: {sys.argv[0]} stdio|http [--revision 2026-07-28|2025-11-25]")


if __name__ == "__main__":
    main()
