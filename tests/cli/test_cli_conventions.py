"""The CLI's conventions: shell completion, --json on the commands that print data, readable help
types (never Typer's ``<bool>`` / ``<str>``), and ``geode --version``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from geode import __version__
from tests.cli.test_run_command import _env, geode
from tests.mcp.test_list_command import ECHO_SERVER

REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *argv: str, extra_env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEODE_")}
    env.update(GEODE_HOME=str(tmp_path / "home"), COLUMNS="160", SHELL="/bin/bash",
               PYTHONPATH=str(REPO), **(extra_env or {}))
    code = f"import sys; sys.argv = ['geode', *{list(argv)!r}]; from geode.cli import main; main()"
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False,
                          stdin=subprocess.DEVNULL)


def test_version(tmp_path: Path) -> None:
    done = _run(tmp_path, "--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"geode {__version__}"


def test_completion_is_offered_and_completes_commands_and_subcommands(tmp_path: Path) -> None:
    root_help = _run(tmp_path, "--help").stdout
    assert "--install-completion" in root_help and "--show-completion" in root_help
    script = _run(tmp_path, "--show-completion", "bash")
    assert script.returncode == 0 and "_geode_completion" in script.stdout, script.stderr
    # what the shell does on <TAB>: geode with _GEODE_COMPLETE set and the words so far
    words = _run(tmp_path, extra_env={"_GEODE_COMPLETE": "complete_bash",
                                      "COMP_WORDS": "geode mcp ", "COMP_CWORD": "2"})
    assert set(words.stdout.split()) >= {"serve", "list"}, words.stdout + words.stderr
    words = _run(tmp_path, extra_env={"_GEODE_COMPLETE": "complete_bash",
                                      "COMP_WORDS": "geode sess", "COMP_CWORD": "1"})
    assert words.stdout.split() == ["sessions"]


def _all_commands() -> list[list[str]]:
    import importlib

    import typer.main
    from typer import _click
    from typer.core import TyperGroup

    app_module = importlib.import_module("geode.cli.app")
    app_module._register()
    root = typer.main.get_command(app_module.app)
    out: list[list[str]] = []

    def walk(cmd: object, path: list[str]) -> None:
        out.append(path)
        if isinstance(cmd, TyperGroup):
            ctx = _click.Context(cmd)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), [*path, name])

    walk(root, [])
    return out


def test_help_shows_readable_types_on_every_command(tmp_path: Path) -> None:
    commands = _all_commands()
    assert len(commands) > 30
    # one interpreter renders every help page (a subprocess each would take a minute)
    code = (
        "import sys, contextlib, io\n"
        "from geode.cli import main\n"
        f"for argv in {commands!r}:\n"
        "    sys.argv = ['geode', *argv, '--help']\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit:\n"
        "        pass\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEODE_")}
    env.update(GEODE_HOME=str(tmp_path / "home"), COLUMNS="200", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.count("Usage: geode") == len(commands), done.stderr
    python_names = re.findall(r"<(?:bool|str|int|float|path|Path|list\[[^>]*\])>", done.stdout)
    assert not python_names, sorted(set(python_names))
    # what it shows instead: value types a reader knows, and flags without any
    run_help = _run(tmp_path, "run", "--help").stdout
    assert re.search(r"--model\s+-m\s+TEXT", run_help), run_help
    assert re.search(r"--max-rounds\s+INTEGER", run_help), run_help
    assert re.search(r"--json\s{2,}Print", run_help), run_help
    assert "Usage: geode bindings add [OPTIONS] PLATFORM CHANNEL" in _run(
        tmp_path, "bindings", "add", "--help").stdout


def test_init_json_reports_what_it_wrote_and_kept(tmp_path: Path) -> None:
    first = _run(tmp_path, "init", "--json")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    home = tmp_path / "home"
    assert report == {
        "home": str(home),
        "config": {"path": str(home / "config.toml"), "action": "wrote"},
        "env": {"path": str(home / ".env"), "action": "wrote", "mode": "0600"},
    }
    again = json.loads(_run(tmp_path, "init", "--json").stdout)
    assert again["config"]["action"] == again["env"]["action"] == "kept"
    forced = json.loads(_run(tmp_path, "init", "--json", "--force").stdout)
    assert forced["config"]["action"] == "wrote" and forced["env"]["action"] == "kept"


@pytest.mark.slow
async def test_mcp_list_json_reports_each_server_its_state_and_tools(tmp_path: Path) -> None:
    cfg = tmp_path / "mcp.json"
    cfg.write_text(json.dumps({"mcpServers": {
        "echo": {"command": sys.executable, "args": [str(ECHO_SERVER)]},
        "missing": {"command": str(tmp_path / "no-such-binary")},
    }}))
    code, out, err = await geode("mcp", "list", "--json", "--mcp-config", str(cfg),
                                 env=_env(tmp_path / "home"), cwd=tmp_path)
    assert code == 1, out + err  # one server failed, as without --json
    report = json.loads(out)
    servers = {s["name"]: s for s in report["servers"]}
    assert servers["missing"]["status"] == "failed" and servers["missing"]["error"]
    assert servers["echo"]["status"] == "ok" and servers["echo"]["error"] is None
    assert servers["echo"]["tools"] and all({"name", "safety"} <= set(t)
                                            for t in servers["echo"]["tools"])


def test_every_command_that_prints_data_takes_json() -> None:
    import importlib

    import typer.main
    from typer import _click
    from typer.core import TyperGroup

    app_module = importlib.import_module("geode.cli.app")
    app_module._register()
    root = typer.main.get_command(app_module.app)
    # commands that report what is there (not actions such as add / remove / serve)
    data = {"list", "show", "timeline", "transcript", "export", "models", "usage", "doctor",
            "init", "run", "ask", "replay"}
    missing = []

    def walk(cmd: object, path: list[str]) -> None:
        if isinstance(cmd, TyperGroup):
            ctx = _click.Context(cmd)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), [*path, name])
        elif path and path[-1] in data:
            opts = {o for p in cmd.params for o in getattr(p, "opts", [])}  # type: ignore[attr-defined]
            if "--json" not in opts and "--jsonl" not in opts:
                missing.append(" ".join(path))

    walk(root, [])
    assert not missing, missing
