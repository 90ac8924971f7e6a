"""SIGTERM while `geode serve` is still starting is a graceful stop, not the default abrupt
exit: the handlers are taken before the daemon starts (its health endpoint may already say
ready while the rest of the start, e.g. the web chat's sign-in link, is still running), and a
stop asked for during the start is honoured once it has started: exit 0, "stopped"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.scenarios._serve_proc import free_port

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("when", ["store.migrated", "daemon.started"])
def test_sigterm_while_serve_starts_stops_it_gracefully(tmp_path: Path, when: str) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEODE_")}
    env.update(GEODE_HOME=str(home), GEODE_HEALTH_PORT=str(free_port()), PYTHONPATH=str(REPO))
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "geode", "serve", "--demo"],
                                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while when not in log.read_text() and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)  # the start is not over yet
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert code == 0, text
    assert "geode serve: stopped" in text, text
