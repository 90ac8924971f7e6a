"""`geode doctor`: each problem is named with its fix; a broken MCP server is reported."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


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


def _advice_commands(out: str) -> list[str]:
    """Every backticked command in the doctor's advice lines (``→ ...``)."""
    cmds: list[str] = []
    for line in out.splitlines():
        if line.strip().startswith("→"):
            cmds += re.findall(r"`([^`]+)`", line)
    return cmds


def test_advice_runs_verbatim_and_fixes_what_it_names(tmp_path: Path) -> None:
    home = tmp_path / "home"  # a new operator: nothing there yet
    first = _doctor(home, tmp_path)
    commands = _advice_commands(first.stdout)
    assert "geode init" in commands, first.stdout
    assert "geode run --demo 'hello'" in commands, first.stdout
    repo = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and not k.startswith("GEODE_")}
    env.update(GEODE_HOME=str(home), PYTHONPATH=repo)
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "geode", command
        done = subprocess.run([sys.executable, "-m", "geode", *argv[1:]], cwd=tmp_path, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stderr}"
    again = _doctor(home, tmp_path)
    assert "no config.toml found" not in again.stdout
    assert f"config: {home / 'config.toml'}" in again.stdout


def test_lists_per_binding_what_runs_freely_and_who_approves(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[[bindings]]\nplatform = "telegram"\nchannel = "-100"\ntools = ["read_file"]\n'
        'approve = ["write_file", "run_bash"]\napprovers = ["42", "43"]\n'
        'approval_timeout_s = 120\n'
        '[[bindings]]\nplatform = "slack"\nchannel = "C1"\napprove = ["web_fetch"]\n'
    )
    proc = _doctor(home, tmp_path, ANTHROPIC_API_KEY="sk-ant-api03-doctortest0123456789")
    assert ("[ok  ] binding telegram -100 [config]: runs freely: read_file; needs approval: "
            "write_file, run_bash; approvers: 42, 43; requests expire after 120s") in proc.stdout
    assert ("[warn] binding slack C1 [config]: runs freely: read-only tools (DAEMON default); "
            "needs approval: web_fetch; approvers: nobody") in proc.stdout
    assert 'give the binding approvers = ["USER_ID", ...]' in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def _computer_use_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[[bindings]]\nplatform = "telegram"\nchannel = "-100"\ncomputer_use = true\n')
    return home


def test_a_computer_use_binding_needs_a_display_that_answers(tmp_path: Path) -> None:
    if not all(shutil.which(p) for p in ("Xvfb", "xdotool", "import")):
        pytest.skip("needs Xvfb, xdotool, imagemagick")
    home = _computer_use_home(tmp_path)
    key = {"ANTHROPIC_API_KEY": "sk-ant-api03-doctortest0123456789"}
    unset = _doctor(home, tmp_path, **key, DISPLAY="")  # serve would start its own Xvfb
    assert re.search(r"\[ok  \] computer use \(telegram -100\): no display configured: geode "
                     r"serve starts its own Xvfb \(tried: X display :\d+ answers \(1280 800\)\)",
                     unset.stdout), unset.stdout
    gone = _doctor(home, tmp_path, **key, DISPLAY=":31999")
    assert "[FAIL] computer use (telegram -100): X display :31999 does not answer" in gone.stdout
    read_fd, write_fd = os.pipe()
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "320x200x24",
                             "-nolisten", "tcp"], pass_fds=(write_fd,),
                            stderr=subprocess.DEVNULL)
    os.close(write_fd)
    try:
        with os.fdopen(read_fd) as f:
            display = ":" + f.readline().strip()
        good = _doctor(home, tmp_path, **key, DISPLAY=display)
        assert f"[ok  ] computer use (telegram -100): X display {display} answers (320 200)" \
            in good.stdout, good.stdout
    finally:
        xvfb.kill()
        xvfb.wait()
