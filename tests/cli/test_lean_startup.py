"""Start-up imports only what the configuration uses (issue 17: `geode run --demo` was 1.4 s
of imports, most of them SDKs it never touched). Structural, not timed: each command runs in
a fresh interpreter and reports which heavy packages ended up in ``sys.modules``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
#: imported only when a channel, an MCP server or a migration needs them; the model SDKs by
#: the first turn that needs one; jsonschema by the first tool call its fast path does not
#: allow (geode/executor/_schema.py), httpx by the first web
#: fetch (or a verify judge), PostgreSQL's dialect by a PostgreSQL store; rich (structlog's
#: and httpx's optional pretty output), pygments, cryptography and tornado (PTB's Passport
#: decryption and webhook server) never by these commands (geode._imports)
HEAVY = ("discord", "telegram", "slack_bolt", "slack_sdk", "mcp", "mcp_types", "alembic",
         "openai", "anthropic", "jsonschema", "httpx", "sqlalchemy.dialects.postgresql",
         "rich", "pygments", "cryptography", "tornado", "structlog", "sqlalchemy")

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
    # the first run creates and migrates the store: Alembic is needed there (it loads every
    # dialect's DDL, and pygments through its templates), nothing else; the demo's tool calls
    # have valid arguments, which check 4's fast path allows without jsonschema
    assert _loaded(tmp_path, "run", "--demo", "hi", home=home) == [
        "alembic", "pygments", "sqlalchemy", "sqlalchemy.dialects.postgresql", "structlog"]
    # the second opens a current store, the everyday case
    assert _loaded(tmp_path, "run", "--demo", "hi again", home=home) == [
        "sqlalchemy", "structlog"]


def test_help_imports_no_logging_stack(tmp_path: Path) -> None:
    # help renders with typer's rich; it runs no command, so nothing logs
    heavy = _loaded(tmp_path, "--help")
    assert "structlog" not in heavy and "sqlalchemy" not in heavy, heavy


def test_mcp_sdk_is_imported_when_a_server_is_configured(tmp_path: Path) -> None:
    # the probe has teeth: a configured MCP server does load the SDK
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[mcp.servers.echo]\ncommand = "{sys.executable}"\nargs = ["-c", "pass"]\n'
        'read_only = true\n'
    )
    assert "mcp" in _loaded(tmp_path, "run", "--demo", "hi", home=home)


async def test_serve_with_telegram_imports_no_other_platform_sdk(tmp_path: Path) -> None:
    import asyncio
    import signal
    import socket

    from bots.testing.telegram import FakeTelegramServer

    home = tmp_path / "home"
    _loaded(tmp_path, "run", "--demo", "hi", home=home)  # the store exists and is current
    out = tmp_path / "modules.json"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with FakeTelegramServer(token="1:T", bot_username="geode_bot") as tg:
        (home / "config.toml").write_text(
            '[model]\ndefault = "openai:local-model"\n\n'
            f'[channels.telegram]\nbase_url = "{tg.base_url}"\n'
            f'base_file_url = "{tg.base_file_url}"\npoll_timeout_s = 1\n\n'
            '[[bindings]]\nplatform = "telegram"\nchannel = "-100"\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GEODE_", "TELEGRAM_"))}
        # an OpenAI-compatible default model with a key: /readyz checks it without the SDK
        env.update(GEODE_HOME=str(home), GEODE_HEALTH_PORT=str(port), TELEGRAM_BOT_TOKEN="1:T",
                   OPENAI_API_KEY="sk-test", OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                   PYTHONPATH=os.pathsep.join(
                       p for p in (str(REPO), env.get("PYTHONPATH", "")) if p))
        code = _PROBE.format(heavy=HEAVY, out=str(out), argv=["serve"])
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        assert proc.stderr is not None
        seen = b""
        try:
            await tg.wait_until(lambda: tg.calls_to("getUpdates"), within=60)
            # started: it prints where it listens, then installs its SIGTERM handler
            while b"geode serve: socket" not in seen:
                line = await asyncio.wait_for(proc.stderr.readline(), 60)
                assert line, seen.decode()[-2000:]
                seen += line
            ready = await asyncio.to_thread(_get_json, f"http://127.0.0.1:{port}/readyz")
            assert ready["checks"]["model"] == {"ok": True, "detail": "openai:local-model"}
            await asyncio.sleep(0.5)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, (seen + err).decode()[-2000:]
    # no other channel's SDK, no MCP, no Alembic on a current store; no model SDK either
    # (the start-up model check reads the credential, it builds no client); no jsonschema
    # before a tool call; no rich, pygments or cryptography at all
    assert json.loads(out.read_text()) == ["httpx", "sqlalchemy", "structlog", "telegram"]


def _get_json(url: str) -> dict[str, Any]:
    """The JSON body of a GET, whatever the status (/readyz answers 503 with one)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        raw = exc.read()
    body: dict[str, Any] = json.loads(raw)
    return body
