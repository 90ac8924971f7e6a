"""A streamable-HTTP MCP server (official SDK, on loopback) as a tool source (issue 8).

The stdio flows of test_manager.py / test_session_flow.py, shown against a server configured as
``{"mcpServers": {"web": {"url": "http://127.0.0.1:PORT/mcp"}}}``: the server is a real
subprocess (servers/http_server.py) that logs every call it receives, so each test asserts
what reached it — and that nothing did when the call was denied or could not be sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.executor import MemoryReceiptStore, MemoryTimeline, ToolExecutor
from geode.loop.protocols import TurnInfo
from geode.mcp import MCPServerManager
from geode.mcp.config import load_config_file
from geode.messages import ToolResultBlock, ToolUseBlock
from geode.policy import Mode, session_scope
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings
from geode.tools.base import ToolDef
from geode.tools.plan import BoundToolPlan
from tests.mcp.conftest import read_calls

WEB_SERVER = Path(__file__).parent / "servers" / "http_server.py"
#: shout is believed read-only by policy; everything else on the server is `write`
POLICY: dict[str, object] = {"safety": "write", "tools": {"shout": {"safety": "read_only"}}}
_ids = itertools.count(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WebServer:
    """The HTTP fixture server as a subprocess on a fixed loopback port.

    :meth:`keep_alive` starts it again on the same port whenever it dies (standing in for
    whatever supervises a remote server), so the client has something to reconnect to.
    """

    def __init__(self, root: Path, *, env: dict[str, str] | None = None) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log = root / "web-calls.jsonl"
        self.env = {**os.environ, "WEB_LOG": str(self.log), **(env or {})}
        self.proc: asyncio.subprocess.Process | None = None
        self.pids: list[int] = []
        self._keeper: asyncio.Task[None] | None = None

    def calls(self) -> list[dict[str, Any]]:
        return read_calls(self.log)

    async def start(self) -> None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(WEB_SERVER), "--port", str(self.port), env=self.env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )
        self.proc = proc
        self.pids.append(proc.pid)
        for _ in range(400):
            with contextlib.suppress(OSError):
                _r, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                await writer.wait_closed()
                return
            if proc.returncode is not None:
                pytest.fail(f"the HTTP MCP server exited with {proc.returncode}")
            await asyncio.sleep(0.025)
        pytest.fail("the HTTP MCP server did not listen")

    def keep_alive(self) -> None:
        async def keep() -> None:
            while True:
                assert self.proc is not None
                await self.proc.wait()
                await self.start()

        self._keeper = asyncio.create_task(keep())

    async def wait_exit(self) -> None:
        assert self.proc is not None
        await self.proc.wait()

    async def stop(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
            self._keeper = None
        proc = self.proc
        if proc is not None and proc.returncode is None:
            proc.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 10)
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


@contextlib.asynccontextmanager
async def _web(root: Path, **kw: Any) -> AsyncIterator[WebServer]:
    server = WebServer(root, **kw)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def _mcp_json(tmp_path: Path, url: str, *, policy: dict[str, object] | None) -> Path:
    entry: dict[str, object] = {"url": url, "timeout": 8}
    if policy is not None:
        entry["policy"] = policy
    f = tmp_path / "mcp.json"
    f.write_text(json.dumps({"mcpServers": {"web": entry}}))
    return f


def _manager(tmp_path: Path, url: str, *, backoff: float = 0.05) -> MCPServerManager:
    """The --mcp-config path, with a short reconnect backoff so the tests stay fast."""
    servers = load_config_file(_mcp_json(tmp_path, url, policy=POLICY))
    return MCPServerManager(servers=servers, restart_backoff_s=(backoff,))


async def _run(
    tools: Sequence[ToolDef],
    calls: Sequence[tuple[str, dict[str, Any]]],
    *,
    tmp: Path,
    receipts: MemoryReceiptStore,
    mode: Mode = "HEADLESS",
    **scope_kw: Any,
) -> list[ToolResultBlock]:
    """One batch through the real ToolExecutor, as the loop runs it."""
    scope = session_scope(mode, **scope_kw)
    executor = ToolExecutor(scope=scope, workspace=tmp, receipts=receipts,
                            timeline=MemoryTimeline())
    plan = BoundToolPlan.build([t for t in tools if scope.permits(t.name)])
    blocks = [ToolUseBlock(id=f"toolu_{next(_ids)}", name=n, input=a) for n, a in calls]
    turn = TurnInfo(session_id="s1", turn_id=f"t{next(_ids)}", round=1, correlation_id="c",
                    mode=mode)
    return await executor.run_batch(blocks, turn=turn, plan=plan)


def _statuses(receipts: MemoryReceiptStore) -> list[tuple[str, str]]:
    return [(r.tool, r.status) for r in receipts.records.values()]


# -- the session flow, as `geode run --mcp-config FILE` builds it ----------------------------


async def test_session_calls_http_tool_and_denies_bad_arguments(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    async with _web(tmp_path) as web:
        f = _mcp_json(tmp_path, web.url, policy=POLICY)
        settings, secrets = load_settings(cwd=ws, env={"GEODE_HOME": str(tmp_path / "home")})
        manager = MCPServerManager.from_settings(settings, secrets, extra_files=[f],
                                                 project_dir=ws)
        model = ScriptedProvider([
            [ToolCall("web__shout", {"text": "hi", "times": 2}),
             ToolCall("web__shout", {"text": 5}),  # schema: text must be a string
             ToolCall("web__shout", {"times": 1})],  # schema: text is required
            [ToolCall("web__lookup", {"key": "k"}),  # annotated read-only: allowed
             ToolCall("web__note", {"text": "x"})],  # `write` by policy: HEADLESS denies
            "finished",
        ])
        async with Runtime(settings=settings, secrets=secrets, mcp=manager) as runtime:
            session = await runtime.open_session(
                SessionContext(mode="HEADLESS", workspace=ws, provider=model)
            )
            result = await session.run("shout hi")
        calls = web.calls()
    assert result.text == "finished"
    assert result.tool_calls == [
        {"name": "web__shout", "status": "ok"},
        {"name": "web__shout", "status": "denied"},
        {"name": "web__shout", "status": "denied"},
        {"name": "web__lookup", "status": "ok"},
        {"name": "web__note", "status": "denied"},
    ]
    offered = {t.name: t for t in model.calls[0].tools}
    assert set(offered) >= {"web__shout", "web__lookup", "web__note", "web__charge", "web__fetch"}
    shout_schema = offered["web__shout"].input_schema
    assert shout_schema["properties"]["text"]["type"] == "string"
    assert shout_schema["required"] == ["text"]
    # the server's answer is what the model saw next
    results = [b for m in model.calls[1].messages for b in m.content
               if isinstance(b, ToolResultBlock)]
    assert [r.is_error for r in results] == [False, True, True]
    assert results[0].text_content == "HI HI"
    # exactly the valid, permitted calls reached the server
    assert [(c["tool"], c["args"]) for c in calls] == [
        ("shout", {"text": "hi", "times": 2}), ("lookup", {"key": "k"})
    ]


async def test_daemon_session_without_policy_denies_http_tools(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    async with _web(tmp_path) as web:
        f = _mcp_json(tmp_path, web.url, policy=None)
        settings, secrets = load_settings(cwd=ws, env={"GEODE_HOME": str(tmp_path / "home")})
        manager = MCPServerManager.from_settings(settings, secrets, extra_files=[f])
        model = ScriptedProvider([
            [ToolCall("web__lookup", {"key": "k"}), ToolCall("web__shout", {"text": "x"})],
            "ok",
        ])
        async with Runtime(settings=settings, secrets=secrets, mcp=manager) as runtime:
            session = await runtime.open_session(
                SessionContext(mode="DAEMON", workspace=ws, provider=model)
            )
            result = await session.run("look it up")
        # the tools were offered (the server is up), yet nothing was sent to it
        assert {"web__lookup", "web__shout"} <= {t.name for t in model.calls[0].tools}
        assert web.calls() == []
    assert result.tool_calls == [{"name": "web__lookup", "status": "denied"},
                                 {"name": "web__shout", "status": "denied"}]


# -- a server that is down, or stops ---------------------------------------------------------


async def test_server_down_at_start_is_named_and_skipped(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/mcp"  # nothing listens there
    manager = _manager(tmp_path, url)
    async with manager:
        assert await manager.tools_for(None) == []
    msg = manager.failures["web"]
    assert msg.startswith("MCP server 'web': cannot reach ") and url in msg
    assert "ConnectError" in msg


async def test_server_stopped_between_calls_fails_as_not_sent(tmp_path: Path) -> None:
    receipts = MemoryReceiptStore()
    async with _web(tmp_path) as web:
        manager = _manager(tmp_path, web.url)
        async with manager:
            tools = await manager.tools_for(None)
            (ok,) = await _run(tools, [("web__shout", {"text": "a"})], tmp=tmp_path,
                               receipts=receipts)
            assert ok.text_content == "A"
            await web.stop()
            (down,) = await _run(tools, [("web__charge", {"invoice": "9"})], tmp=tmp_path,
                                 receipts=receipts, allow_tools=["web__charge"])
            (again,) = await _run(tools, [("web__charge", {"invoice": "10"})], tmp=tmp_path,
                                  receipts=receipts, allow_tools=["web__charge"])
    for res in (down, again):
        assert res.is_error
        assert "MCP server 'web' is not reachable" in res.text_content
        assert "not sent" in res.text_content and "outcome unknown" not in res.text_content
    # never sent ⇒ a plain failure, not an effect left for reconciliation
    assert _statuses(receipts) == [("web__charge", "failed"), ("web__charge", "failed")]
    assert [c["tool"] for c in web.calls()] == ["shout"]


async def test_stops_mid_call_non_idempotent_is_outcome_unknown(tmp_path: Path) -> None:
    receipts = MemoryReceiptStore()
    async with _web(tmp_path) as web:
        manager = _manager(tmp_path, web.url)
        async with manager:
            tools = await manager.tools_for(None)
            by = {t.name: t for t in tools}
            assert (by["web__charge"].safety, by["web__charge"].idempotent) == ("write", False)
            (res,) = await _run(tools, [("web__charge", {"invoice": "7"})], tmp=tmp_path,
                                receipts=receipts, allow_tools=["web__charge"])
            assert res.is_error and "outcome unknown" in res.text_content
            assert "MCP server 'web'" in res.text_content and "not retried" in res.text_content
            assert _statuses(receipts) == [("web__charge", "uncertain")]
            await web.wait_exit()
            # exactly one attempt reached the server: no automatic re-execution
            assert [(c["tool"], c["pid"]) for c in web.calls()] == [("charge", web.pids[0])]

            # the server comes back (a new process, which knows nothing of our session): the
            # next call is served on a new session
            await web.start()
            (after,) = await _run(tools, [("web__shout", {"text": "back"})], tmp=tmp_path,
                                  receipts=receipts)
            assert not after.is_error and after.text_content == "BACK"
            assert manager.status()["web"] == "ready"
    assert [(c["tool"], c["pid"]) for c in web.calls()] == [
        ("charge", web.pids[0]), ("shout", web.pids[1])
    ]


async def test_restarted_server_gets_the_call_on_a_new_session(tmp_path: Path) -> None:
    # The server restarts between two calls without the client noticing: the next POST
    # carries a session id it no longer knows (404). Nothing ran, so even a non-idempotent
    # call is sent again, once, on a fresh session.
    receipts = MemoryReceiptStore()
    async with _web(tmp_path) as web:
        manager = _manager(tmp_path, web.url, backoff=5.0)  # only the call's nudge reconnects
        async with manager:
            tools = await manager.tools_for(None)
            await web.stop()
            await web.start()
            assert not {t.name: t for t in tools}["web__note"].idempotent
            (res,) = await _run(tools, [("web__note", {"text": "once"})], tmp=tmp_path,
                                receipts=receipts, allow_tools=["web__note"])
            assert manager.status()["web"] == "ready"
    assert not res.is_error and res.text_content == "noted once"
    assert _statuses(receipts) == [("web__note", "done")]
    # the server saw the call exactly once, on its new process
    assert [(c["tool"], c["pid"]) for c in web.calls()] == [("note", web.pids[1])]


async def test_stops_mid_call_idempotent_is_retried_once(tmp_path: Path) -> None:
    once = tmp_path / "crash-once"
    once.touch()
    receipts = MemoryReceiptStore()
    async with _web(tmp_path, env={"WEB_CRASH_ONCE": str(once)}) as web:
        web.keep_alive()
        manager = _manager(tmp_path, web.url)
        async with manager:
            tools = await manager.tools_for(None)
            by = {t.name: t for t in tools}
            assert by["web__fetch"].idempotent
            (res,) = await _run(tools, [("web__fetch", {"key": "k"})], tmp=tmp_path,
                                receipts=receipts)
    assert not res.is_error and res.text_content == "fetched k"
    first, second = web.calls()
    assert (first["tool"], second["tool"]) == ("fetch", "fetch")
    # the retry ran on the restarted server, and only once
    assert (first["pid"], second["pid"]) == (web.pids[0], web.pids[1])
