"""`geode init`: a commented config and a private .env, asking nothing without a terminal."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _init(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEODE_")}
    env.update(GEODE_HOME=str(home), PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "geode", "init", *args], env=env, cwd=home.parent,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False,
        preexec_fn=lambda: os.umask(0),  # a careless umask must not make .env readable
    )


def test_init_writes_the_example_config_and_a_0600_env(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = _init(home)
    assert done.returncode == 0, done.stderr
    config = (home / "config.toml").read_text(encoding="utf-8")
    assert config == (REPO / "config" / "config.example.toml").read_text(encoding="utf-8")
    env = home / ".env"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    # what doctor checks (config names channels, user ids, approvers): init leaves nothing for
    # it to warn about
    assert stat.S_IMODE((home / "config.toml").stat().st_mode) == 0o600
    assert all(not line or line.startswith("#") for line in env.read_text().splitlines())
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def test_init_keeps_existing_files_and_asks_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[model]\ndefault = "gpt-6-sol"\n')
    (home / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-keep\n")
    (home / ".env").chmod(0o644)
    done = _init(home)  # stdin is not a terminal: no question, nothing replaced
    assert done.returncode == 0, done.stderr
    assert "kept" in done.stdout
    assert (home / "config.toml").read_text() == '[model]\ndefault = "gpt-6-sol"\n'
    assert (home / ".env").read_text() == "ANTHROPIC_API_KEY=sk-ant-keep\n"
    assert stat.S_IMODE((home / ".env").stat().st_mode) == 0o600
    forced = _init(home, "--force")
    assert forced.returncode == 0, forced.stderr
    assert (home / "config.toml").read_text() == (REPO / "config/config.example.toml").read_text()
    assert (home / ".env").read_text() == "ANTHROPIC_API_KEY=sk-ant-keep\n"  # secrets: never
