"""`geode replay` and `geode sessions export` in-process (typer's CliRunner): the inputs
(--session, --binding --since, an export FILE), --deny-tool / --config, --json, the exit
codes, and the export's redaction."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geode.cli import cmd_replay, cmd_sessions  # noqa: F401 - register their commands
from geode.cli.app import app
from geode.logging import configure_logging
from geode.messages import Message
from geode.replay import RecordedTurn, Recording, read_jsonl, to_jsonl
from tests.daemon.conftest import geode
from tests.replay.conftest import Recorded


@pytest.fixture
def cli(one_of_each: Recorded, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    monkeypatch.setenv("GEODE_HOME", str(one_of_each.home))
    monkeypatch.delenv("GEODE_STORE__URL", raising=False)
    yield CliRunner()
    configure_logging(stream=sys.stderr)  # the commands logged onto CliRunner's stderr


def _session(rec: Recorded, scenario: str) -> str:
    return next(r.session_id for r in rec.recordings
                if r.workspace and r.workspace.endswith(f"-{scenario}"))


def test_a_recorded_session_replays_without_difference(
    cli: CliRunner, one_of_each: Recorded
) -> None:
    done = cli.invoke(app, ["replay", "--session", _session(one_of_each, "notes")])
    assert done.exit_code == 0, done.output
    assert "replayed 1 session(s), 2 turn(s): no difference" in done.output


def test_a_denied_tool_is_exit_1_with_its_steps(cli: CliRunner, one_of_each: Recorded) -> None:
    sid = _session(one_of_each, "notes")
    done = cli.invoke(app, ["replay", "--session", sid, "--deny-tool", "write_file", "--json"])
    assert done.exit_code == 1, done.output
    out = json.loads(done.stdout)
    assert out["differences"] == 1
    (diff,) = out["sessions"][0]["differences"]
    assert (diff["turn"], diff["tool"]) == (1, "write_file")
    assert {c["field"]: c["replayed"] for c in diff["changes"]}["decision"] == "denied by scope"
    table = cli.invoke(app, ["replay", "--session", sid, "--deny-tool", "write_file"])
    assert table.exit_code == 1
    assert "denied by scope" in table.output
    assert "1 step(s) decided differently" in table.output


def test_export_then_replay_the_file(
    cli: CliRunner, one_of_each: Recorded, tmp_path: Path
) -> None:
    sid = _session(one_of_each, "channel")
    done = cli.invoke(app, ["sessions", "export", sid])
    assert done.exit_code == 0, done.output
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert records[0]["type"] == "session" and records[0]["id"] == sid
    kinds = {r["type"] for r in records}
    assert kinds == {"session", "turn", "model_response", "tool_result", "decision"}
    approved = [r for r in records if r["type"] == "tool_result" and r["receipt"]]
    assert [r["receipt"]["status"] for r in approved] == ["done"]
    assert any(r["type"] == "decision" and r["kind"] == "approval.decided" for r in records)
    export = tmp_path / "session.jsonl"
    assert cli.invoke(app, ["sessions", "export", sid, "-o", str(export)]).exit_code == 0
    assert export.read_text(encoding="utf-8") == done.stdout
    replayed = cli.invoke(app, ["replay", str(export), "--json"])
    assert replayed.exit_code == 0, replayed.output
    assert json.loads(replayed.stdout)["sessions"][0]["session_id"] == sid
    # the one-object form holds the same records, and replays the same
    one = cli.invoke(app, ["sessions", "export", sid, "--json"])
    assert json.loads(one.stdout)["records"] == records
    export.write_text(one.stdout, encoding="utf-8")
    again = cli.invoke(app, ["replay", str(export)])
    assert again.exit_code == 0 and "no difference" in again.stdout


def test_the_export_is_redacted() -> None:
    key = "sk-ant-api03-" + "Q" * 40
    rec = Recording(session_id="s1", mode="HEADLESS", model="scripted", turns=(
        RecordedTurn(turn_id="t1", input=f"use {key} and hunter2",
                     responses=(Message.assistant(f"using {key}"),)),))
    text = "\n".join(to_jsonl(rec, secrets=("hunter2",)))
    assert key not in text and "hunter2" not in text
    back = read_jsonl(text.splitlines())
    assert back.turns[0].input.startswith("use ") and len(back.turns[0].responses) == 1


def test_a_binding_since_replays_its_sessions(cli: CliRunner, one_of_each: Recorded) -> None:
    done = cli.invoke(app, ["replay", "--binding", "telegram:-100", "--since", "1d", "--json"])
    assert done.exit_code == 0, done.output
    ids = [s["session_id"] for s in json.loads(done.stdout)["sessions"]]
    assert ids == [_session(one_of_each, "channel")]
    none = cli.invoke(app, ["replay", "--binding", "telegram:-999", "--json"])
    assert none.exit_code == 0 and json.loads(none.stdout)["sessions"] == []


def test_another_config_is_what_would_have_been_decided(
    cli: CliRunner, one_of_each: Recorded, tmp_path: Path
) -> None:
    config = tmp_path / "stricter.toml"
    config.write_text('[[bindings]]\nplatform = "telegram"\nchannel = "-100"\n'
                      'tools = ["read_file"]\n', encoding="utf-8")
    sid = _session(one_of_each, "channel")
    done = cli.invoke(app, ["replay", "--session", sid, "--config", str(config), "--json"])
    assert done.exit_code == 1, done.output
    diffs = json.loads(done.stdout)["sessions"][0]["differences"]
    assert [d["tool"] for d in diffs] == ["write_file", "write_file"]
    assert all({c["field"]: c["replayed"] for c in d["changes"]}["decision"]
               == "denied by scope" for d in diffs)


@pytest.mark.parametrize("args", [
    [],
    ["--session", "x", "some.jsonl"],
    ["--binding", "telegram:-100", "--since", "soon"],
    ["--session", "x", "--since", "7d"],
    ["--session", "no-such-session"],
    ["--session", "x", "--deny-tool", "no_such_tool"],
])
def test_usage_errors_are_exit_2(cli: CliRunner, one_of_each: Recorded,
                                 args: list[str]) -> None:
    if args and args[0] == "--session" and args[1] == "x":
        args = ["--session", _session(one_of_each, "notes"), *args[2:]]
    done = cli.invoke(app, ["replay", *args])
    assert done.exit_code == 2, done.output
    assert "error:" in done.output


def test_a_receipt_without_a_result_is_exported_too() -> None:
    rec = Recording(session_id="s1", mode="HEADLESS", model="scripted",
                    turns=(RecordedTurn(turn_id="t1", input="go"),),
                    receipts=({"call_id": "c9", "tool": "run_bash", "status": "uncertain",
                               "detail": "cancelled while running", "turn_id": "t1"},))
    lines = list(to_jsonl(rec))
    assert json.loads(lines[-1])["type"] == "receipt"
    assert read_jsonl(lines).receipts[0]["status"] == "uncertain"


def test_the_geode_command_replays_and_exits_by_the_outcome(one_of_each: Recorded) -> None:
    # the real entry point: the command registered lazily, ConfigError -> exit 2
    sid = _session(one_of_each, "edit")
    same = geode(one_of_each.home, "replay", "--session", sid)
    assert same.returncode == 0, same.stderr
    assert "no difference" in same.stdout
    stricter = geode(one_of_each.home, "replay", "--session", sid, "--deny-tool", "edit_file")
    assert stricter.returncode == 1, stricter.stderr
    assert stricter.stdout.count("denied by scope") == 2
    assert geode(one_of_each.home, "replay").returncode == 2


def test_a_channel_session_from_before_the_policy_was_recorded_is_told_by_its_id() -> None:
    old = Recording(session_id="telegram:bot1:-100:55#2", mode="DAEMON", model="m",
                    metadata={"source": "telegram"})
    assert old.binding == "telegram:-100"
    recorded = Recording(session_id="x", mode="DAEMON", model="m",
                         metadata={"policy": {"binding": "slack:C1"}})
    assert recorded.binding == "slack:C1"
    assert Recording(session_id="a:b:c:d", mode="HEADLESS", model="m").binding == ""
