"""The official A2A Python SDK's client (PyPI `a2a-sdk`) against a running
sidecar, for tests/interop/a2a.rs. Usage: python3 client.py <sidecar base URL> <agent base URL>
Prints one JSON report line."""

import asyncio
import json
import sys

import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types import CancelTaskRequest, GetTaskRequest, SendMessageRequest
from google.protobuf import json_format


def request(city: str) -> SendMessageRequest:
    message = {
        "messageId": f"m-{city}",
        "role": "ROLE_USER",
        "parts": [{"data": {"question": f"What is the weather in {city}?", "interactionMode": "text"}}],
    }
    return json_format.ParseDict({"message": message}, SendMessageRequest())


def as_dict(m) -> dict:
    return json_format.MessageToDict(m)


async def main(sidecar: str, agent: str) -> dict:
    report = {"errors": []}
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            # The sidecar's one agent, from the well-known card.
            only = await create_client(sidecar, ClientConfig(streaming=False, httpx_client=http))
            report["card"] = as_dict(await A2ACardResolver(http, sidecar).get_agent_card())
            # Sent and answered when done.
            events = [as_dict(e) async for e in only.send_message(request("Oslo"))]
            report["sent"] = events
            task_id = events[-1]["task"]["id"]
            report["got"] = as_dict(await only.get_task(GetTaskRequest(id=task_id)))

            # Streamed: submitted, working, the forecast, completed.
            streaming = await create_client(agent, ClientConfig(streaming=True, httpx_client=http))
            report["streamed"] = [as_dict(e) async for e in streaming.send_message(request("Rome"))]

            # Cancelled while it works.
            cancelled = None
            async for e in streaming.send_message(request("Paris")):
                event = as_dict(e)
                update = event.get("statusUpdate")
                if update and update["status"]["state"] == "TASK_STATE_WORKING" and cancelled is None:
                    cancelled = as_dict(await streaming.cancel_task(CancelTaskRequest(id=update["taskId"])))
                    report["cancelled"] = cancelled
                report.setdefault("cancelStream", []).append(event)
    except BaseException as e:  # noqa: BLE001 - the report says what failed
        report["errors"].append(repr(e))
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))), flush=True)
