"""`geode sessions rewind` at the terminal: the plan (turns, files, the effects no rewind
undoes) is shown before the question, "no" changes nothing, "yes" rewinds; a run_bash that
changed more than `[rewind] max_snapshot_mb` makes its turn not rewindable, said up front;
`geode sessions show --all` lists the rewound turns."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geode.cli import cmd_sessions  # noqa: F401 - registers its commands
from geode.cli.app import app
from geode.logging import configure_logging
from geode.providers.scripted import ToolCall
from geode.tools.builtin import sandbox_available
from tests.rewind._session import Recorded, record, tree

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="run_bash needs bubblewrap")


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    monkeypatch.delenv("GEODE_STORE__URL", raising=False)
    yield CliRunner()
    configure_logging(stream=sys.stderr)  # the commands logged onto CliRunner's stderr


def _home(monkeypatch: pytest.MonkeyPatch, rec: Recorded) -> None:
    monkeypatch.setenv("GEODE_HOME", str(rec.home))


def test_the_plan_is_shown_before_the_question_and_no_changes_nothing(
    tmp_path: Path, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = asyncio.run(record(tmp_path))
    _home(monkeypatch, rec)
    args = ["sessions", "rewind", rec.session_id, "--turns", "2"]

    said_no = cli.invoke(app, args, input="n\n")
    assert said_no.exit_code == 1
    out = said_no.output
    # what cannot be undone is listed, and before the question
    assert out.index("turn 2: web_fetch (done)") < out.index("Rewind?")
    assert "files put back (6): app.ini, d/e/f.txt, new/deep/file.txt, notes.txt, out.txt, " \
        "seed.txt" in out
    assert tree(rec.workspace) == rec.trees[3]

    said_yes = cli.invoke(app, args, input="y\n")
    assert said_yes.exit_code == 0, said_yes.output
    assert f"rewound session {rec.session_id}: turn(s) 2, 3" in said_yes.output
    assert tree(rec.workspace) == rec.trees[1]

    shown = cli.invoke(app, ["sessions", "show", rec.session_id, "--all", "--json"])
    info = json.loads(shown.stdout)
    assert [t["rewound"] for t in info["turns"]] == [False, True, True]
    archive = info["turns"][1]["kept_in"]
    assert archive and info["rewinds"][0]["turns"] == [2, 3]
    text = cli.invoke(app, ["sessions", "show", rec.session_id, "--all"]).output
    assert f"REWOUND (kept in session {archive})" in text
    kept = cli.invoke(app, ["sessions", "transcript", archive]).output
    assert "build it" in kept and "polish" in kept


def test_yes_and_json_for_scripts(
    tmp_path: Path, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = asyncio.run(record(tmp_path))
    _home(monkeypatch, rec)
    done = cli.invoke(app, ["sessions", "rewind", rec.session_id, "--yes", "--json"])
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    assert out["plan"]["files"] == ["new/deep/file.txt", "notes.txt"]
    assert out["rewound"]["turns"] == [3]
    assert tree(rec.workspace) == rec.trees[2]
    too_many = cli.invoke(app, ["sessions", "rewind", rec.session_id, "--turns", "5", "--yes"])
    assert too_many.exit_code == 2 and "from 1 to 2" in too_many.output


BIG = 1_500_000


def test_a_command_that_changed_more_than_the_bound_is_not_rewindable(
    tmp_path: Path, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = [
        ("note it", [ToolCall("write_file", {"path": "n.txt", "content": "n"}, id="b1"), "ok"]),
        ("grow it", [ToolCall("run_bash", {"command": "echo more >> big.txt"}, id="b2"), "ok"]),
        ("small", [ToolCall("run_bash", {"command": "echo small > s.txt"}, id="b3"), "ok"]),
    ]
    rec = asyncio.run(record(tmp_path, turns, seed={"big.txt": "x" * BIG},
                             config="[rewind]\nmax_snapshot_mb = 1\n"))
    _home(monkeypatch, rec)
    # the last turn's command stayed within the bound: it can be rewound
    plan = cli.invoke(app, ["sessions", "rewind", rec.session_id, "--json"], input="n\n")
    assert plan.exit_code == 1
    # past it, the 1.5 MB file the command changed was over the bound: said before asking
    over = cli.invoke(app, ["sessions", "rewind", rec.session_id, "--turns", "2"])
    assert over.exit_code == 1
    assert "turn 2: run_bash cannot be undone" in over.output
    assert "1 MB snapshot bound" in over.output
    assert "Rewind?" not in over.output
    assert tree(rec.workspace) == rec.trees[3]

    ok = cli.invoke(app, ["sessions", "rewind", rec.session_id, "--yes"])
    assert ok.exit_code == 0, ok.output
    assert tree(rec.workspace) == rec.trees[2]
