"""Slack exactly-once across crashes: kill the pipeline at each point between receipt and the
recorded final reply (in process: the fault seam raises a BaseException nothing may catch),
restart on the same store, and count what FakeSlack shows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from conftest import user_messages
from slack_helpers import (
    ALICE,
    CH,
    SlackStack,
    bot_messages,
    mention,
    settle,
    sid,
    slack_binding,
    visible,
    written,
)

from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.testing.fake_slack import FakeSlack


class SimulatedCrash(BaseException):
    """Not an Exception: no handler in the layer or the SDKs may swallow it (like SIGKILL)."""


def crash_at(point: str) -> tuple[asyncio.Event, object]:
    hit = asyncio.Event()

    def fault(p: str) -> None:
        if p == point and not hit.is_set():
            hit.set()
            raise SimulatedCrash(p)
        if hit.is_set():  # the process is dead: nothing after the crash may happen
            raise SimulatedCrash(p)

    return hit, fault


def answering(request: ModelRequest) -> object:
    """Calls list_dir once per turn, then answers naming the user's message."""
    last = request.messages[-1]
    if last.role == "user" and "(id " in (last.text or ""):
        return ToolCall("list_dir", {"path": "."})
    for m in reversed(request.messages):
        if m.role == "user" and m.text and "(id " in m.text:
            return f"answer to: {m.text.rsplit('): ', 1)[-1]}"
    return "answer to: ?"


POINTS = [
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


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as srv:
        srv.add_channel(CH)
        yield srv


@pytest.mark.parametrize("point", POINTS)
async def test_crash_at_each_point_gives_exactly_one_final_reply(home: Path, fake, point):
    provider = ScriptedProvider([answering], repeat_last=True)
    hit, fault = crash_at(point)
    stack = SlackStack(home=home, fake=fake, provider=provider, bindings=[slack_binding()],
                       fault=fault)  # type: ignore[arg-type]
    try:
        await stack.start()
        root = await fake.user_posts(CH, mention("crash me"), user=ALICE)
        await asyncio.wait_for(hit.wait(), 10)
        await stack.crash()
        calls_before = len(provider.calls)

        stack.fault = None
        await stack.start()
        await fake.user_posts(CH, mention("after"), user=ALICE)
        await fake.wait_until(lambda: visible(fake, "answer to: crash me")
                              and visible(fake, "answer to: after"), within=15)

        async def settled() -> bool:
            row = await stack.layer.outbox.get(sid(root), "ev1")
            return row is not None and row.status == "sent"

        await settle(settled)
        # exactly one visible final reply for the message, in its thread, never posted twice
        # (re-editing the same message with the same text after a crash is idempotent)
        assert len({p.ts for p in written(fake, "answer to: crash me")}) == 1
        assert not [p for p in fake.posts if p.method == "chat.postMessage"
                    and p.text == "answer to: crash me"][1:]
        thread = [m["text"] for m in bot_messages(fake, CH, thread=root)]
        assert thread.count("answer to: crash me") == 1
        # the message entered the session once (not processed twice)
        restored = await stack.store.checkpointer(sid(root)).load()
        assert sum("crash me" in t for t in user_messages(restored.messages)) == 1
        if point in ("turn_finished", "final_recorded", "final_edited_before_record",
                     "delivered"):
            # the answer existed before the crash: recovered without asking the model again
            assert len(provider.calls) - calls_before == 2  # the "after" turn only
        if point == "recorded":
            # recorded but never acked: Slack redelivered it, and the store refused the copy
            assert any(attempt > 0 for _e, attempt in fake.deliveries)
        await fake.wait_until(lambda: not fake.unacked)
    finally:
        await stack.stop()
