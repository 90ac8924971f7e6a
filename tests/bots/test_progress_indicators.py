"""ProgressReporter's indicators run on timers: a quick turn starts no task for them, and
typing, the heartbeat and the throttled edits still happen when they are due (a fake
client; counts of tasks and calls, waits on conditions)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from bots.events import ReplyTarget
from bots.format import Chunk
from bots.turn import ProgressReporter
from geode.loop.events import ModelResponded, ToolProposed, TurnStarted

TARGET = ReplyTarget(channel="c", thread_root="1")


class _Client:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def react(self, target: ReplyTarget, message_id: str, emoji: str) -> None:
        self.calls.append(("react", emoji))

    async def send(self, target: ReplyTarget, chunk: Chunk) -> str:
        self.calls.append(("send", chunk.fallback))
        return "m1"

    async def edit(self, target: ReplyTarget, message_id: str, chunk: Chunk) -> None:
        self.calls.append(("edit", chunk.fallback))

    async def typing(self, target: ReplyTarget) -> None:
        self.calls.append(("typing", ""))

    def render_progress(self, text: str) -> Chunk:
        return Chunk(formatted=text, fallback=text)

    def kinds(self) -> list[str]:
        return [k for k, _ in self.calls]


class _Outbox:
    def __init__(self) -> None:
        self.recorded: list[str] = []

    async def record_progress_message(self, row: Any, message_id: str) -> None:
        self.recorded.append(message_id)


class _Row:
    progress_message_id: str | None = None


def _reporter(client: _Client, **kw: Any) -> ProgressReporter:
    kw = {"edit_interval_s": 0.0, "typing_interval_s": 30.0, "typing_delay_s": 1.0,
          "heartbeat_interval_s": 15.0, **kw}
    return ProgressReporter(client=client, outbox=_Outbox(), row=_Row(),  # type: ignore[arg-type]
                            target=TARGET, inbound_message_id="9", **kw)


def _count_tasks() -> list[Any]:
    loop = asyncio.get_running_loop()
    made: list[Any] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any],
                **kw: Any) -> asyncio.Task[Any]:
        made.append(coro)
        return asyncio.Task(coro, loop=loop, **kw)

    loop.set_task_factory(factory)  # type: ignore[arg-type]
    return made


async def _until(cond: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not cond():
            await asyncio.sleep(0.01)


async def test_a_quick_turn_starts_no_indicator_task() -> None:
    client = _Client()
    made = _count_tasks()
    try:
        progress = _reporter(client)
        await progress.start()
        await progress.on_event(TurnStarted(turn_id="t"))
        await progress.on_event(ModelResponded(turn_id="t", model="m", stop_reason="end_turn",
                                                input_tokens=3, output_tokens=4))
        await progress.close()
    finally:
        asyncio.get_running_loop().set_task_factory(None)
    assert client.kinds() == ["react", "send"]  # ack first, then the progress message
    assert len(made) <= 2  # the ack and the progress message's send; no loop of its own


async def test_typing_starts_after_its_delay_and_repeats() -> None:
    client = _Client()
    progress = _reporter(client, typing_delay_s=0.05, typing_interval_s=0.05)
    await progress.start()
    assert "typing" not in client.kinds()  # not before the delay
    await _until(lambda: client.kinds().count("typing") >= 2)
    await progress.close()
    n = client.kinds().count("typing")
    await asyncio.sleep(0.12)
    assert client.kinds().count("typing") == n  # closed: no more


async def test_a_queued_turn_types_only_once_it_runs() -> None:
    client = _Client()
    progress = _reporter(client, typing_delay_s=0.0)
    progress.queued(2)
    await progress.start()
    await _until(lambda: ("edit", "⏳ Queued — 2 ahead") in client.calls)
    assert "typing" not in client.kinds()
    progress.queued(None)
    await _until(lambda: "typing" in client.kinds())
    await progress.close()


async def test_events_and_the_heartbeat_edit_the_message() -> None:
    client = _Client()
    progress = _reporter(client, heartbeat_interval_s=0.05)
    await progress.start()
    await progress.on_event(ToolProposed(id="c", name="list_dir"))
    await _until(lambda: any(k == "edit" and "🔧 list_dir" in t for k, t in client.calls))
    edits = client.kinds().count("edit")
    await _until(lambda: client.kinds().count("edit") >= edits + 2)  # the heartbeat's
    await progress.close()
    n = client.kinds().count("edit")
    await asyncio.sleep(0.15)
    assert client.kinds().count("edit") == n


async def test_edits_are_throttled_and_the_last_state_lands() -> None:
    client = _Client()
    progress = _reporter(client, edit_interval_s=0.2)
    await progress.start()
    for i in range(5):
        await progress.on_event(ToolProposed(id=f"c{i}", name=f"tool{i}"))
        await asyncio.sleep(0)
    await _until(lambda: any(k == "edit" and "tool4" in t for k, t in client.calls))
    assert client.kinds().count("edit") <= 2  # the first at once, the rest together
    await progress.close()
