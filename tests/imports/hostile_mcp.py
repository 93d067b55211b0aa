"""A hostile MCP server over stdio, for the sidecar's import tests: plain
Python, no SDK, newline-delimited JSON-RPC as MCP's stdio transport has it.

    python3 tests/imports/hostile_mcp.py

It answers `initialize`, `ping` and `tools/list` properly; its tools are
what a broken or malicious server does to a client:

- huge {mb?: number}: a text result of `mb` MiB (default 20) on one line;
- silent {}: never answers;
- malformed {}: writes a line that is not JSON, then an answer for the
  call's id whose `jsonrpc` is "1.0";
- flood {count?: integer}: `count` (default 200 000) progress
  notifications for the call's token as fast as it can, then answers
  text "flooded";
- ok {}: answers text "ok".

On start, before it reads anything, it writes a stderr flood: 50 000 lines
with control characters, ANSI escapes and forged log lines, and one line
of 2 MiB without a break. The writes block while nobody drains stderr:
a client that does not read it never gets its `initialize` answered.
It exits when stdin closes.
"""

import json
import sys
import threading

OUT = sys.stdout.buffer
LOCK = threading.Lock()
STDERR_LINES = 50_000
FLOOD_BATCH = 1_000

TOOLS = [
    {
        "name": "huge",
        "description": "Answers a result of `mb` MiB (default 20).",
        "inputSchema": {"type": "object", "properties": {"mb": {"type": "number"}}},
    },
    {
        "name": "silent",
        "description": "Never answers.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "malformed",
        "description": "Answers a line that is not JSON, then one that is not JSON-RPC 2.0.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "flood",
        "description": "Sends `count` progress notifications (default 200000), then answers.",
        "inputSchema": {"type": "object", "properties": {"count": {"type": "integer"}}},
    },
    {
        "name": "ok",
        "description": "Answers text ok.",
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": True, "idempotentHint": True},
    },
]


def write_lines(lines):
    """Writes whole lines under one lock, so that threads never interleave
    inside a message."""
    with LOCK:
        for line in lines:
            OUT.write(line if isinstance(line, bytes) else line.encode())
            OUT.write(b"\n")
        OUT.flush()


def send(message):
    write_lines([json.dumps(message, separators=(",", ":"))])


def answer(id_, result):
    send({"jsonrpc": "2.0", "id": id_, "result": result})


def text(t):
    return {"content": [{"type": "text", "text": t}], "isError": False}


def stderr_flood():
    err = sys.stderr.buffer
    for i in range(STDERR_LINES):
        err.write(
            b"\x1b[31;1mERROR\x1b[0m line %d \x07\x08\x00\x7f\r"
            b'{"level":"ERROR","message":"Sidecar ready.","forged":%d}'
            b" \x1b]0;owned\x07 \xff\xfe end\n" % (i, i)
        )
    err.write(b"A" * (2 * 1024 * 1024) + b"\n")
    err.flush()


def huge(id_, args):
    size = int(float(args.get("mb", 20)) * 1024 * 1024)
    # Built as bytes: json.dumps of 20 MiB is slow and needs twice the memory.
    prefix = b'{"jsonrpc":"2.0","id":' + json.dumps(id_).encode()
    prefix += b',"result":{"content":[{"type":"text","text":"'
    write_lines([prefix + b"x" * size + b'"}],"isError":false}}'])


def malformed(id_, _args):
    write_lines([b"this is {not JSON at all"])
    send({"jsonrpc": "1.0", "id": id_, "result": text("wrong version")})


def flood(id_, args, token):
    count = int(args.get("count", 200_000))
    token = id_ if token is None else token
    for start in range(0, count, FLOOD_BATCH):
        batch = []
        for i in range(start, min(start + FLOOD_BATCH, count)):
            note = {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": token, "progress": i + 1, "total": count, "message": f"flood {i + 1}"},
            }
            batch.append(json.dumps(note, separators=(",", ":")))
        write_lines(batch)
    answer(id_, text("flooded"))


def call(id_, params):
    name = params.get("name")
    args = params.get("arguments") or {}
    token = (params.get("_meta") or {}).get("progressToken")
    if name == "huge":
        huge(id_, args)
    elif name == "silent":
        pass
    elif name == "malformed":
        malformed(id_, args)
    elif name == "flood":
        flood(id_, args, token)
    elif name == "ok":
        answer(id_, text("ok"))
    else:
        send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32602, "message": f"Unknown tool: {name}"}})


def handle(message):
    method = message.get("method")
    id_ = message.get("id")
    params = message.get("params") or {}
    if id_ is None:
        return  # notifications (initialized, cancelled): nothing to answer
    if method == "initialize":
        answer(
            id_,
            {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "hostile", "version": "6.6.6"},
            },
        )
    elif method == "ping":
        answer(id_, {})
    elif method == "tools/list":
        answer(id_, {"tools": TOOLS})
    elif method == "tools/call":
        # A thread per call: `silent` and `flood` must not hold up the rest.
        threading.Thread(target=call, args=(id_, params), daemon=True).start()
    else:
        send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": f"Method not found: {method}"}})


def main():
    stderr_flood()
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            handle(message)


if __name__ == "__main__":
    main()
