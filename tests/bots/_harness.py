"""Shared by the Telegram, Slack and Discord test stacks: the restartable daemon host, the
scripted answers, and the crash seam of the exactly-once tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from geode.daemon import Daemon
from geode.messages import Message
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import BindingSettings, load_settings

#: every fault point between receipt and the recorded final reply, in pipeline order
CRASH_POINTS = [
    "recorded",
    "turn_accepted",
    "progress_started",
    "progress_sent_before_record",
    "turn_started",
    "tool_call",
    "turn_finished",
    "final_recorded",
    "final_edited_before_record",
    "delivered",
]
#: points after which the answer exists: recovery must not ask the model again
ANSWERED_POINTS = ("turn_finished", "final_recorded", "final_edited_before_record", "delivered")


def user_messages(messages: list[Message]) -> list[str]:
    return [m.text for m in messages if m.role == "user" and m.text]


def echo(request: ModelRequest) -> str:
    """A scripted answer naming the latest user message it answers (text after 'id N): ')."""
    for m in reversed(request.messages):
        if m.role == "user" and m.text and "(id " in m.text:
            return f"answer to: {m.text.rsplit('): ', 1)[-1]}"
    return "answer to: ?"


def answering(request: ModelRequest) -> object:
    """Calls list_dir once per turn, then answers naming the user's message."""
    last = request.messages[-1]
    if last.role == "user" and "(id " in (last.text or ""):
        return ToolCall("list_dir", {"path": "."})
    return echo(request)


def calls_tool(name: str, args: dict[str, Any]) -> Callable[[ModelRequest], object]:
    """A scripted answer: a user's message gets a call of tool ``name`` with ``args``; the
    request after it (the tool's result, or its denial) gets "done"."""

    def respond(request: ModelRequest) -> object:
        last = request.messages[-1]
        if last.role == "user" and "(id " in (last.text or ""):
            return ToolCall(name, args)
        return "done"

    return respond


def tool_results(provider: ScriptedProvider) -> list[str]:
    """The text of every tool result ``provider`` was shown, request after request."""
    return [text for req in provider.calls for m in req.messages
            for block in getattr(m, "content", []) or []
            if (text := getattr(block, "text_content", None))]


async def quiescent(stack: Any, within: float = 10.0) -> None:
    """Until every recorded event is decided and nothing is owed in the outbox (reply,
    notice, file): nothing is queued or running, so counts taken afterwards are final."""
    from sqlalchemy import func, select

    from bots.store._tables import events_table, outbox_table

    async def idle() -> bool:
        async with stack.store.read() as conn:
            busy = (await conn.execute(select(func.count()).select_from(events_table).where(
                events_table.c.status.in_(("received", "processing", "running"))))).scalar_one()
            owed = (await conn.execute(select(func.count()).select_from(outbox_table).where(
                outbox_table.c.status.in_(("pending", "ready", "sending"))))).scalar_one()
        return busy == 0 and owed == 0

    async with asyncio.timeout(within):
        while not await idle():
            await asyncio.sleep(0.02)


class SimulatedCrash(BaseException):
    """Not an Exception: no handler in the layer or the SDKs may swallow it (like SIGKILL)."""


def crash_at(point: str) -> tuple[asyncio.Event, object]:
    """(set when ``point`` is reached, the connector's ``fault`` seam that crashes there)."""
    hit = asyncio.Event()

    def fault(p: str) -> None:
        if p == point and not hit.is_set():
            hit.set()
            raise SimulatedCrash(p)
        if hit.is_set():  # the process is dead: nothing after the crash may happen
            raise SimulatedCrash(p)

    return hit, fault


class DaemonHost:
    """Mixin of the test stacks (dataclasses with ``home``, ``provider``, ``bindings`` and
    ``daemon``): a real ``Daemon`` on ``home``, restartable on the same store."""

    home: Path
    provider: ScriptedProvider
    bindings: list[BindingSettings]
    daemon: Daemon | None

    def new_daemon(self, *, store_url: str | None = None,
                   lanes: dict[str, Any] | None = None) -> Daemon:
        settings, secrets = load_settings(
            env={"GEODE_HOME": str(self.home)}, health_port=0, bindings=self.bindings,
            store={"url": store_url or f"sqlite:///{self.home / 'geode.db'}"},
            lanes=lanes or {"global_cap": 64, "channel_cap": 64},
        )
        self.daemon = Daemon(settings=settings, secrets=secrets,
                             provider_factory=lambda: self.provider,
                             workspace=self.home / "ws", drain_timeout_s=0.5)
        return self.daemon

    async def stop(self) -> None:
        if self.daemon is not None:
            await self.daemon.shutdown()
            self.daemon = None

    async def crash(self) -> None:
        """Like kill -9 as far as the store is concerned: tasks die, nothing is finished.

        The connector's tasks are cancelled without any graceful step (no drain: turns are
        cancelled mid-flight), then the daemon releases the home.
        """
        if self.daemon is None:
            return
        self.daemon.drain_timeout_s = 0.0
        await self.stop()

    @property
    def store(self) -> Any:
        assert self.daemon is not None and self.daemon.runtime is not None
        return self.daemon.runtime.store
