"""MCPServerManager against a real stdio MCP server, through the real ToolExecutor."""

from __future__ import annotations

import asyncio
import itertools
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from geode.executor import MemoryReceiptStore, MemoryTimeline, ToolExecutor
from geode.loop.protocols import TurnInfo
from geode.mcp import MCPOutcomeUnknown, MCPServerManager
from geode.mcp.config import ServerConfig, ServerPolicy, ToolPolicy
from geode.messages import ImageBlock, ToolResultBlock, ToolUseBlock
from geode.policy import Mode, session_scope
from geode.tools.base import ToolContext, ToolDef
from geode.tools.errors import ToolFailure
from geode.tools.plan import BoundToolPlan
from tests.mcp.conftest import EchoFiles, FakeSecrets

_ids = itertools.count(1)
POLICY = ServerPolicy(
    safety="write",
    tools={"echo": ToolPolicy(safety="read_only"), "show_env": ToolPolicy(safety="read_only")},
)


def _ctx(tmp: Path) -> ToolContext:
    return ToolContext(session_id="s1", turn_id="t1", call_id=f"c{next(_ids)}", workspace=tmp,
                       mode="HEADLESS")


def _by_name(tools: Sequence[ToolDef]) -> dict[str, ToolDef]:
    return {t.name: t for t in tools}


async def _run(
    tools: Sequence[ToolDef],
    calls: Sequence[tuple[str, dict[str, Any]]],
    *,
    mode: Mode = "HEADLESS",
    tmp: Path,
    receipts: MemoryReceiptStore | None = None,
    **scope_kw: Any,
) -> list[ToolResultBlock]:
    scope = session_scope(mode, **scope_kw)
    executor = ToolExecutor(scope=scope, workspace=tmp, receipts=receipts or MemoryReceiptStore(),
                            timeline=MemoryTimeline())
    plan = BoundToolPlan.build([t for t in tools if scope.permits(t.name)])
    blocks = [ToolUseBlock(id=f"toolu_{next(_ids)}", name=n, input=a) for n, a in calls]
    turn = TurnInfo(session_id="s1", turn_id="t1", round=1, correlation_id="c", mode=mode)
    return await executor.run_batch(blocks, turn=turn, plan=plan)


async def test_tools_schema_safety_and_calls(echo_files: EchoFiles, tmp_path: Path) -> None:
    manager = MCPServerManager(servers=[echo_files.config(policy=POLICY)])
    async with manager:
        # two sessions asking at once share one server process
        a, b = await asyncio.gather(manager.tools_for(session_scope("HEADLESS")),
                                    manager.tools_for(session_scope("REPL")))
        assert {t.name for t in a} == {t.name for t in b}
        assert len(echo_files.starts.read_text().split()) == 1
        denied_scope = session_scope("HEADLESS", deny_tools=["echo__echo"])
        assert "echo__echo" not in {t.name for t in await manager.tools_for(denied_scope)}
        tools = _by_name(a)
        echo = tools["echo__echo"]
        assert echo.source == "mcp:echo"
        assert echo.input_schema["properties"]["text"]["type"] == "string"
        assert echo.input_schema["required"] == ["text"]
        assert (echo.safety, tools["echo__lookup"].safety) == ("read_only", "read_only")
        assert tools["echo__lookup"].idempotent and tools["echo__put"].idempotent
        assert (tools["echo__crash_write"].safety, tools["echo__crash_write"].idempotent) == (
            "write", False)

        ok, bad_type, missing = await _run(
            list(tools.values()),
            [("echo__echo", {"text": "hi"}), ("echo__echo", {"text": 5}), ("echo__echo", {})],
            tmp=tmp_path,
        )
        assert not ok.is_error and ok.text_content == "echo: hi"
        assert bad_type.is_error and missing.is_error
        assert "schema" in bad_type.text_content.lower() or "text" in bad_type.text_content
        # the server saw only the valid call: schema denials happen before dispatch
        assert [c["args"] for c in echo_files.calls()] == [{"text": "hi"}]

        out = await tools["echo__picture"].handler(_ctx(tmp_path))
        assert isinstance(out, list) and isinstance(out[0], ImageBlock)
        assert out[0].media_type == "image/png"
        with pytest.raises(ToolFailure, match="kaboom"):
            await tools["echo__fail"].handler(_ctx(tmp_path), message="kaboom")


