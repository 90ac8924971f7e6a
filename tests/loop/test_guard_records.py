"""The stuck-loop guard through the real session: different calls failing with the same
message for ten rounds are progress and the turn completes; the identical call failing the
same way is told once, then stopped; both show on the session timeline."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.loop import TerminationReason
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings
from geode.store import Store, open_store
from geode.tools.base import ToolContext, tool
from geode.tools.errors import ToolFailure

calls: list[str] = []


@tool
async def make_dir(ctx: ToolContext, path: str) -> str:
    """Create a directory (fails for its first ten calls, as if the parent were missing)."""
    calls.append(path)
    if len(calls) <= 10:
        raise ToolFailure("Parent directory does not exist")
    return f"created {path}"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await open_store(f"sqlite:///{tmp_path / 'geode.db'}")
    try:
        yield s
    finally:
        await s.aclose()


async def _run(tmp_path: Path, store: Store, script: list[Any]) -> tuple[Any, list[Any]]:
    calls.clear()
    ws = tmp_path / "ws"
    ws.mkdir()
    settings, secrets = load_settings(cwd=ws, env={"GEODE_HOME": str(tmp_path / "home")})
    model = ScriptedProvider(script)
    async with Runtime(settings=settings, secrets=secrets, store=store) as runtime:
        session = await runtime.open_session(SessionContext(
            mode="HEADLESS", workspace=ws, provider=model, extra_tools=[make_dir]))
        result = await session.run("build the tree")
        await store.flush_later()
        rows = await store.timeline.list(session.session_id)
    return result, rows


async def test_different_calls_failing_alike_for_ten_rounds_complete(
    tmp_path: Path, store: Store
) -> None:
    script: list[Any] = [ToolCall("make_dir", {"path": f"a/{i}"}) for i in range(11)]
    result, rows = await _run(tmp_path, store, [*script, "tree built"])
    assert result.termination == TerminationReason.NATURAL
    assert result.text == "tree built"
    assert len(calls) == 11
    assert [r for r in rows if r.kind == "loop.guard"] == []


async def test_the_identical_failing_call_is_told_once_then_stopped(
    tmp_path: Path, store: Store
) -> None:
    script: list[Any] = [ToolCall("make_dir", {"path": "a/b"})] * 8
    result, rows = await _run(tmp_path, store, script)
    assert result.termination == TerminationReason.REPEATED_ERRORS
    assert len(calls) == 5  # [loop] repeated_error_limit = 5 by default
    guards = [(r.payload["guard"], r.payload["action"], r.payload["count"], r.payload["limit"])
              for r in rows if r.kind == "loop.guard"]
    assert guards == [("repeated_call", "noted", 4, 5), ("repeated_call", "stopped", 5, 5)]
    finished = [r.payload for r in rows if r.kind == "turn.finished"]
    assert finished[-1]["termination"] == "repeated_errors"
