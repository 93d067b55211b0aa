"""The official MCP Python SDK's client (PyPI `mcp`) against a running
sidecar, for tests/interop/mcp.rs. Usage: python3 client.py <scenario> <url>
Prints progress lines ("step: ...") and, last, one JSON report line.

With its defaults the SDK (2.3.0) probes `server/discover` and, the sidecar
answering it, speaks the stateless revision 2026-07-28: news of tools comes
on a `subscriptions/listen` stream, and a call is cancelled by closing its
answer's stream (cancelling the task that awaits it)."""

import asyncio
import json
import sys

from mcp import Client


async def main(scenario: str, url: str) -> dict:
    report = {"scenario": scenario, "errors": []}
    changed = asyncio.Event()

    async def on_message(message):
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            changed.set()

    async def names(client):
        listed = await client.list_tools(cache_mode="bypass")
        return [t.name for t in listed.tools]

    try:
        async with Client(url, message_handler=on_message) as client:
            report["protocolVersion"] = client.protocol_version
            if scenario == "weather":
                listed = await client.list_tools()
                report["tools"] = [t.name for t in listed.tools]
                progress = []

                async def on_progress(value, total, message):
                    progress.append({"progress": value, "message": message})

                result = await client.call_tool(
                    "getWeather",
                    {"question": "What is the weather in Lisbon?", "interactionMode": "text"},
                    progress_callback=on_progress,
                )
                report["progress"] = progress
                report["result"] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
                missing = await client.call_tool("getWeather", {"interactionMode": "text"})
                report["missing"] = missing.model_dump(mode="json", by_alias=True, exclude_none=True)
            elif scenario == "voice":
                # The WeatherAgent speaks its answer: audio content beside
                # the text, read through the SDK's own content types.
                result = await client.call_tool(
                    "getWeather",
                    {"question": "What is the weather in Oslo?", "interactionMode": "voice"},
                )
                report["result"] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
                report["types"] = [type(c).__name__ for c in result.content]
            elif scenario == "cancel":
                started = asyncio.Event()

                async def on_started(value, total, message):
                    started.set()

                call = asyncio.create_task(
                    client.call_tool(
                        "getWeather",
                        {"question": "Will it rain in Bergen?", "interactionMode": "text"},
                        progress_callback=on_started,
                    )
                )
                await asyncio.wait_for(started.wait(), 10)
                call.cancel()
                try:
                    await call
                    report["cancelled"] = False
                except asyncio.CancelledError:
                    report["cancelled"] = True
                print("step: cancelled", flush=True)
            elif scenario == "listen":
                # 2026-07-28: the listen stream says when the tools change.
                report["before"] = await names(client)
                async with client.listen(tools_list_changed=True) as sub:
                    report["honored"] = str(sub.honored)
                    print("step: listed", flush=True)
                    try:
                        event = await asyncio.wait_for(sub.__anext__(), 10)
                        report["listChanged"] = type(event).__name__
                    except asyncio.TimeoutError:
                        report["listChanged"] = None
                report["after"] = await names(client)
            elif scenario == "vanish":
                report["before"] = await names(client)
                # The SDK opens its GET stream in the background; give it
                # time to be up before the agent goes.
                await asyncio.sleep(0.5)
                print("step: listed", flush=True)
                try:
                    await asyncio.wait_for(changed.wait(), 10)
                    report["listChanged"] = True
                except asyncio.TimeoutError:
                    report["listChanged"] = False
                report["after"] = await names(client)
    except BaseException as e:  # noqa: BLE001 - the report says what failed
        report["errors"].append(repr(e))
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))), flush=True)
