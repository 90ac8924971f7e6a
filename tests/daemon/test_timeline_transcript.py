"""A turn leaves its complete timeline (turn, model calls, tool proposed / denied / started /
finished, verify decision, turn finished), and `geode sessions transcript` prints the
conversation with each tool call's outcome, redacted."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geode.cli import cmd_sessions  # noqa: F401 - registers the commands
from geode.cli.app import app
from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.logging import configure_logging
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings

LEAKED = "sk-ant-api03-" + "Q" * 40  # a key shape the redaction must mask


@pytest.fixture
def cli(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    monkeypatch.setenv("GEODE_HOME", str(home))
    monkeypatch.delenv("GEODE_STORE__URL", raising=False)
    yield CliRunner()
    configure_logging(stream=sys.stderr)


async def _one_turn(home: Path) -> str:
    settings, secrets = load_settings(env={"GEODE_HOME": str(home)}, cwd=home)
    workspace = home / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello notes", encoding="utf-8")
    provider = ScriptedProvider([
        [ToolCall("read_file", {"path": "notes.txt"}),
         ToolCall("write_file", {"path": "x.txt", "content": "no"})],
        "read it: hello notes",
    ])
    async with await Runtime.create(settings=settings, secrets=secrets) as runtime:
        session = await runtime.open_session(SessionContext(
            mode="DAEMON", workspace=workspace, session_id="telegram:1:2:3", user="u-42",
            provider=provider,
        ))
        result = await session.run(f"read notes.txt, my key is {LEAKED}", turn_id="t-1")
        assert result.ok, result
        return session.session_id


def test_a_turn_leaves_a_complete_timeline_and_a_transcript(cli: CliRunner, home: Path) -> None:
    sid = asyncio.run(_one_turn(home))
    configure_logging(stream=sys.stderr)

    out = cli.invoke(app, ["sessions", "timeline", sid, "--json"])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.output.splitlines()]
    kinds = [r["kind"] for r in rows]
    assert kinds[0] == "turn.started" and kinds[-1] == "turn.finished"
    assert kinds.count("model.call") == 2
    # proposals come before the executor's rows of the same batch
    assert kinds.index("tool.proposed") < kinds.index("tool.denied")
    assert kinds.index("tool.proposed") < kinds.index("tool.started")
    started = rows[0]["payload"]
    assert started == {"source": "DAEMON", "sender": "u-42"}
    denied = next(r for r in rows if r["kind"] == "tool.denied")
    assert denied["payload"]["tool"] == "write_file" and denied["payload"]["check"] == "policy"
    model = next(r for r in rows if r["kind"] == "model.call")["payload"]
    assert model["outcome"] == "ok" and model["latency_ms"] >= 0 and "input_tokens" in model
    finished = rows[-1]["payload"]
    assert finished["termination"] == "natural" and finished["rounds"] == 2
    assert all(r["turn_id"] == "t-1" for r in rows)

    text = cli.invoke(app, ["sessions", "transcript", sid])
    assert text.exit_code == 0, text.output
    assert LEAKED not in text.output and "[REDACTED]" in text.output
    assert "→ read_file" in text.output and "[ok]" in text.output
    assert "→ write_file" in text.output and "[denied by policy]" in text.output
    assert "assistant: read it: hello notes" in text.output

    data = json.loads(cli.invoke(app, ["sessions", "transcript", sid, "--json"]).output)
    assert [e["role"] for e in data] == ["user", "assistant", "assistant"]
    calls = {c["name"]: c for c in data[1]["tool_calls"]}
    assert calls["read_file"]["status"] == "ok" and "hello notes" in calls["read_file"]["result"]
    assert (calls["write_file"]["status"], calls["write_file"]["check"]) == ("denied", "policy")
    assert LEAKED not in json.dumps(data)

    missing = cli.invoke(app, ["sessions", "transcript", "s-none"])
    assert missing.exit_code == 2 and "no session 's-none'" in missing.output
