"""`geode doctor`: each problem is named with its fix; a broken MCP server is reported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _doctor(home: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if not k.endswith("_API_KEY") and not k.startswith("GEODE_")}
    repo = str(Path(__file__).resolve().parents[2])
    base.update(GEODE_HOME=str(home), PYTHONPATH=repo, **env)
    return subprocess.run([sys.executable, "-m", "geode", "doctor"], cwd=cwd, env=base,
                          capture_output=True, text=True, timeout=60, check=False)


def test_missing_key_and_broken_mcp_server_are_reported(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[mcp.servers.broken]\ncommand = "/nonexistent/mcp-server"\n'
    )
    proc = _doctor(home, tmp_path)
    assert proc.returncode == 1
    assert "credential ANTHROPIC_API_KEY is not set" in proc.stdout
    assert "export ANTHROPIC_API_KEY" in proc.stdout
    assert "'broken'" in proc.stdout
    assert "store reachable" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_all_good_is_exit_0(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    proc = _doctor(home, tmp_path, ANTHROPIC_API_KEY="sk-ant-api03-doctortest0123456789")
    assert proc.returncode == 0, proc.stdout
    assert "all checks passed" in proc.stdout