async def test_no_policy_means_external_and_unattended_denial(
    echo_files: EchoFiles, tmp_path: Path
) -> None:
    manager = MCPServerManager(servers=[echo_files.config(policy=None)])
    async with manager:
        tools = await manager.tools_for(None)
        by = _by_name(tools)
        # annotations alone are not believed without a policy
        assert {by["echo__lookup"].safety, by["echo__echo"].safety} == {"external"}
        assert not by["echo__lookup"].idempotent

        (denied,) = await _run(tools, [("echo__echo", {"text": "daemon"})], mode="DAEMON",
                               tmp=tmp_path)
        assert denied.is_error and "approval" in denied.text_content
        (denied_headless,) = await _run(tools, [("echo__lookup", {"key": "k"})], tmp=tmp_path)
        assert denied_headless.is_error
        assert echo_files.calls() == []

        # a channel allow-list naming the tool lets it run in DAEMON
        (allowed,) = await _run(tools, [("echo__echo", {"text": "bound"})], mode="DAEMON",
                                tmp=tmp_path, channel_tools=["echo__echo"])
        assert not allowed.is_error and allowed.text_content == "echo: bound"
        assert [c["args"] for c in echo_files.calls()] == [{"text": "bound"}]


async def test_killed_mid_call_non_idempotent_is_outcome_unknown(
    echo_files: EchoFiles, tmp_path: Path
) -> None:
    manager = MCPServerManager(servers=[echo_files.config(policy=POLICY)],
                               restart_backoff_s=(0.05,))
    async with manager:
        tools = _by_name(await manager.tools_for(None))
        with pytest.raises(MCPOutcomeUnknown, match="outcome unknown") as err:
            await tools["echo__crash_write"].handler(_ctx(tmp_path), note="pay invoice 7")
        assert "not retried" in str(err.value)
        assert getattr(err.value, "outcome_uncertain", False) is True
        # exactly one attempt reached the server
        assert [c["tool"] for c in echo_files.calls()] == ["crash_write"]

        # through the executor the model sees the same message (receipt marking is the
        # executor's side of the contract)
        receipts = MemoryReceiptStore()
        (res,) = await _run(list(tools.values()), [("echo__crash_write", {"note": "again"})],
                            tmp=tmp_path, allow_tools=["echo__crash_write"], receipts=receipts)
        assert res.is_error and "outcome unknown" in res.text_content
        assert [c["tool"] for c in echo_files.calls()] == ["crash_write", "crash_write"]
        # the server came back for the next session's calls
        (after,) = await _run(list(tools.values()), [("echo__echo", {"text": "back"})],
                              tmp=tmp_path)
        assert after.text_content == "echo: back"
        assert manager.status()["echo"] == "ready"


async def test_killed_mid_call_idempotent_is_retried_exactly_once(
    echo_files: EchoFiles, tmp_path: Path
) -> None:
    once = tmp_path / "crash-once"
    once.touch()
    manager = MCPServerManager(
        servers=[echo_files.config(policy=POLICY, env={"ECHO_CRASH_ONCE": str(once)}),
                 echo_files.config("always", policy=POLICY, env={"ECHO_CRASH_ALWAYS": "1"})],
        restart_backoff_s=(0.05,),
    )
    async with manager:
        tools = _by_name(await manager.tools_for(None))
        out = await tools["echo__crash_read"].handler(_ctx(tmp_path), key="k")
        assert out[0].text == "read k"  # type: ignore[index,union-attr]
        first, second = (c for c in echo_files.calls() if c["tool"] == "crash_read")
        assert first["pid"] != second["pid"]  # the retry ran on the restarted server

        with pytest.raises(ToolFailure, match="died again during the retry") as err:
            await tools["always__crash_read"].handler(_ctx(tmp_path), key="z")
        assert not isinstance(err.value, MCPOutcomeUnknown)
        attempts = [c for c in echo_files.calls() if c["args"] == {"key": "z"}]
        assert len(attempts) == 2  # the call and exactly one retry


