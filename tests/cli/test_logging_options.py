"""`--log-level` / `--log-json` after the subcommand too; INFO shows GEODE's lines, not
alembic's plugin set-up and migration steps (those are for DEBUG)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from geode.cli.app import hoist_root_options

REPO = Path(__file__).resolve().parents[2]


def _geode(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEODE_")}
    env.update(GEODE_HOME=str(home), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "geode", *args], env=env, cwd=home.parent,
                          capture_output=True, text=True, timeout=60, check=False)


def test_hoisting_moves_root_options_only_and_stops_at_double_dash() -> None:
    assert hoist_root_options(["serve", "--demo", "--log-level", "INFO"]) == [
        "--log-level", "INFO", "serve", "--demo"]
    assert hoist_root_options(["run", "--log-level=DEBUG", "--log-json", "hi"]) == [
        "--log-level=DEBUG", "--log-json", "run", "hi"]
    assert hoist_root_options(["run", "--", "--log-json"]) == ["run", "--", "--log-json"]


def test_log_level_after_the_subcommand_and_info_without_alembic_chatter(tmp_path: Path) -> None:
    done = _geode(tmp_path / "home", "db", "upgrade", "--log-level", "INFO")
    assert done.returncode == 0, done.stderr
    assert "store.migrated" in done.stderr  # INFO is on
    for chatter in ("setup plugin", "Context impl", "Running upgrade"):
        assert chatter not in done.stderr, done.stderr
    debug = _geode(tmp_path / "home2", "db", "upgrade", "--log-level", "DEBUG")
    assert debug.returncode == 0, debug.stderr
    assert "Running upgrade" in debug.stderr  # still there for whoever asks for DEBUG
