"""A2A fixture agent for the sidecar's import tests (a2a-sdk 1.3.0, JSON-RPC).

    python3 tests/imports/a2a_agent.py [--v03] [--no-streaming]

Binds 127.0.0.1 port 0, prints `LISTENING <port>` (flushed), serves the
Agent Card at /.well-known/agent-card.json and JSON-RPC at /, until killed
or until stdin closes (so that a test that dies takes its agent with it).
The endpoint answers both A2A 1.0 (`A2A-Version: 1.0`) and 0.3 methods;
`--v03` makes the card declare only protocol version 0.3, so that clients
that follow the card speak 0.3 to it; `--no-streaming` makes it say
`capabilities.streaming: false`, so that they send blocking messages.

The agent picks what to do by the message's metadata `{"skill": ...}`, or
else by the first word of its first text part:

- forecast: 3 working updates ("step i"), an artifact in 3 appended chunks
  ("The weather ", "in Oslo ", "is sunny."), then completed;
- fail: failed, "the agent failed on purpose";
- ask: input-required, "Which city?"; answering it (same taskId) completes
  the task with the text "Forecast for <answer>: sunny.";
- slow: working updates every 200 ms for 30 s, then completed (cancellable);
- whoami (not on the card): answers with a Message (no task) whose text is
  the `traceparent` header the request carried (or "none");
- big (not on the card): an artifact of 100 000 bytes of text in one
  event, then completed (for size bounds).
"""

import asyncio
import os
import socket
import sys
import threading

import uvicorn
from a2a.helpers.proto_helpers import new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette


def skill(id_, name, description, tags, examples):
    return AgentSkill(
        id=id_, name=name, description=description, tags=tags, examples=examples
    )


SKILLS = [
    skill("forecast", "Forecast", "Tells the weather, streamed.", ["weather"], ["forecast Oslo"]),
    skill("fail", "Fail", "Fails on purpose.", ["test"], ["fail"]),
    skill("ask", "Ask", "Asks which city, then answers.", ["weather", "dialog"], ["ask"]),
    skill("slow", "Slow", "Works for 30 s unless cancelled.", ["test"], ["slow"]),
]


def card(port, version, streaming):
    url = f"http://127.0.0.1:{port}/"
    return AgentCard(
        name="Fixture Weather Agent",
        description="An A2A agent for the sidecar's tests.",
        version="1.2.3",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=version)
        ],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=SKILLS,
    )


def chosen_skill(context):
    message = context.message
    if message is not None and "skill" in message.metadata:
        return str(message.metadata["skill"])
    words = context.get_user_input().split()
    return words[0] if words else ""


def agent_text(updater, text):
    return updater.new_agent_message([new_text_part(text)])


class FixtureExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        what = chosen_skill(context)
        if what == "whoami":
            headers = context.call_context.state.get("headers", {})
            await event_queue.enqueue_event(
                Message(
                    role=Role.ROLE_AGENT,
                    message_id=os.urandom(8).hex(),
                    context_id=context.context_id,
                    parts=[new_text_part(headers.get("traceparent", "none"))],
                )
            )
            return
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(
                    id=context.task_id,
                    context_id=context.context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[context.message],
                )
            )
        elif context.current_task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            city = context.get_user_input() or "nowhere"
            await updater.complete(agent_text(updater, f"Forecast for {city}: sunny."))
            return
        await RUN.get(what, unknown)(updater)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel(agent_text(updater, "cancelled"))


async def forecast(updater):
    for i in range(1, 4):
        await updater.start_work(agent_text(updater, f"step {i}"))
        await asyncio.sleep(0.02)
    chunks = ["The weather ", "in Oslo ", "is sunny."]
    for i, chunk in enumerate(chunks):
        await updater.add_artifact(
            [new_text_part(chunk)],
            artifact_id="forecast",
            name="forecast",
            append=i > 0,
            last_chunk=i == len(chunks) - 1,
        )
    await updater.complete()


async def fail(updater):
    await updater.failed(agent_text(updater, "the agent failed on purpose"))


async def ask(updater):
    await updater.requires_input(agent_text(updater, "Which city?"))


async def slow(updater):
    for i in range(150):
        await updater.start_work(agent_text(updater, f"tick {i}"))
        await asyncio.sleep(0.2)
    await updater.complete(agent_text(updater, "done, slowly"))


async def big(updater):
    await updater.add_artifact([new_text_part("x" * 100_000)], name="big")
    await updater.complete()


async def unknown(updater):
    await updater.reject(agent_text(updater, "no such skill"))


RUN = {"forecast": forecast, "fail": fail, "ask": ask, "slow": slow, "big": big}


def exit_when_stdin_closes():
    try:
        while sys.stdin.read(4096):
            pass
    finally:
        os._exit(0)


def main():
    args = sys.argv[1:]
    version = "0.3" if "--v03" in args else "1.0"
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before saying so: connections wait in the backlog until
    # uvicorn serves them, none is refused.
    sock.listen(128)
    port = sock.getsockname()[1]
    agent_card = card(port, version, "--no-streaming" not in args)
    handler = DefaultRequestHandler(
        agent_executor=FixtureExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=agent_card,
    )
    routes = create_agent_card_routes(agent_card) + create_jsonrpc_routes(
        handler, "/", enable_v0_3_compat=True
    )
    app = Starlette(routes=routes)
    threading.Thread(target=exit_when_stdin_closes, daemon=True).start()
    print(f"LISTENING {port}", flush=True)
    config = uvicorn.Config(app, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