async def test_bad_servers_fail_clearly_and_the_rest_goes_on(
    echo_files: EchoFiles, tmp_path: Path
) -> None:
    not_exec = tmp_path / "server.sh"
    not_exec.write_text("#!/bin/sh\necho hi\n")
    not_exec.chmod(stat.S_IRUSR | stat.S_IWUSR)
    manager = MCPServerManager(servers=[
        echo_files.config(policy=POLICY),
        ServerConfig(name="noexec", origin="t", command=str(not_exec)),
        echo_files.config("quitter", mode="exit"),
        echo_files.config("babbler", mode="garbage"),
        echo_files.config("sleeper", mode="hang", startup_timeout_s=0.5),
        echo_files.config("needsvar", env={"ECHO_TOKEN": "${UNSET_TOKEN_VAR}"}),
    ])
    with capture_logs() as logs:
        async with manager:
            names = {t.name for t in await manager.tools_for(None)}
    assert "echo__echo" in names
    assert not any(n.split("__")[0] != "echo" for n in names)
    f = manager.failures
    assert set(f) == {"noexec", "quitter", "babbler", "sleeper", "needsvar"}
    for name, msg in f.items():
        assert f"MCP server {name!r}" in msg
    assert "Permission denied" in f["noexec"]
    assert "exited before completing initialize" in f["quitter"]
    assert "missing configuration" in f["quitter"]  # the stderr tail explains it
    assert "not MCP JSON-RPC" in f["babbler"] and "Hello!" in f["babbler"]
    assert "initialize within 0.5 s" in f["sleeper"]
    assert "${UNSET_TOKEN_VAR} is not set" in f["needsvar"]
    errors = [e for e in logs if e["event"] == "mcp server failed to start"]
    assert {e["server"] for e in errors} == set(f)


async def test_env_only_as_configured_and_stderr_redacted(
    echo_files: EchoFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEODE_TEST_PARENT_SECRET", "parent-only-value")
    token = "tok-abcdef-123456"
    secrets = FakeSecrets({"MY_TOKEN": token})
    manager = MCPServerManager(
        servers=[echo_files.config(policy=POLICY, env={"ECHO_TOKEN": "${MY_TOKEN}",
                                                       "PLAIN": "x-${MISSING:-dflt}"})],
        secrets=secrets,
    )
    with capture_logs() as logs:
        async with manager:
            tools = _by_name(await manager.tools_for(None))
            show = tools["echo__show_env"].handler
            ctx = _ctx(tmp_path)
            assert (await show(ctx, name="GEODE_TEST_PARENT_SECRET"))[0].text == "<unset>"
            assert (await show(ctx, name="ECHO_TOKEN"))[0].text == token
            assert (await show(ctx, name="PLAIN"))[0].text == "x-dflt"
            assert (await show(ctx, name="PATH"))[0].text == os.environ["PATH"]
            # stderr is drained by its own task: wait for the line rather than race it
            for _ in range(200):
                if any(e["event"] == "mcp server stderr" for e in logs):
                    break
                await asyncio.sleep(0.025)
    lines = [e["line"] for e in logs if e["event"] == "mcp server stderr"]
    assert any("starting with token [REDACTED]" in ln for ln in lines)
    assert not any(token in str(e) for e in logs)


async def test_list_changed_refreshes_tools_and_bumps_generation(
    echo_files: EchoFiles, tmp_path: Path
) -> None:
    manager = MCPServerManager(servers=[echo_files.config(policy=POLICY)])
    async with manager:
        before = {t.name for t in await manager.tools_for(None)}
        gen = manager.generation
        assert "echo__extra" not in before
        await _by_name(manager.current_tools())["echo__grow"].handler(_ctx(tmp_path))
        for _ in range(200):
            if manager.generation > gen:
                break
            await asyncio.sleep(0.01)
        assert manager.generation == gen + 1
        after = {t.name for t in manager.current_tools()}
        assert after == before | {"echo__extra"}
        out = await _by_name(manager.current_tools())["echo__extra"].handler(_ctx(tmp_path), x=3)
        assert out[0].text == "extra 3"  # type: ignore[index,union-attr]
