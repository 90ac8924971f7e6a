"""`geode mcp list` against misbehaving servers: one [FAIL] line each, exit 1, no traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.cli.test_run_command import _env, geode

ECHO_SERVER = Path(__file__).parent / "servers" / "echo_server.py"


async def test_mcp_list_reports_failing_servers_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "garbage.py").write_text(
        "import time\nprint('this is not json rpc', flush=True)\ntime.sleep(30)\n"
    )
    (tmp_path / "crash.py").write_text("raise SystemExit('boom at start')\n")
    servers = {
        "missing": {"command": str(tmp_path / "no-such-binary")},
        "crash": {"command": sys.executable, "args": [str(tmp_path / "crash.py")]},
        "garbage": {"command": sys.executable, "args": [str(tmp_path / "garbage.py")]},
        "echo": {"command": sys.executable, "args": [str(ECHO_SERVER)]},
    }
    cfg = tmp_path / "mcp.json"
    cfg.write_text(json.dumps({"mcpServers": servers}))
    code, out, err = await geode("mcp", "list", "--mcp-config", str(cfg),
                                 env=_env(tmp_path / "home"), cwd=tmp_path)
    assert code == 1, out + err
    assert "Traceback" not in out + err
    for name in ("missing", "crash", "garbage"):
        assert sum(line.startswith(f"[FAIL] {name}: ") for line in out.splitlines()) == 1, out
    assert "[ok  ] echo: " in out
    assert "boom at start" in out and "not MCP JSON-RPC" in out


async def test_mcp_list_exits_0_when_every_server_starts(tmp_path: Path) -> None:
    cfg = tmp_path / "mcp.json"
    cfg.write_text(json.dumps(
        {"mcpServers": {"echo": {"command": sys.executable, "args": [str(ECHO_SERVER)]}}}
    ))
    code, out, err = await geode("mcp", "list", "--mcp-config", str(cfg),
                                 env=_env(tmp_path / "home"), cwd=tmp_path)
    assert code == 0, out + err
    assert "[ok  ] echo: " in out


async def test_mcp_serve_http_says_where_it_listens_and_a_port_in_use_is_exit_2(
    tmp_path: Path,
) -> None:
    import asyncio
    import socket

    env = _env(tmp_path / "home")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        code, _out, err = await geode("mcp", "serve", "--http", "--port", str(port),
                                      env=env, cwd=tmp_path)
    assert code == 2, err
    assert f"error: cannot listen for MCP on 127.0.0.1:{port}" in err
    assert "Traceback" not in err

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "geode", "mcp", "serve", "--http", "--port", str(port),
        env=env, cwd=tmp_path, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        line = await asyncio.wait_for(proc.stderr.readline(), 60)
        assert line.decode().strip() == (
            f"geode mcp serve: listening on http://127.0.0.1:{port}/mcp "
            "(streamable HTTP, loopback only)"
        )
    finally:
        proc.terminate()
        await proc.wait()
