"""The official A2A Python SDK's client (PyPI `a2a-sdk`) against a sidecar's
/a2a/{thingID} that serves an imported Thing, for
tests/interop/imports/faces.rs.

    python3 imports_client.py <agent URL> <skill> <stream: 0|1> <part as JSON>

Sends one message naming `skill` in its metadata with the one part given
(`{"text": ...}` or `{"data": {...}}`) and prints one JSON report line:
the events received, in order."""

import asyncio
import json
import sys

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types import SendMessageRequest
from google.protobuf import json_format


async def main(agent: str, skill: str, stream: bool, part: dict) -> dict:
    report = {"errors": [], "events": []}
    message = {
        "messageId": f"m-{skill}",
        "role": "ROLE_USER",
        "parts": [part],
        "metadata": {"skill": skill},
    }
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            client = await create_client(agent, ClientConfig(streaming=stream, httpx_client=http))
            request = json_format.ParseDict({"message": message}, SendMessageRequest())
            async for event in client.send_message(request):
                report["events"].append(json_format.MessageToDict(event))
    except BaseException as e:  # noqa: BLE001 - the report says what failed
        report["errors"].append(repr(e))
    return report


if __name__ == "__main__":
    agent, skill, stream, part = sys.argv[1:5]
    print(json.dumps(asyncio.run(main(agent, skill, stream == "1", json.loads(part)))), flush=True)
