"""Issue #20: a message that cannot start because the lanes are full waits queued (its
pending reply in the store), shows its place, is answered in arrival order and survives a
restart; /stop ends a queued one; a long turn moves to the long lane; the progress message
and /status carry the heartbeat. Both store dialects."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider, ToolCall
from tests.bots.conftest import CHAT, echo, finals, last_user_text

QUEUED = "⏳ Queued — {} ahead"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_store_url"))
    return None


class Gated(ScriptedProvider):
    """A slow model: every call waits until ``go`` is set; ``entered`` counts the calls."""

    def __init__(self, script: list[Any] | None = None) -> None:
        super().__init__(script or [echo], repeat_last=True)
        self.go = asyncio.Event()
        self.entered = 0

    async def complete(self, request: ModelRequest) -> Any:
        self.entered += 1
        await self.go.wait()
        return await super().complete(request)


def asked(provider: ScriptedProvider) -> list[str]:
    """The user message each model call answered (its text after 'id N): ')."""
    return [last_user_text(r).rsplit("): ", 1)[-1] for r in provider.calls]


def visible(fake: Any) -> list[str]:
    return [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)]


async def _five_queued(make_stack: Any, fake: Any, store_url: str | None) -> tuple[Any, Gated]:
    provider = Gated()
    kw: dict[str, Any] = {"store_url": store_url} if store_url else {}
    # wait_timeout_s is tiny: before #20 a waiting message was told "try again" after it
    # queue_allowance: on PostgreSQL a replica claims new threads only up to its lanes plus
    # this (#38): one lane + 4 keeps all five threads here, each showing its place
    stack = make_stack(provider=provider, lanes={"global_cap": 8, "channel_cap": 1,
                                                 "wait_timeout_s": 0.2},
                       options={"queue_allowance": 4}, **kw)
    await stack.start()
    fake.user_says(CHAT, "@geode_bot job 1", from_user=42)
    await fake.wait_until(lambda: provider.entered == 1, within=15)
    for n in range(2, 6):  # four more threads at once, while job 1 holds the channel lane
        fake.user_says(CHAT, f"@geode_bot job {n}", from_user=42)
    want = {QUEUED.format(k) for k in range(4)}
    await fake.wait_until(lambda: want <= set(visible(fake)), within=15)
    return stack, provider


async def _all_answered_once_in_order(fake: Any, provider: Gated) -> None:
    await fake.wait_until(lambda: all(finals(fake, f"answer to: job {n}")
                                      for n in range(1, 6)), within=30)
    await asyncio.sleep(0.3)  # nothing more may come
    for n in range(1, 6):
        assert len(finals(fake, f"answer to: job {n}")) == 1, n
    answered = [s.plain_text for s in fake.sent if s.plain_text.startswith("answer to: job")]
    assert answered == [f"answer to: job {n}" for n in range(1, 6)]
    assert not [s for s in fake.sent if "try again" in s.plain_text]


async def test_five_threads_with_one_channel_slot_are_all_answered_in_order(
    store_url, make_stack, fake
):
    stack, provider = await _five_queued(make_stack, fake, store_url)
    await asyncio.sleep(0.4)  # past the old wait bound: they stay queued, nobody is refused
    assert provider.entered == 1
    # each waiting thread saw its place: the last one 3, 2, 1 and 0 ahead as they moved
    provider.go.set()
    await _all_answered_once_in_order(fake, provider)
    assert asked(provider) == [f"job {n}" for n in range(1, 6)]
    shown: dict[int, list[str]] = {}
    for sent in fake.sent:
        if sent.plain_text.startswith("⏳ Queued"):
            shown.setdefault(sent.message_id, []).append(sent.plain_text)
    assert len(shown) == 4  # the four waiting threads' progress messages
    # each moved up to the front; the last one showed 3, 2, 1 and 0 ahead in turn
    assert all(seq[-1] == QUEUED.format(0) for seq in shown.values()), shown
    assert [QUEUED.format(k) for k in (3, 2, 1, 0)] in [seq[-4:] for seq in shown.values()]
    assert stack.daemon.lanes.stats.waiting == 0


async def test_queued_messages_survive_a_restart_and_are_answered_once(
    store_url, make_stack, fake
):
    stack, provider = await _five_queued(make_stack, fake, store_url)
    await stack.crash()  # job 1 mid-call, jobs 2-5 queued: only the store keeps them
    provider.go.set()
    await stack.start()
    await _all_answered_once_in_order(fake, provider)
    # after the restart job 1 continued first, then the queue in arrival order
    assert asked(provider)[-5:] == [f"job {n}" for n in range(1, 6)]


async def test_queued_messages_at_a_drain_wait_for_the_next_start_and_are_not_failed(
    store_url, make_stack, fake
):
    """SIGTERM's drain with turns queued: the running turn finishes and is answered; each
    queued one, woken as a lane frees, is refused by the draining daemon (ShuttingDown) and
    must stay queued in the store, not be ended with "Something went wrong": the next start
    answers it (the restart test above lost its answers that way whenever the refusal's
    write beat the store's close)."""
    stack, provider = await _five_queued(make_stack, fake, store_url)
    daemon = stack.daemon
    assert daemon is not None
    daemon.drain_timeout_s = 20.0  # the drain ends when the queued turns are refused
    stopping = asyncio.create_task(stack.stop())
    await fake.wait_until(lambda: daemon.draining, within=5)
    provider.go.set()  # job 1 ends inside the drain; its lane wakes the queued turns
    await stopping
    assert finals(fake, "answer to: job 1")
    assert not [s for s in fake.sent if "Something went wrong" in s.plain_text]
    assert asked(provider) == ["job 1"]
    await stack.start()
    await _all_answered_once_in_order(fake, provider)
    assert not [s for s in fake.sent if "Something went wrong" in s.plain_text]
    assert asked(provider) == [f"job {n}" for n in range(1, 6)]


async def test_stop_removes_a_queued_message_and_says_so(store_url, make_stack, fake):
    provider = Gated()
    kw: dict[str, Any] = {"store_url": store_url} if store_url else {}
    stack = make_stack(provider=provider, lanes={"global_cap": 8, "channel_cap": 1}, **kw)
    await stack.start()
    fake.user_says(CHAT, "@geode_bot job 1", from_user=42)
    await fake.wait_until(lambda: provider.entered == 1, within=15)
    fake.user_says(CHAT, "@geode_bot job 2", from_user=42)
    await fake.wait_until(lambda: QUEUED.format(0) in visible(fake), within=15)
    queued_msg = next(m for m in fake.messages_in(CHAT, from_bot=True)
                      if m.plain_text == QUEUED.format(0))
    fake.user_says(CHAT, "/status", from_user=42, reply_to=queued_msg.message_id)
    await fake.wait_until(lambda: any("queued: waiting for a lane, 0 ahead" in s.plain_text
                                      for s in fake.sent), within=15)
    fake.user_says(CHAT, "/stop", from_user=42, reply_to=queued_msg.message_id)
    await fake.wait_until(lambda: finals(fake, "⏹ Stopped: your queued message was not run."),
                          within=15)
    await fake.wait_until(lambda: any("Removed the queued message" in s.plain_text
                                      for s in fake.sent), within=15)
    provider.go.set()
    await fake.wait_until(lambda: finals(fake, "answer to: job 1"), within=15)
    await asyncio.sleep(0.3)
    assert asked(provider) == ["job 1"]  # the model never saw job 2


async def test_a_long_turn_moves_to_the_long_lane_and_quick_ones_keep_being_answered(
    store_url, make_stack, fake
):
    release = asyncio.Event()

    class Long(ScriptedProvider):
        async def complete(self, request: ModelRequest) -> Any:
            if "long job" in last_user_text(request) and not release.is_set():
                self.calls.append(request)
                await release.wait()
                return self._to_response("long done", request.model)
            return await super().complete(request)

    provider = Long([echo], repeat_last=True)
    kw: dict[str, Any] = {"store_url": store_url} if store_url else {}
    stack = make_stack(provider=provider, lanes={
        "global_cap": 1, "channel_cap": 1, "cli_cap": 1, "long_after_s": 0.2, "long_cap": 1}, **kw)
    await stack.start()
    fake.user_says(CHAT, "@geode_bot long job", from_user=42)
    lanes = stack.daemon.lanes
    await fake.wait_until(lambda: lanes.stats.long_running == 1, within=15)
    for n in (1, 2):  # the only channel (and global) slot is free again
        fake.user_says(CHAT, f"@geode_bot quick {n}", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: quick 1")
                          and finals(fake, "answer to: quick 2"), within=15)
    assert not finals(fake, "long done")
    release.set()
    await fake.wait_until(lambda: finals(fake, "long done"), within=15)


async def test_progress_heartbeat_and_status_show_elapsed_rounds_tool_and_tokens(
    make_stack, fake
):
    go = asyncio.Event()

    def tool_then_wait(request: ModelRequest) -> object:
        return ToolCall("list_dir", {"path": "."})

    class SlowTool(ScriptedProvider):
        async def complete(self, request: ModelRequest) -> Any:
            if len(self.calls) >= 1:
                self.calls.append(request)
                await go.wait()
                return self._to_response("done", request.model)
            return await super().complete(request)

    provider = SlowTool([tool_then_wait], repeat_last=True)
    stack = make_stack(provider=provider, options={"heartbeat_interval_s": 0.05})
    await stack.start()
    fake.user_says(CHAT, "@geode_bot inspect", from_user=42)
    # round 1 asked for list_dir (tokens spent); the heartbeat keeps the message current
    await fake.wait_until(lambda: any(t.startswith("⏳ Working… ") and "round 1" in t
                                      and "tokens" in t for t in visible(fake)), within=15)
    line = next(t for t in visible(fake) if "round 1" in t).splitlines()[0]
    assert line.split(" · ")[0].removeprefix("⏳ Working… ").endswith("s")  # elapsed
    bot_msg = fake.messages_in(CHAT, from_bot=True)[-1].message_id
    fake.user_says(CHAT, "/status", from_user=42, reply_to=bot_msg)
    await fake.wait_until(lambda: any("progress: " in s.plain_text and "round 1" in s.plain_text
                                      for s in fake.sent), within=15)
    go.set()
    await fake.wait_until(lambda: finals(fake, "done"), within=15)


DROPPED = "⏹ An operator removed your queued message; it was not run."


def _queue_cli(stack: Any, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    """``geode queue ARGS`` on the stack's store (in a thread: the command runs its own
    event loop), as a separate operator process would."""
    import sys

    from typer.testing import CliRunner

    from geode.cli.app import _register, app
    from geode.logging import configure_logging

    _register()
    monkeypatch.setenv("GEODE_HOME", str(stack.home))
    monkeypatch.setenv("GEODE_STORE__URL", stack.store_url)
    try:
        return CliRunner().invoke(app, ["queue", *args])
    finally:
        configure_logging(stream=sys.stderr)


async def _one_queued(make_stack: Any, fake: Any, store_url: str | None) -> tuple[Any, Gated]:
    provider = Gated()
    kw: dict[str, Any] = {"store_url": store_url} if store_url else {}
    stack = make_stack(provider=provider, lanes={"global_cap": 8, "channel_cap": 1}, **kw)
    await stack.start()
    fake.user_says(CHAT, "@geode_bot job 1", from_user=42)
    await fake.wait_until(lambda: provider.entered == 1, within=15)
    fake.user_says(CHAT, "@geode_bot job 2", from_user=42)
    await fake.wait_until(lambda: QUEUED.format(0) in visible(fake), within=15)
    return stack, provider


async def _listed(stack: Any, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    import json

    out = await asyncio.to_thread(_queue_cli, stack, monkeypatch, "list", "--json")
    assert out.exit_code == 0, out.output
    return list(json.loads(out.output))


async def test_queue_drop_while_serving_never_runs_it_and_tells_the_thread_once(
    store_url, make_stack, fake, monkeypatch
):
    stack, provider = await _one_queued(make_stack, fake, store_url)
    queued = await _listed(stack, monkeypatch)
    assert [(q["platform"], q["channel"], q["position"]) for q in queued] == [
        ("telegram", str(CHAT), 1)]
    text = await asyncio.to_thread(_queue_cli, stack, monkeypatch, "list")
    assert str(queued[0]["id"]) in text.output and str(CHAT) in text.output
    dropped = await asyncio.to_thread(_queue_cli, stack, monkeypatch, "drop",
                                      str(queued[0]["id"]))
    assert dropped.exit_code == 0, dropped.output
    assert await _listed(stack, monkeypatch) == []
    again = await asyncio.to_thread(_queue_cli, stack, monkeypatch, "drop", str(queued[0]["id"]))
    assert again.exit_code == 1
    provider.go.set()  # job 1 ends: job 2 would get its lane now, and must not run
    await fake.wait_until(lambda: finals(fake, "answer to: job 1") and finals(fake, DROPPED),
                          within=15)
    # the next message in that thread is answered
    thread_msg = next(m for m in fake.messages_in(CHAT, from_bot=True)
                      if m.plain_text == DROPPED)
    fake.user_says(CHAT, "job 3", from_user=42, reply_to=thread_msg.message_id)
    await fake.wait_until(lambda: finals(fake, "answer to: job 3"), within=15)
    await asyncio.sleep(0.3)
    assert asked(provider) == ["job 1", "job 3"]  # the model never saw job 2
    assert len(finals(fake, DROPPED)) == 1


async def test_queue_drop_while_stopped_is_told_once_at_the_next_start(
    store_url, make_stack, fake, monkeypatch
):
    stack, provider = await _one_queued(make_stack, fake, store_url)
    await stack.crash()  # job 1 mid-call, job 2 queued: only the store keeps them
    queued = await _listed(stack, monkeypatch)
    job2 = [q for q in queued if q["position"] == len(queued)]
    assert job2, queued
    dropped = await asyncio.to_thread(_queue_cli, stack, monkeypatch, "drop", str(job2[0]["id"]))
    assert dropped.exit_code == 0, dropped.output
    provider.go.set()
    await stack.start()
    await fake.wait_until(lambda: finals(fake, "answer to: job 1") and finals(fake, DROPPED),
                          within=30)
    await asyncio.sleep(0.3)
    assert "job 2" not in asked(provider)
    assert len(finals(fake, DROPPED)) == 1
