"""Start-up imports only what the configuration uses (issue 17: `geode run --demo` was 1.4 s
of imports, most of them SDKs it never touched). Structural, not timed: each command runs in
a fresh interpreter and reports which heavy packages ended up in ``sys.modules``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: imported only when a channel, an MCP server or a migration needs them
HEAVY = ("discord", "telegram", "slack_bolt", "slack_sdk", "mcp", "mcp_types", "alembic",
         "openai", "anthropic")

_PROBE = """
import atexit, json, sys
def _report():
    heavy = {heavy!r}
    with open({out!r}, "w") as f:
        json.dump(sorted(m for m in heavy if m in sys.modules), f)
atexit.register(_report)
sys.argv = ["geode", *{argv!r}]
from geode.cli import main
main()
"""


def _loaded(tmp_path: Path, *argv: str, home: Path | None = None) -> list[str]:
    out = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEODE_")}
    env.update(GEODE_HOME=str(home or tmp_path / "home"),
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p))
    code = _PROBE.format(heavy=HEAVY, out=str(out), argv=list(argv))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    loaded: list[str] = json.loads(out.read_text())
    return loaded


def test_run_demo_imports_no_platform_sdk_no_mcp_no_alembic(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # the first run creates and migrates the store: Alembic is needed there, nothing else
    assert _loaded(tmp_path, "run", "--demo", "hi", home=home) == ["alembic"]
    # the second opens a current store, the everyday case
    assert _loaded(tmp_path, "run", "--demo", "hi again", home=home) == []


def test_mcp_sdk_is_imported_when_a_server_is_configured(tmp_path: Path) -> None:
    # the probe has teeth: a configured MCP server does load the SDK
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[mcp.servers.echo]\ncommand = "{sys.executable}"\nargs = ["-c", "pass"]\n'
        'read_only = true\n'
    )
    assert "mcp" in _loaded(tmp_path, "run", "--demo", "hi", home=home)
