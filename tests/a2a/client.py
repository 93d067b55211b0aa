"""The official A2A Python SDK's client (PyPI `a2a-sdk`) against a running
sidecar, for tests/interop/a2a.rs.

Usage: python3 client.py <sidecar base URL> <agent base URL> [scenario] [Authorization] [task id]
  scenario `main` (default): card, send, stream, get, cancel, text messages,
    ListTasks, SubscribeToTask, push-config errors, task references, history;
  `owner`: with the Authorization header: the extended card, a task sent;
  `stranger`: with the Authorization header: what it sees of <task id>;
  `voice`: a spoken forecast, streamed.
Prints one JSON report line."""

import asyncio
import json
import sys

import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
)
from google.protobuf import json_format


def request(city: str, mode: str = "text") -> SendMessageRequest:
    message = {
        "messageId": f"m-{city}" if mode == "text" else f"m-{city}-{mode}",
        "role": "ROLE_USER",
        "parts": [{"data": {"question": f"What is the weather in {city}?", "interactionMode": mode}}],
    }
    return json_format.ParseDict({"message": message}, SendMessageRequest())


def text(words: str, task_id=None, context_id=None, return_immediately=False) -> SendMessageRequest:
    """The SDK's own text-message helper, as a newcomer would write it."""
    message = new_text_message(words, role=Role.ROLE_USER, task_id=task_id, context_id=context_id)
    r = SendMessageRequest(message=message)
    r.configuration.return_immediately = return_immediately
    return r


def as_dict(m) -> dict:
    return json_format.MessageToDict(m)


async def error_of(call) -> str:
    """The SDK's error class for an awaited call that must fail."""
    try:
        result = await call
        return f"no error: {result}"
    except Exception as e:  # noqa: BLE001 - the class is the answer
        return type(e).__name__


async def stream_error_of(events) -> str:
    try:
        async for _ in events:
            pass
        return "no error"
    except Exception as e:  # noqa: BLE001
        return type(e).__name__


async def main_scenario(http, sidecar: str, agent: str, report: dict) -> None:
    # The sidecar's one agent, from the well-known card.
    only = await create_client(sidecar, ClientConfig(streaming=False, httpx_client=http))
    report["card"] = as_dict(await A2ACardResolver(http, sidecar).get_agent_card())
    # Sent and answered when done.
    events = [as_dict(e) async for e in only.send_message(request("Oslo"))]
    report["sent"] = events
    task_id = events[-1]["task"]["id"]
    report["got"] = as_dict(await only.get_task(GetTaskRequest(id=task_id)))
    report["gotShort"] = as_dict(await only.get_task(GetTaskRequest(id=task_id, history_length=1)))

    # The natural call: a text message, sent and streamed.
    report["text"] = [as_dict(e) async for e in only.send_message(text("What is the weather in Oslo?"))]
    streaming = await create_client(agent, ClientConfig(streaming=True, httpx_client=http))
    report["textStreamed"] = [as_dict(e) async for e in streaming.send_message(text("What is the weather in Bergen?"))]

    # Streamed: submitted, working, the forecast, completed.
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

    # Resubscribed to a running task: it goes on to the end.
    started = [as_dict(e) async for e in only.send_message(text("What is the weather in Lima?", return_immediately=True))]
    running = started[-1]["task"]["id"]
    report["subscribed"] = [as_dict(e) async for e in streaming.subscribe(SubscribeToTaskRequest(id=running))]
    report["subscribeFinished"] = await stream_error_of(streaming.subscribe(SubscribeToTaskRequest(id=task_id)))

    # Listed: every task of this caller, newest first, by pages.
    report["listed"] = as_dict(await only.list_tasks(ListTasksRequest()))
    report["listedPage"] = as_dict(await only.list_tasks(ListTasksRequest(page_size=2)))
    token = report["listedPage"].get("nextPageToken", "")
    report["listedNext"] = as_dict(await only.list_tasks(ListTasksRequest(page_size=2, page_token=token)))
    report["listedCompleted"] = as_dict(
        await only.list_tasks(ListTasksRequest(status="TASK_STATE_COMPLETED", include_artifacts=True))
    )

    # Push notifications: not supported, with the specification's error.
    config = TaskPushNotificationConfig(task_id=task_id, url="https://example.com/hook")
    report["push"] = [
        await error_of(only.create_task_push_notification_config(config)),
        await error_of(only.get_task_push_notification_config(GetTaskPushNotificationConfigRequest(task_id=task_id, id="x"))),
        await error_of(only.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=task_id))),
        await error_of(only.delete_task_push_notification_config(DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="x"))),
    ]
    # No authentication on the port: no extended card.
    report["extended"] = await error_of(only.get_extended_agent_card(GetExtendedAgentCardRequest()))

    # Task references: unknown, finished, another context.
    context = report["got"]["contextId"]
    report["refs"] = {
        "unknown": await error_of(first(only.send_message(text("again?", task_id="no-such-task")))),
        "finished": await error_of(first(only.send_message(text("again?", task_id=task_id)))),
        "otherContext": await error_of(
            first(only.send_message(text("again?", task_id=task_id, context_id=context + "-other")))
        ),
    }


async def first(events):
    async for e in events:
        return e
    return None


async def owner_scenario(http, agent: str, report: dict) -> None:
    client = await create_client(agent, ClientConfig(streaming=False, httpx_client=http))
    report["extended"] = as_dict(await client.get_extended_agent_card(GetExtendedAgentCardRequest()))
    events = [as_dict(e) async for e in client.send_message(text("What is the weather in Kyiv?"))]
    report["sent"] = events[-1]["task"]
    report["listed"] = as_dict(await client.list_tasks(ListTasksRequest()))


async def stranger_scenario(http, agent: str, task_id: str, report: dict) -> None:
    client = await create_client(agent, ClientConfig(streaming=True, httpx_client=http))
    report["listed"] = as_dict(await client.list_tasks(ListTasksRequest()))
    report["get"] = await error_of(client.get_task(GetTaskRequest(id=task_id)))
    report["cancel"] = await error_of(client.cancel_task(CancelTaskRequest(id=task_id)))
    report["subscribe"] = await stream_error_of(client.subscribe(SubscribeToTaskRequest(id=task_id)))
    report["continue"] = await error_of(first(client.send_message(text("again?", task_id=task_id))))


async def main(args: list) -> dict:
    sidecar, agent = args[0], args[1]
    scenario = args[2] if len(args) > 2 else "main"
    headers = {"Authorization": args[3]} if len(args) > 3 else {}
    report = {"errors": []}
    try:
        async with httpx.AsyncClient(timeout=30, headers=headers) as http:
            if scenario == "owner":
                await owner_scenario(http, agent, report)
            elif scenario == "stranger":
                await stranger_scenario(http, agent, args[4], report)
            elif scenario == "voice":
                # The WeatherAgent speaks: its audio streams as file parts.
                streaming = await create_client(agent, ClientConfig(streaming=True, httpx_client=http))
                report["events"] = [as_dict(e) async for e in streaming.send_message(request("Oslo", "voice"))]
            else:
                await main_scenario(http, sidecar, agent, report)
    except BaseException as e:  # noqa: BLE001 - the report says what failed
        report["errors"].append(repr(e))
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1:]))), flush=True)
