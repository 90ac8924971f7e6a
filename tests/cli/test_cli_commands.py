"""`geode schedule`, `geode sessions`, `geode db upgrade` in-process (typer's CliRunner)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geode.cli import cmd_db, cmd_schedule, cmd_sessions  # noqa: F401 - register their commands
from geode.cli.app import app
from geode.errors import ConfigError
from geode.logging import configure_logging
from geode.store import open_store


@pytest.fixture
def cli(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    monkeypatch.setenv("GEODE_HOME", str(home))
    monkeypatch.delenv("GEODE_STORE__URL", raising=False)
    yield CliRunner()
    # the commands configured logging onto CliRunner's captured (now closed) stderr
    configure_logging(stream=sys.stderr)


def test_schedule_list_masks_a_key_in_a_prompt(cli: CliRunner) -> None:
    """A prompt (or a reminder set in a thread) that holds a key is listed masked, in both
    forms, as /reminders shows it; the stored prompt keeps its words for the run."""
    key = "sk-proj-" + "Zq9Xw8Vu7Ts6Rp5On4Ml3Kj2"
    added = cli.invoke(app, ["schedule", "add", "0 3 * * *", f"rotate {key} tonight"])
    assert added.exit_code == 0, added.output
    plain = cli.invoke(app, ["schedule", "list"]).output
    as_json = cli.invoke(app, ["schedule", "list", "--json"]).output
    assert key not in plain and key not in as_json
    assert "rotate [REDACTED] tonight" in plain
    assert json.loads(as_json)[0]["prompt"] == "rotate [REDACTED] tonight"


def test_db_upgrade_reports_the_head_revision(cli: CliRunner, home: Path) -> None:
    done = cli.invoke(app, ["db", "upgrade"])
    assert done.exit_code == 0, done.output
    assert done.output.startswith("store at revision ")
    assert (home / "geode.db").exists()


def test_schedule_add_list_remove(cli: CliRunner) -> None:
    added = cli.invoke(app, ["schedule", "add", "*/15 * * * *", "check the build",
                             "--session", "s-ops"])
    assert added.exit_code == 0, added.output
    job_id = added.output.split()[0]
    assert job_id.startswith("job-") and "next run" in added.output

    listed = cli.invoke(app, ["schedule", "list", "--json"])
    jobs = json.loads(listed.output)
    assert [(j["id"], j["cron"], j["prompt"], j["session_id"]) for j in jobs] == [
        (job_id, "*/15 * * * *", "check the build", "s-ops")
    ]
    assert "never ran" in cli.invoke(app, ["schedule", "list"]).output

    assert cli.invoke(app, ["schedule", "remove", job_id]).exit_code == 0
    again = cli.invoke(app, ["schedule", "remove", job_id])
    assert again.exit_code == 2 and "no scheduled prompt" in again.output
    assert json.loads(cli.invoke(app, ["schedule", "list", "--json"]).output) == []

    zoned = cli.invoke(app, ["schedule", "add", "0 9 * * 1-5", "standup", "--tz", "Asia/Tokyo"])
    assert zoned.exit_code == 0, zoned.output
    assert "Asia/Tokyo)" in zoned.output and " 09:00 Asia/Tokyo" in zoned.output
    assert "'0 9 * * 1-5' Asia/Tokyo" in cli.invoke(app, ["schedule", "list"]).output
    assert cli.invoke(app, ["schedule", "remove", zoned.output.split()[0]]).exit_code == 0
    nowhere = cli.invoke(app, ["schedule", "add", "0 9 * * *", "x", "--tz", "Nowhere/City"])
    assert isinstance(nowhere.exception, ConfigError)

    bad = cli.invoke(app, ["schedule", "add", "now", "x"])
    assert isinstance(bad.exception, ConfigError)  # main() turns it into exit 2
    assert "invalid cron" in str(bad.exception)


def test_sessions_list_show_timeline_and_a_missing_id(cli: CliRunner, home: Path) -> None:
    async def seed() -> str:
        async with await open_store(f"sqlite:///{home / 'geode.db'}") as store:
            sid = await store.sessions.create(mode="IPC", model="m", title="seeded")
            await store.receipts.intend(session_id=sid, turn_id="t1", call_id="c1",
                                        tool="write_file", args_hash="h")
            await store.receipts.mark_uncertain_open(sid)
            await store.timeline.append(session_id=sid, turn_id="t1", kind="tool.denied",
                                        payload={"check": "approval"})
            return sid

    configure_logging(stream=sys.stderr)
    sid = asyncio.run(seed())
    listed = cli.invoke(app, ["sessions", "list", "--json"])
    assert [s["id"] for s in json.loads(listed.output)] == [sid]

    shown = cli.invoke(app, ["sessions", "show", sid])
    assert shown.exit_code == 0, shown.output
    assert "c1  write_file  uncertain  UNCERTAIN: check the outcome by hand" in shown.output
    info = json.loads(cli.invoke(app, ["sessions", "show", sid, "--json"]).output)
    assert info["uncertain"] == ["c1"] and info["checkpoints"] == 0

    timeline = cli.invoke(app, ["sessions", "timeline", sid, "--json"])
    rows = [json.loads(line) for line in timeline.output.splitlines()]
    assert [(r["kind"], r["payload"]) for r in rows] == [("tool.denied", {"check": "approval"})]

    async def approvals() -> None:
        async with await open_store(f"sqlite:///{home / 'geode.db'}") as store:
            for kind, extra in [("approval.requested", {}),
                                ("approval.decided", {"decision": "allow", "outcome": "approved",
                                                      "by": "ann (43)"})]:
                await store.timeline.append(session_id=sid, turn_id="t1", kind=kind, payload={
                    "call_id": "c2", "tool": "run_bash", **extra})

    asyncio.run(approvals())
    shown = cli.invoke(app, ["sessions", "show", sid])
    assert "approvals 2" in shown.output
    assert "c2  run_bash  requested\n" in shown.output
    assert "c2  run_bash  decided approved by ann (43)" in shown.output
    info = json.loads(cli.invoke(app, ["sessions", "show", sid, "--json"]).output)
    assert [(a["kind"], a["decision"], a["by"]) for a in info["approvals"]] == [
        ("requested", None, ""), ("decided", "approved", "ann (43)")]

    for cmd in (["sessions", "show", "s-none"], ["sessions", "timeline", "s-none"]):
        missing = cli.invoke(app, cmd)
        assert missing.exit_code == 2 and "no session 's-none'" in missing.output
