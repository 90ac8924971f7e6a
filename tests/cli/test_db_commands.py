"""`geode db status` / `geode db upgrade`: each migration branch, at which revision, on a
database made by the linear-chain release and on a new one."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geode.cli import cmd_db  # noqa: F401 - registers its commands
from geode.cli.app import app
from geode.logging import configure_logging
from geode.store import branch_heads

LEGACY = Path(__file__).parents[1] / "store" / "data" / "legacy_0012.sqlite"


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("GEODE_HOME", str(home))
    monkeypatch.delenv("GEODE_STORE__URL", raising=False)
    yield CliRunner()
    configure_logging(stream=sys.stderr)  # the commands logged onto CliRunner's stderr


def _home() -> Path:
    import os

    return Path(os.environ["GEODE_HOME"])


def test_status_then_upgrade_of_a_legacy_database(cli: CliRunner) -> None:
    shutil.copyfile(LEGACY, _home() / "geode.db")
    heads = branch_heads()
    assert set(heads) == {"geode", "bots"}

    before = cli.invoke(app, ["db", "status"])
    assert before.exit_code == 1, before.output  # behind: tells the operator to upgrade
    for branch, head in heads.items():
        assert f"{branch}: legacy 0012 (head {head}, behind: run `geode db upgrade`)" in (
            before.output)

    done = cli.invoke(app, ["db", "upgrade"])
    assert done.exit_code == 0, done.output
    assert done.output.startswith("store at revision ")
    for branch, head in heads.items():
        assert f"  {branch}: {head}\n" in done.output

    after = cli.invoke(app, ["db", "status"])
    assert after.exit_code == 0, after.output
    assert after.output.splitlines() == [
        f"{branch}: {head} (head {head}, current)" for branch, head in sorted(heads.items())]


def test_status_of_no_database_creates_none(cli: CliRunner) -> None:
    out = cli.invoke(app, ["db", "status"])
    assert out.exit_code == 1
    assert "geode: none (head" in out.output and "bots: none (head" in out.output
    assert not (_home() / "geode.db").exists()
