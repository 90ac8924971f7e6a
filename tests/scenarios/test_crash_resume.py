"""SIGKILL `geode run` at every phase boundary of a turn, restart the session, and check
that the conversation is intact and no effect ran twice (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

from geode.testing.fake_anthropic import FakeAnthropicServer
from geode.tools.builtin import sandbox_available

KEY = "sk-ant-api03-crashtest0123456789abcdef0123"
POINTS = [
    "turn_start",
    "model_response",
    "batch_proposed",
    "tool_running",
    "batch_done",
    "turn_finished",
]
TOOL_RAN = {"tool_running", "batch_done", "turn_finished"}


def _need_sandbox() -> None:
    if not sandbox_available():
        if os.environ.get("CI") == "true":
            pytest.fail("bubblewrap sandbox unavailable under CI=true")
        pytest.skip("bubblewrap sandbox unavailable")


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'home' / 'geode.db'}"
    return str(request.getfixturevalue("pg_url"))


LAUNCHER = Path(__file__).with_name("_paused_geode.py")


async def _spawn(
    args: list[str], env: dict[str, str], cwd: Path, *, pause: tuple[str, Path] | None = None
) -> asyncio.subprocess.Process:
    # the crash pause is installed by a test-only launcher, never by config or environment
    head = ["-m", "geode"] if pause is None else [str(LAUNCHER), pause[0], str(pause[1])]
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *head,
        *args,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _wait_for(path: Path, proc: asyncio.subprocess.Process, timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not path.exists():
        if proc.returncode is not None or loop.time() > end:
            _, err = await proc.communicate()
            raise AssertionError(f"never reached {path.name}: {err.decode()[-2000:]}")
        await asyncio.sleep(0.05)


async def _session_ids(url: str) -> list[str]:
    from geode.store import open_store

    store = await open_store(url)
    try:
        return [s.id for s in await store.sessions.list(limit=500)]
    finally:
        await store.aclose()


@pytest.mark.parametrize("point", POINTS)
async def test_kill_at_each_boundary_then_resume(
    point: str, store_url: str, tmp_path: Path
) -> None:
    _need_sandbox()
    ws = tmp_path / "ws"
    ws.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    marker = tmp_path / "paused"
    prompt = f"do the thing {uuid.uuid4().hex[:8]}"
    before = set(await _session_ids(store_url))
    command = "echo ran >> count.txt" + ("; sleep 60" if point == "tool_running" else "")
    async with FakeAnthropicServer() as srv:
        srv.enqueue_tool_calls([("run_bash", {"command": command})])
        srv.enqueue_text("first turn done")
        env = {k: v for k, v in os.environ.items() if not k.startswith("GEODE_")}
        env.update(
            PYTHONPATH=str(Path(__file__).resolve().parents[2]),  # this checkout's code
            GEODE_HOME=str(home),
            GEODE_STORE__URL=store_url,
            ANTHROPIC_API_KEY=KEY,
            ANTHROPIC_BASE_URL=srv.base_url,
        )
        pause = None if point == "tool_running" else (point, marker)
        proc = await _spawn(
            ["run", "--json", "--allow-tool", "run_bash", prompt], env, ws, pause=pause
        )
        await _wait_for(ws / "count.txt" if point == "tool_running" else marker, proc)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()

        new = [s for s in await _session_ids(store_url) if s not in before]
        assert len(new) == 1
        sid = new[0]
        srv.clear_script()  # what the killed run never asked for is not replayed
        srv.enqueue_text("resumed ok")
        resumed = await _spawn(
            ["run", "--json", "--allow-tool", "run_bash", "--session", sid, "continue"], env, ws
        )
        out, err = await asyncio.wait_for(resumed.communicate(), 60)
        assert resumed.returncode == 0, err.decode()[-2000:]
        result = json.loads(out)
        assert result["session_id"] == sid
        assert result["text"] == "resumed ok"

        last = srv.generate_requests[-1].body["messages"]
        texts = json.dumps(last)
        assert prompt in texts  # the conversation survived the kill
        assert last[-1]["content"][-1]["text"] == "continue" or "continue" in json.dumps(last[-1])
        ran = (ws / "count.txt").read_text().count("ran") if (ws / "count.txt").exists() else 0
        assert ran == (1 if point in TOOL_RAN else 0), texts  # never run a second time
        if point == "tool_running":
            assert "outcome unknown" in texts
        if point == "batch_proposed":
            assert "not run" in texts
        # no tool_use is left without its tool_result
        for i, m in enumerate(last):
            uses = (
                [
                    b["id"]
                    for b in m["content"]
                    if isinstance(b, dict) and b.get("type") == "tool_use"
                ]
                if isinstance(m["content"], list)
                else []
            )
            if uses:
                nxt = last[i + 1]["content"]
                got = {b["tool_use_id"] for b in nxt if b.get("type") == "tool_result"}
                assert set(uses) <= got
