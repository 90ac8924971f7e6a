"""The chat layer is a plugin of the harness (``geode.plugins`` entry points): the harness runs
without it, and an outside package adds commands, start checks and ``.env`` lines the same way.

Each case runs ``geode`` in a fresh interpreter: the plugins are read from the installed
metadata, and the app registers commands once per process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from geode.errors import ConfigError
from geode.plugins import plugin_commands, plugins, reset_plugins

REPO = Path(__file__).resolve().parents[2]

#: runs ``geode ARGV`` as if the chat layer (the ``bots`` package and every entry point that
#: names it) were not installed; then reports which ``bots`` modules were imported (none can
#: be: the import is refused)
_WITHOUT_BOTS = """
import atexit, importlib.abc, json, sys

class _NoBots(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "bots" or name.startswith("bots."):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _NoBots())
import geode._entry_points as scan
_found = scan.entry_points
scan.entry_points = lambda group, **kw: [
    ep for ep in _found(group, **kw) if not ep.value.startswith("bots")]
def _report():
    with open({out!r}, "w") as f:
        json.dump(sorted(m for m in sys.modules if m == "bots" or m.startswith("bots.")), f)
atexit.register(_report)
sys.argv = ["geode", *{argv!r}]
from geode.cli import main
main()
"""


def _env(home: Path, *, path: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEODE_")}
    env.update(GEODE_HOME=str(home), COLUMNS="200",
               PYTHONPATH=os.pathsep.join(p for p in (path, str(REPO)) if p))
    return env


def _without_bots(tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    out = tmp_path / "bots-modules.json"
    code = _WITHOUT_BOTS.format(out=str(out), argv=list(argv))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(tmp_path / "home"),
                          capture_output=True, text=True, timeout=120, check=False)
    assert json.loads(out.read_text()) == [], "a bots module was imported"
    return proc.returncode, proc.stdout, proc.stderr


def _listed_commands(help_text: str) -> set[str]:
    """The command names ``--help`` lists (the first word of each row of its boxes; a word
    in another command's description is not a command)."""
    return {m.group(1) for m in re.finditer(r"^[│|] +([a-z][\w-]*) ", help_text, re.M)}


def test_the_harness_runs_without_the_chat_layer(tmp_path: Path) -> None:
    rc, out, err = _without_bots(tmp_path, "run", "--demo", "hi")
    assert rc == 0, out + err
    assert out.strip()  # the demo model's answer
    rc, out, err = _without_bots(tmp_path, "--help")
    assert rc == 0, out + err
    listed = _listed_commands(out)
    assert {"run", "sessions"} <= listed
    assert not {"bindings", "queue", "pairing"} & listed, listed
    rc, out, err = _without_bots(tmp_path, "bindings", "list")
    assert rc == 2 and "No such command 'bindings'" in out + err, out + err


def test_init_and_doctor_without_the_chat_layer(tmp_path: Path) -> None:
    rc, out, err = _without_bots(tmp_path, "init")
    assert rc == 0, out + err
    env = (tmp_path / "home" / ".env").read_text()
    assert "TOKEN" not in env and "ANTHROPIC_API_KEY" in env  # no platform's lines
    rc, out, err = _without_bots(tmp_path, "doctor", "--json")
    assert rc in (0, 1), out + err  # 1: no model credential here
    names = {c["name"] for c in json.loads(out)["checks"]}
    assert {"config", "model", "store"} <= names
    assert "workspaces" not in names and "bindings" not in names  # the chat layer's checks


def test_with_the_chat_layer_its_commands_and_checks_are_there(tmp_path: Path) -> None:
    from geode.cli.preflight import preflight
    from geode.settings import load_settings

    settings, secrets = load_settings(env={"GEODE_HOME": str(tmp_path / "home")})
    assert [c.name for c in preflight(settings, secrets)] == ["workspaces"]
    done = subprocess.run([sys.executable, "-m", "geode", "queue", "list", "--json"],
                          cwd=tmp_path, env=_env(tmp_path / "home"), capture_output=True,
                          text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


_OUTSIDE_PLUGIN = '''
import typer

from geode.cli.preflight import Check
from geode.plugins import HarnessPlugin

hello_app = typer.Typer(help="Say hello from an outside plugin.", no_args_is_help=True)


@hello_app.command("world")
def world() -> None:
    """Greet."""
    typer.echo("hello from the plugin")


def checks(settings, secrets):
    return [Check(name="hello", status="warn", message="hello: a plugin's start check",
                  fix="nothing to fix")]


def env_lines():
    return ["# HELLO_TOKEN=..."]


PLUGIN = HarnessPlugin(name="hello", commands={"hello": "geode_hello:hello_app"},
                       preflight="geode_hello:checks", env_lines="geode_hello:env_lines")
'''


def _install(site: Path, value: str) -> None:
    """A distribution "geode-hello" registering ``value`` as a plugin, as pip leaves it."""
    info = site / "geode_hello-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: geode-hello\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[geode.plugins]\nhello = {value}\n")


def _geode(tmp_path: Path, site: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "geode", *argv], cwd=tmp_path,
                          env=_env(tmp_path / "home", path=str(site)), capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on ``sys.path`` for an outside distribution; the plugins read again."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    reset_plugins()
    yield site
    monkeypatch.undo()
    sys.modules.pop("geode_hello", None)
    reset_plugins()


def test_an_installed_package_adds_commands_checks_and_env_lines(
        tmp_path: Path, site: Path) -> None:
    from geode.cli.cmd_init import _env_template
    from geode.cli.preflight import preflight
    from geode.settings import load_settings

    _install(site, "geode_hello:PLUGIN")
    (site / "geode_hello.py").write_text(_OUTSIDE_PLUGIN)
    assert [p.name for p in plugins()] == ["hello", "chat"]  # first on sys.path, first read
    commands = plugin_commands()  # its commands, then the chat layer's
    assert next(iter(commands)) == "hello" and commands["hello"] == "geode_hello:hello_app"
    assert {"bindings", "pairing", "queue"} <= set(commands) - {"hello"}
    settings, secrets = load_settings(env={"GEODE_HOME": str(tmp_path / "home")})
    assert [(c.name, c.status) for c in preflight(settings, secrets)] == [
        ("hello", "warn"), ("workspaces", "ok")]
    assert "\n# HELLO_TOKEN=...\n" in _env_template()  # its lines, then the chat layer's
    # its command runs as any other, and help lists it beside the chat layer's
    done = _geode(tmp_path, site, "hello", "world")
    assert (done.returncode, done.stdout) == (0, "hello from the plugin\n"), done.stderr
    done = _geode(tmp_path, site, "--help")
    assert " hello " in done.stdout and " bindings " in done.stdout, done.stdout


def test_a_plugin_that_does_not_load_is_said_not_hidden(tmp_path: Path, site: Path) -> None:
    _install(site, "geode_missing_module:PLUGIN")
    with pytest.raises(ConfigError, match=r"GEODE plugin 'hello' \(geode_missing_module:PLUGIN\)"
                                          r" failed to load"):
        plugins()
    # help still answers, with the harness's own commands, and says which plugin failed
    done = _geode(tmp_path, site, "--help")
    assert done.returncode == 0, done.stderr
    assert " run " in done.stdout
    assert "GEODE plugin 'hello' (geode_missing_module:PLUGIN) failed to load" in done.stderr
    # what needs the plugins (a command not the harness's own) is exit 2 naming it
    done = _geode(tmp_path, site, "bindings", "list")
    assert done.returncode == 2 and "error: GEODE plugin 'hello'" in done.stderr, done.stderr
    # doctor says it as a failed check (serve refuses to start on it)
    done = _geode(tmp_path, site, "doctor", "--json")
    failed = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "plugins"]
    assert done.returncode == 1 and len(failed) == 1, done.stdout + done.stderr
    assert failed[0]["status"] == "fail" and "'hello'" in failed[0]["message"]


def test_a_plugin_must_register_a_harness_plugin(site: Path) -> None:
    _install(site, "geode_hello:checks")
    (site / "geode_hello.py").write_text(_OUTSIDE_PLUGIN)
    with pytest.raises(ConfigError, match="is not a HarnessPlugin"):
        plugins()
