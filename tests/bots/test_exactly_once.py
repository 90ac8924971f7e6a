"""Exactly-once across crashes: kill the pipeline at each point between receipt and the
recorded final reply, restart on the same store, and count what the fake Telegram saw."""

from __future__ import annotations

import asyncio

import pytest
from conftest import CHAT, finals, user_messages

from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider, ToolCall


class SimulatedCrash(BaseException):
    """Not an Exception: no handler in the layer may swallow it (like SIGKILL)."""


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


@pytest.mark.parametrize("point", POINTS)
async def test_crash_at_each_point_gives_exactly_one_final_reply(make_stack, fake, point):
    provider = ScriptedProvider([answering], repeat_last=True)
    hit, fault = crash_at(point)
    stack = make_stack(provider=provider, fault=fault)
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot crash me", from_user=42))
    await asyncio.wait_for(hit.wait(), 10)
    await stack.crash()
    calls_before = len(provider.calls)

    stack.fault = None
    await stack.start()
    fake.user_says(CHAT, "@geode_bot after", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: crash me")
                          and finals(fake, "answer to: after"), within=15)
    sid = f"telegram:123456:{CHAT}:{mid}"
    layer = stack.connector.layer

    async def settled() -> bool:
        row = await layer.outbox.get(sid, "ev1")
        return row is not None and row.status == "sent"

    for _ in range(200):
        if await settled():
            break
        await asyncio.sleep(0.02)
    assert await settled()
    # exactly one visible final reply for the message, and no second copy was ever sent
    assert len(finals(fake, "answer to: crash me")) == 1
    visible = [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)]
    assert visible.count("answer to: crash me") == 1
    # the message entered the session once (not processed twice)
    restored = await stack.store.checkpointer(sid).load()
    assert sum("crash me" in t for t in user_messages(restored.messages)) == 1
    if point in ("turn_finished", "final_recorded", "final_edited_before_record", "delivered"):
        # the answer existed before the crash: recovered without asking the model again
        assert len(provider.calls) - calls_before == 2  # only the "after" turn (tool + answer)
