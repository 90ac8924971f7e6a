"""A command imports only its own module (issue 17: `geode run` imported all thirteen command
modules, ~36 ms; ``cmd_channels`` alone ~28 ms). Help, unknown commands and the root options
still see every command. Structural, not timed: fresh interpreters report ``sys.modules``."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: the module (``geode.cli.app`` as an attribute is the Typer app it defines)
app_module = importlib.import_module("geode.cli.app")

_PROBE = """
import atexit, json, sys
def _report():
    with open({out!r}, "w") as f:
        json.dump(sorted(m for m in sys.modules
                         if m.startswith("geode.cli.cmd_") or m in {watch!r}), f)
atexit.register(_report)
sys.argv = ["geode", *{argv!r}]
from geode.cli import main
main()
"""


#: imported by what needs them, not by every run: an MCP server or a project config
#: (geode.mcp's config models), web_fetch's first page (html.parser); never by GEODE's
#: logging (colorama: structlog's Windows console colours, off in GEODE). Not ``secrets``:
#: GEODE's ids no longer need it, but pydantic >= 2.14 imports it with its types.
WATCH = ("geode.mcp", "html.parser", "colorama")


def _run(tmp_path: Path, tag: str, *argv: str) -> tuple[int, str, list[str]]:
    """(exit code, stdout + stderr, command modules imported) of ``geode *argv``."""
    out = tmp_path / f"{tag}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEODE_")}
    env.update(GEODE_HOME=str(tmp_path / "home"), COLUMNS="200",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p))
    # and the plugins' command modules (the chat layer's), wherever they live
    code = _PROBE.format(out=str(out), argv=list(argv),
                         watch=(*WATCH, *_plugin_modules().values()))
    proc = subprocess.run([sys.executable, "-c", code],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    loaded: list[str] = json.loads(out.read_text()) if out.exists() else []
    return proc.returncode, proc.stdout + proc.stderr, loaded


def test_the_command_map_names_every_command_and_its_module() -> None:
    # a command missing from the map would still work (all modules are imported for it) but
    # slowly; a wrong module would make the command unknown: both show here
    app_module._register()
    registered: dict[str, str] = {}
    for cmd in app_module.app.registered_commands:
        assert cmd.callback is not None
        registered[cmd.name or cmd.callback.__name__] = cmd.callback.__module__
    for group in app_module.app.registered_groups:
        assert group.name is not None and group.typer_instance is not None
        modules = {c.callback.__module__ for c in group.typer_instance.registered_commands
                   if c.callback is not None}
        assert len(modules) == 1, (group.name, modules)
        registered[group.name] = modules.pop()
    # the harness's own commands, then its plugins' (the chat layer's), each where it says
    assert {**{k: f"geode.cli.{v}" for k, v in app_module._COMMAND_MODULE.items()},
            **_plugin_modules()} == registered
    assert set(app_module._COMMAND_MODULE.values()) == set(app_module._COMMAND_MODULES)


def _plugin_modules() -> dict[str, str]:
    """Each plugin command and the module that defines it (from the plugins' specs)."""
    from geode.plugins import plugin_commands

    return {name: ref.partition(":")[0] for name, ref in plugin_commands().items()}


def _module_of(name: str) -> str:
    return (f"geode.cli.{app_module._COMMAND_MODULE[name]}" if name in app_module._COMMAND_MODULE
            else _plugin_modules()[name])


def test_command_of_finds_the_subcommand_past_the_root_options() -> None:
    of = app_module._command_of
    assert of(["run", "--demo", "hi"]) == "run"
    assert of(["--log-level", "INFO", "--log-json", "serve"]) == "serve"
    assert of(["--log-level=DEBUG", "sessions", "list"]) == "sessions"
    assert of(["--help", "run"]) is None and of(["--version"]) is None and of([]) is None
    assert of(["--log-level"]) is None  # Click reports the missing value


def test_run_demo_imports_only_the_run_command(tmp_path: Path) -> None:
    # and none of WATCH: no MCP server configured, no project config file, no web page
    rc, out, loaded = _run(tmp_path, "demo", "run", "--demo", "hi")
    assert rc == 0, out
    assert loaded == ["geode.cli.cmd_run"]


def test_a_projects_mcp_section_is_still_seen(tmp_path: Path) -> None:
    from geode.cli._runtime import _project_mcp_section
    from geode.mcp.trust import project_mcp_section

    assert _project_mcp_section(tmp_path) is None
    (tmp_path / ".geode").mkdir()
    (tmp_path / ".geode" / "config.toml").write_text("[model]\ndefault = 'x'\n")
    assert _project_mcp_section(tmp_path) is None
    (tmp_path / ".geode" / "config.toml").write_text('[mcp.servers.s]\ncommand = "x"\n')
    assert _project_mcp_section(tmp_path) == project_mcp_section(tmp_path) == {
        "servers": {"s": {"command": "x"}}}


def test_each_command_answers_with_only_its_module_imported(tmp_path: Path) -> None:
    names = sorted({*app_module._COMMAND_MODULE, *_plugin_modules()})
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda n: _run(tmp_path, n, n, "--help"), names))
    for name, (rc, out, loaded) in zip(names, results, strict=True):
        assert rc == 0, (name, out)
        assert f"geode {name} [OPTIONS]" in out, (name, out)
        own = _module_of(name)
        # cmd_ask, cmd_info and cmd_mcp reuse cmd_run's helpers; nothing else comes along
        assert set(loaded) - set(WATCH) <= {own, "geode.cli.cmd_run"}, (name, loaded)


def test_help_and_unknown_commands_still_see_every_command(tmp_path: Path) -> None:
    rc, out, loaded = _run(tmp_path, "help", "--help")
    assert rc == 0, out
    assert [m for m in loaded if m not in WATCH] == sorted(
        {*(f"geode.cli.{m}" for m in app_module._COMMAND_MODULES),
         *_plugin_modules().values()})
    for name in {*app_module._COMMAND_MODULE, *_plugin_modules()}:
        assert f" {name} " in out, (name, out)
    rc, out, _ = _run(tmp_path, "typo", "sesions")
    assert rc == 2 and "No such command 'sesions'" in out, out
