"""A scripted model calls a real MCP server through the session factory (the `--mcp-config` path).

`geode run` has no scripted-model switch, so the run is built the way `geode run` builds it:
settings → ``MCPServerManager.from_settings(extra_files=[FILE])`` → Runtime → session.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.mcp import MCPServerManager
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings
from tests.mcp.conftest import ECHO_SERVER, read_calls


def _mcp_json(tmp_path: Path, *, policy: dict[str, object] | None) -> Path:
    entry: dict[str, object] = {
        "command": sys.executable,
        "args": [str(ECHO_SERVER)],
        "env": {"ECHO_LOG": str(tmp_path / "calls.jsonl")},
    }
    if policy is not None:
        entry["policy"] = policy
    f = tmp_path / "mcp.json"
    f.write_text(json.dumps({"mcpServers": {"echo": entry}}))
    return f


async def test_scripted_model_calls_mcp_tool_through_the_session(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    f = _mcp_json(tmp_path, policy={"safety": "write",
                                    "tools": {"echo": {"safety": "read_only"}}})
    settings, secrets = load_settings(cwd=ws, env={"GEODE_HOME": str(tmp_path / "home")})
    manager = MCPServerManager.from_settings(settings, secrets, extra_files=[f], project_dir=ws)
    model = ScriptedProvider([
        [ToolCall("echo__echo", {"text": "hi"}), ToolCall("echo__echo", {"text": 5})],
        ToolCall("echo__put", {"key": "k", "value": "v"}),
        "finished",
    ])
    async with Runtime(settings=settings, secrets=secrets, mcp=manager) as runtime:
        session = await runtime.open_session(
            SessionContext(mode="HEADLESS", workspace=ws, provider=model)
        )
        result = await session.run("say hi")
    assert result.text == "finished"
    assert result.tool_calls == [
        {"name": "echo__echo", "status": "ok"},
        {"name": "echo__echo", "status": "denied"},  # schema: text must be a string
        {"name": "echo__put", "status": "denied"},  # `write` needs approval; HEADLESS has nobody
    ]
    offered = {t.name: t for t in model.calls[0].tools}
    assert offered["echo__echo"].input_schema["properties"]["text"]["type"] == "string"
    # the server received exactly the one valid, permitted call
    assert [(c["tool"], c["args"]) for c in read_calls(tmp_path / "calls.jsonl")] == [
        ("echo", {"text": "hi"})
    ]


async def test_daemon_session_without_policy_denies_mcp_tools(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    f = _mcp_json(tmp_path, policy=None)
    settings, secrets = load_settings(cwd=ws, env={"GEODE_HOME": str(tmp_path / "home")})
    manager = MCPServerManager.from_settings(settings, secrets, extra_files=[f])
    model = ScriptedProvider([ToolCall("echo__lookup", {"key": "k"}), "ok"])
    async with Runtime(settings=settings, secrets=secrets, mcp=manager) as runtime:
        session = await runtime.open_session(
            SessionContext(mode="DAEMON", workspace=ws, provider=model)
        )
        result = await session.run("look it up")
    assert result.tool_calls == [{"name": "echo__lookup", "status": "denied"}]
    assert read_calls(tmp_path / "calls.jsonl") == []
