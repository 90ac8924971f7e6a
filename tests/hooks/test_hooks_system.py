"""Observation hooks: they see events, cannot change anything, and cannot break a run."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from geode.hooks import HookSystem
from geode.loop.protocols import Observer


async def test_observers_receive_matching_events() -> None:
    hs = HookSystem()
    all_events: list[str] = []
    tool_events: list[tuple[str, dict[str, Any]]] = []
    hs.subscribe(lambda e, d: all_events.append(e))
    hs.subscribe(lambda e, d: tool_events.append((e, dict(d))), events=r"tool\..*")
    hs.emit("turn.started", session_id="s")
    hs.emit("tool.finished", tool="read_file", status="done")
    assert all_events == ["turn.started", "tool.finished"]
    assert tool_events == [("tool.finished", {"tool": "read_file", "status": "done"})]
    assert isinstance(hs, Observer)


async def test_observer_failures_never_propagate() -> None:
    hs = HookSystem()
    seen: list[str] = []

    def broken(event: str, data: Mapping[str, Any]) -> None:
        raise RuntimeError("metrics backend down")

    async def broken_async(event: str, data: Mapping[str, Any]) -> None:
        raise RuntimeError("async too")

    hs.subscribe(broken)
    hs.subscribe(broken_async)
    hs.subscribe(lambda e, d: seen.append(e))
    hs.emit("tool.started")
    await hs.drain()
    assert seen == ["tool.started"]


async def test_observers_cannot_change_the_data() -> None:
    hs = HookSystem()
    payload = {"args": {"path": "a"}}
    errors: list[type[BaseException]] = []

    def meddle(event: str, data: Mapping[str, Any]) -> None:
        try:
            data["args"] = {}  # type: ignore[index]
        except TypeError as exc:
            errors.append(type(exc))
        data["args"]["path"] = "/etc/passwd"  # a deep copy: harmless

    hs.subscribe(meddle)
    hs.emit("tool.started", **payload)
    assert errors == [TypeError]
    assert payload == {"args": {"path": "a"}}


async def test_an_observer_cannot_change_what_the_next_one_sees() -> None:
    # Scalar-only data gets a shallow copy (the fast path), nested data a deep one: either
    # way the second observer sees what was emitted, whatever the first one tried.
    hs = HookSystem()
    seen: list[dict[str, Any]] = []

    def meddle(event: str, data: Mapping[str, Any]) -> None:
        try:
            data["status"] = "forged"  # type: ignore[index]
        except TypeError:
            pass
        if "args" in data:
            data["args"]["path"] = "/etc/passwd"

    hs.subscribe(meddle)
    hs.subscribe(lambda e, d: seen.append(dict(d)))
    hs.emit("tool.finished", tool="read_file", status="done", ms=1.5, ok=True, detail=None)
    hs.emit("tool.started", tool="read_file", args={"path": "a"})
    assert seen == [
        {"tool": "read_file", "status": "done", "ms": 1.5, "ok": True, "detail": None},
        {"tool": "read_file", "args": {"path": "a"}},
    ]


async def test_async_observers_run_and_drain_waits() -> None:
    hs = HookSystem()
    done: list[str] = []

    async def slow(event: str, data: Mapping[str, Any]) -> None:
        await asyncio.sleep(0)
        done.append(event)

    hs.subscribe(slow)
    hs.emit("a")
    hs.emit("b")
    assert done == []  # emit never waits for an observer
    await hs.drain()
    assert done == ["a", "b"]


def test_async_observer_without_a_loop_is_dropped_cleanly() -> None:
    hs = HookSystem()

    async def obs(event: str, data: Mapping[str, Any]) -> None:
        raise AssertionError("must not run")

    hs.subscribe(obs)
    hs.emit("x")  # no running loop: logged, no "never awaited" warning (warnings are errors)
    hs.unsubscribe(obs)
    hs.emit("y")


def test_publish_gives_typed_observers_the_dataclass_and_named_ones_kind_and_data() -> None:
    from bots.observed import ReplySent

    hs = HookSystem()
    typed: list[object] = []
    named: list[tuple[str, dict[str, Any]]] = []

    def broken(event: object) -> None:
        raise RuntimeError("dashboard down")

    hs.subscribe_events(broken)
    hs.subscribe_events(typed.append)
    hs.subscribe(lambda e, d: named.append((e, dict(d))), events=r"channel\..*")
    event = ReplySent(platform="slack", latency_s=1.5)
    hs.publish(event)
    assert typed == [event]
    assert named == [("channel.reply_sent", {"platform": "slack", "latency_s": 1.5})]


async def test_async_typed_observers_run_as_tasks_drain_waits_for() -> None:
    from bots.observed import ReplySent
    from geode.hooks.events import ObservedEvent
    from geode.loop.events import ObservedLoopEvent, TurnStarted

    hs = HookSystem()
    seen: list[object] = []

    async def on_event(event: ObservedEvent) -> None:
        await asyncio.sleep(0)
        seen.append(event)

    async def on_loop(session_id: str, event: ObservedLoopEvent) -> None:
        await asyncio.sleep(0)
        seen.append((session_id, event))

    async def broken(event: ObservedEvent) -> None:
        raise RuntimeError("ledger down")

    hs.subscribe_events(broken)
    hs.subscribe_events(on_event)
    hs.subscribe_loop(on_loop)
    sent, started = ReplySent(platform="slack"), TurnStarted(turn_id="t-1")
    hs.publish(sent)
    hs.loop_event("s-1", started)
    await hs.drain()
    assert seen == [sent, ("s-1", started)]
