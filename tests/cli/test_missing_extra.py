"""A configured platform (or a PostgreSQL store) whose extra is not installed is exit 2 with
a message naming the extra, never an ImportError's traceback. The SDK is made missing in a
fresh interpreter by a ``sys.meta_path`` finder that refuses it, as pip would have left it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from geode._imports import EXTRA_OF, MissingExtraError, missing_extra, require

REPO = Path(__file__).resolve().parents[2]

_RUN = """
import importlib.abc, sys

class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
sys.argv = ["geode", *{argv!r}]
from geode.cli import main
main()
"""


def _geode(tmp_path: Path, config: str, *argv: str, blocked: tuple[str, ...],
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(mode=0o700, exist_ok=True)
    (home / "config.toml").write_text(config, encoding="utf-8")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GEODE_", "TELEGRAM_"))}
    clean.update(GEODE_HOME=str(home), PYTHONPATH=str(REPO), **(env or {}))
    code = _RUN.format(blocked=set(blocked), argv=list(argv))
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=clean,
                          capture_output=True, text=True, timeout=60, check=False)


_TELEGRAM = """
[channels.telegram]
token_env = "TELEGRAM_BOT_TOKEN"
base_url = "http://127.0.0.1:9/bot"

[[bindings]]
platform = "telegram"
channel = "-100123"
allow_users = ["42"]
"""


def test_serve_with_a_telegram_binding_and_no_telegram_sdk_names_the_extra(
        tmp_path: Path) -> None:
    proc = _geode(tmp_path, _TELEGRAM, "serve", "--demo", blocked=("telegram",),
                  env={"TELEGRAM_BOT_TOKEN": "123:abc"})
    assert proc.returncode == 2, proc.stderr
    assert "install geode-agent[telegram]" in proc.stderr
    assert "pip install -e '.[telegram]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_postgresql_store_without_psycopg_names_the_postgres_extra(tmp_path: Path) -> None:
    config = '[store]\nurl = "postgresql+psycopg://geode@127.0.0.1:9/geode"\n'
    proc = _geode(tmp_path, config, "db", "upgrade", blocked=("psycopg", "psycopg_binary"))
    assert proc.returncode == 2, proc.stderr
    assert "install geode-agent[postgres]" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_missing_module_of_geode_itself_is_not_reported_as_an_extra() -> None:
    # a bug (a module of ours that is not there) must stay a traceback, not advice to install
    with pytest.raises(ModuleNotFoundError):
        require("geode._no_such_module")
    assert missing_extra(ModuleNotFoundError("x", name="geode.nope")) is None


def test_every_optional_sdk_maps_to_an_extra_pyproject_declares() -> None:
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert set(EXTRA_OF.values()) <= set(extras)
    found = missing_extra(RuntimeError("wrapped"))
    assert found is None
    try:
        try:
            raise ModuleNotFoundError("No module named 'slack_bolt'", name="slack_bolt.app")
        except ModuleNotFoundError as exc:
            raise RuntimeError("building the connector failed") from exc
    except RuntimeError as outer:
        found = missing_extra(outer)
    assert isinstance(found, MissingExtraError) and found.extra == "slack"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_readyz(tmp_path: Path, config: str, *, blocked: set[str],
                 env: dict[str, str] | None = None) -> dict[str, object]:
    """Start `geode serve --demo` with ``blocked`` modules missing; its /readyz body (200, or
    503 once no check is still starting: the health endpoint listens before the connectors and
    the scheduler have made their first beat), then SIGTERM (exit 0 expected)."""
    import json
    import signal
    import time
    import urllib.error
    import urllib.request

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(config)
    port = _free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GEODE_")}
    clean.update(GEODE_HOME=str(home), GEODE_HEALTH_PORT=str(port), PYTHONPATH=str(REPO),
                 **(env or {}))
    code = _RUN.format(blocked=blocked, argv=["serve", "--demo"])
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=clean,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                    return dict(json.loads(r.read()))
            except urllib.error.HTTPError as exc:  # 503: not ready (and says why)
                body = dict(json.loads(exc.read()))
                checks = body.get("checks")
                if not isinstance(checks, dict) or not any(
                        str(c.get("detail", "")).startswith("starting") for c in checks.values()):
                    return body
                time.sleep(0.2)  # a component has not beaten yet: ask again
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.3)
        raise AssertionError(f"geode serve did not answer /readyz:\n{log.read_text()}")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()


@pytest.mark.slow
def test_the_core_install_serves_without_any_platform_sdk_psycopg_or_otel(tmp_path: Path) -> None:
    # `pip install -e .` alone: no channel configured, nothing optional importable
    body = _serve_readyz(tmp_path, "", blocked=set(EXTRA_OF))
    assert body.get("ready") is True, body


@pytest.mark.slow
def test_a_slack_only_install_serves_slack_without_the_other_platforms_sdks(
        tmp_path: Path) -> None:
    # `pip install -e '.[slack]'`: the platforms not configured must not be needed to start
    config = ('[channels.slack]\nbase_url = "http://127.0.0.1:9/api/"\n\n'
              '[[bindings]]\nplatform = "slack"\nchannel = "C0123456789"\n')
    body = _serve_readyz(tmp_path, config, blocked={"telegram", "discord", "psycopg"},
                         env={"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"})
    assert "ready" in body, body  # it runs (Slack itself is unreachable here: not ready)
