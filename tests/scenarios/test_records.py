"""Through the one factory with the real store: denials reach the timeline, the ledger is
written, and neither holds a planted secret."""

from __future__ import annotations

from pathlib import Path

from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings

PLANTED = "sk-ant-api03-LEDGERplanted0123456789abcdefABCDEF"


async def test_denials_in_timeline_and_ledger_redacted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text(f"the key is {PLANTED}\n")
    settings, secrets = load_settings(
        cwd=ws, env={"GEODE_HOME": str(home), "ANTHROPIC_API_KEY": PLANTED}
    )
    provider = ScriptedProvider(
        [
            [
                ToolCall("run_bash", {"command": f"echo {PLANTED}"}),
                ToolCall("write_file", {"path": "x.txt", "content": PLANTED}),
                ToolCall("read_file", {"path": "notes.txt"}),
            ],
            f"done; I saw {PLANTED}",
        ]
    )
    runtime = await Runtime.create(settings=settings, secrets=secrets)
    async with runtime:
        session = await runtime.open_session(
            SessionContext(mode="HEADLESS", workspace=ws, provider=provider)
        )
        result = await session.run("look around")
        assert result.ok
        statuses = [c["status"] for c in result.tool_calls]
        assert statuses == ["denied", "denied", "ok"]
        assert not (ws / "x.txt").exists()
        rows = await runtime.store.timeline.list(session.session_id)
        denied = [r for r in rows if r.kind == "tool.denied"]
        assert {r.payload.get("check") for r in denied} == {"scope", "policy"}
        assert all(PLANTED not in str(r.payload) for r in rows)
        ledger_rows = await runtime.ledger.read(session.session_id)  # type: ignore[union-attr]
    kinds = [r["kind"] for r in ledger_rows]
    assert kinds.count("tool_denied") == 2
    assert "final_result" in kinds
    for f in (home / "ledger").glob("*.jsonl"):
        assert PLANTED not in f.read_text()
