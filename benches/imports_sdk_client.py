"""The official MCP Python SDK's client (PyPI `mcp`) calling the FastMCP
fixture's `echo` tool directly, one call at a time, for benches/imports.rs
(its reference row). Usage:

    python3 benches/imports_sdk_client.py <url> <calls> <warm-up calls>

Prints one JSON line: {"calls", "rate", "p50_us", "p99_us"}."""

import asyncio
import json
import sys
import time

from mcp import Client


def percentile(sorted_us, p):
    return sorted_us[min(int(len(sorted_us) * p), len(sorted_us) - 1)]


async def main(url: str, calls: int, warm: int) -> dict:
    async with Client(url) as client:
        for n in range(warm):
            await client.call_tool("echo", {"text": f"warm {n}"})
        latencies = []
        started = time.perf_counter()
        for n in range(calls):
            t = time.perf_counter()
            result = await client.call_tool("echo", {"text": f"call {n}"})
            latencies.append(int((time.perf_counter() - t) * 1e6))
            if result.content[0].text != f"call {n}":
                raise SystemExit(f"wrong answer to call {n}: {result}")
        rate = calls / (time.perf_counter() - started)
    latencies.sort()
    return {"calls": calls, "rate": rate, "p50_us": percentile(latencies, 0.5), "p99_us": percentile(latencies, 0.99)}


if __name__ == "__main__":
    url, calls, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(asyncio.run(main(url, calls, warm))), flush=True)
