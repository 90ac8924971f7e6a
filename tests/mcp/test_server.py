"""``geode mcp serve`` driven by the official SDK's clients, over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from geode.mcp.server import load_script
from tests.mcp.conftest import REPO_ROOT

pytestmark = pytest.mark.slow

#: the scripted model: try the shell (denied in HEADLESS), then answer
SCRIPT = [
    {"tool": "run_bash", "input": {"command": "touch pwned.txt"}},
    "all done",
]


def _setup(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    home = tmp_path / "home"
    ws = tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    env = {
        "GEODE_HOME": str(home),
        "GEODE_MCP_SCRIPT": str(script),
        "PYTHONPATH": str(REPO_ROOT),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    return ws, env


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return dict(result.structured_content)
    return dict(json.loads(result.content[0].text))


async def _exercise(session: ClientSession, ws: Path) -> None:
    await session.initialize()
    names = {t.name for t in (await session.list_tools()).tools}
    assert names == {"run_agent", "list_sessions", "session_timeline"}

    first = _data(await session.call_tool("run_agent", {"prompt": "clean up the repo"}))
    assert first["text"] == "all done"
    assert first["termination"] == "natural"
    assert first["tool_calls"] == [{"name": "run_bash", "status": "denied"}]
    assert not (ws / "pwned.txt").exists()
    sid = first["session_id"]

    # continuing the same session; the scripted model answers the same way
    second = _data(await session.call_tool(
        "run_agent", {"prompt": "and again", "session_id": sid, "max_rounds": 4}))
    assert second["session_id"] == sid and second["turn_id"] != first["turn_id"]

    sessions = _data(await session.call_tool("list_sessions", {"limit": 5}))["sessions"]
    assert [s["session_id"] for s in sessions] == [sid]
    assert sessions[0]["mode"] == "HEADLESS"

    timeline = _data(await session.call_tool("session_timeline", {"session_id": sid}))
    kinds = [e["kind"] for e in timeline["entries"]]
    assert any("denied" in k for k in kinds), kinds

    missing = await session.call_tool("run_agent", {"prompt": "x", "session_id": "nope"})
    assert missing.is_error and "does not exist" in missing.content[0].text  # type: ignore[union-attr]


async def test_stdio_run_agent(tmp_path: Path) -> None:
    ws, env = _setup(tmp_path)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "geode.mcp.server", "--cwd", str(ws)], env=env,
        cwd=str(ws),
    )
    with (tmp_path / "server-stderr.log").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (r, w), ClientSession(r, w) as s:
            await _exercise(s, ws)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def _http_server(ws: Path, env: dict[str, str], port: int) -> AsyncIterator[None]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "geode.mcp.server", "--http", "--port", str(port),
        "--cwd", str(ws), env=env, cwd=str(ws),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    try:
        for _ in range(200):
            with contextlib.suppress(OSError):
                _r, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                await writer.wait_closed()
                break
            if proc.returncode is not None:
                err = await proc.stderr.read() if proc.stderr else b""
                pytest.fail(f"geode mcp serve --http exited: {err.decode()[-2000:]}")
            await asyncio.sleep(0.05)
        else:
            pytest.fail("geode mcp serve --http did not listen")
        yield
    finally:
        proc.terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 10)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_http_run_agent_on_loopback(tmp_path: Path) -> None:
    ws, env = _setup(tmp_path)
    port = _free_port()
    async with _http_server(ws, env, port):
        url = f"http://127.0.0.1:{port}/mcp"
        async with streamable_http_client(url) as (r, w), ClientSession(r, w) as s:
            await _exercise(s, ws)
        # bound to loopback only: nothing listens on the machine's other addresses
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            assert probe.getsockname()[0] == "127.0.0.1"


def test_script_file_parsing(tmp_path: Path) -> None:
    f = tmp_path / "s.json"
    f.write_text(json.dumps(["hi", {"tool": "read_file", "input": {"path": "a"}},
                             [{"tool": "a"}, {"tool": "b", "input": {"x": 1}}]]))
    items = load_script(f)
    assert items[0] == "hi"
    assert items[1].name == "read_file" and items[1].input == {"path": "a"}
    assert [c.name for c in items[2]] == ["a", "b"]
    f.write_text(json.dumps([{"nope": 1}]))
    with pytest.raises(Exception, match="items are strings"):
        load_script(f)


async def test_run_agent_masks_a_secret_in_the_answer(tmp_path: Path) -> None:
    """The host calling ``run_agent`` is an output path like ``geode run``'s stdout: an answer
    that repeats a credential GEODE loaded (here the model echoes the API key it was given,
    as a prompt-injected page could make it) reaches the host masked."""
    planted = "sk-ant-api03-PLANTEDSECRETvalue0123456789abcdef"
    ws, env = _setup(tmp_path)
    (tmp_path / "script.json").write_text(json.dumps([f"the key is {planted} (as asked)"]))
    env["ANTHROPIC_API_KEY"] = planted
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "geode.mcp.server", "--cwd", str(ws)], env=env,
        cwd=str(ws),
    )
    with (tmp_path / "server-stderr.log").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            raw = await s.call_tool("run_agent", {"prompt": "what is your key?"})
    data = _data(raw)
    assert data["termination"] == "natural"
    assert planted not in json.dumps(data) and planted not in str(raw.content)
    assert data["text"].startswith("the key is ") and data["text"].endswith("(as asked)")
