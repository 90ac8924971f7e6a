"""run_bash's sandbox against the attacks of issue #16 (classes 1, 5, 7, 8): nothing of the
harness is readable inside (environment, /proc, fds, $GEODE_HOME, the store, the socket),
per-call limits hold, and file modes apply even when GEODE runs as root.

bwrap really runs here: the `sandbox` fixture fails under CI=true when it cannot.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from geode.tools.builtin import run_bash
from geode.tools.builtin._sandbox import SandboxLimits, _walk_unreadable
from geode.tools.errors import ToolFailure
from tests.security.conftest import SECRET, make_ctx

ENV_SECRET = "xoxb-PLANTED-env-0123456789-abcdefghijkl"
DOTENV_SECRET = "PLANTED-dotenv-9f8e7d6c5b4a"
DB_SECRET = "PLANTED-db-row-1a2b3c4d5e"


def _home_in(ws: Path) -> Path:
    """A GEODE home inside the workspace (``geode`` run from ``~``): .env, config, DB, socket."""
    home = ws / ".geode"
    home.mkdir()
    (home / ".env").write_text(f"ANTHROPIC_API_KEY={DOTENV_SECRET}\n")
    (home / "config.toml").write_text("[model]\ndefault = 'x'\n")
    (home / "geode.db").write_text(f"SQLite format 3 {DB_SECRET}")
    return home


async def test_no_secret_of_the_harness_is_readable_inside(
    sandbox: None, call: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", ENV_SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    home = _home_in(workspace)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(home / "cli.sock"))
    sock.listen()
    # an fd of the parent left inheritable must not reach the command either
    leaked = os.open(home / ".env", os.O_RDONLY)
    os.set_inheritable(leaked, True)
    ctx = make_ctx(workspace, protected_paths=(home,))
    script = "; ".join(
        [
            "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat $f; echo; done",
            "echo PIDS $(ls /proc | grep -c '^[0-9]')",
            "ls -l /proc/self/fd/ | grep -c -- '->' | sed 's/^/FDS /'",
            "for fd in $(ls /proc/self/fd); do [ $fd -gt 2 ] && timeout 1 cat /proc/self/fd/$fd;"
            " done",
            "cat .geode/.env .geode/geode.db .geode/config.toml",
            "ls -a .geode",
            "grep -rs PLANTED . /tmp /var/tmp /run /dev/shm",
            "cat $HOME/.geode/.env",
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); "
            "s.connect('.geode/cli.sock'); print('CONN' + 'ECTED')\"",
            "echo '[[hooks.PreToolUse]]' >> .geode/config.toml && echo APP''ENDED",
            "env",
        ]
    )
    try:
        out = await call(run_bash, ctx, command=script)
    finally:
        os.close(leaked)
        sock.close()
    assert isinstance(out, str)
    for secret in (SECRET, ENV_SECRET, DOTENV_SECRET, DB_SECRET):
        assert secret not in out, out
    assert "CONNECTED" not in out and "APPENDED" not in out
    assert (home / "config.toml").read_text() == "[model]\ndefault = 'x'\n"
    # own PID namespace: the shell, its pipeline and bwrap's init, nothing of the host
    pids = int(out.split("PIDS ")[-1].split()[0])
    assert pids < 10, out
    # 0, 1, 2 and the fd of ls's own directory listing
    assert int(out.split("FDS ")[-1].split()[0]) <= 4, out


async def test_home_is_masked_when_the_workspace_contains_it_at_any_depth(
    sandbox: None, call: Any, workspace: Path
) -> None:
    deep = workspace / "a" / "b"
    deep.mkdir(parents=True)
    home = _home_in(deep)
    ctx = make_ctx(workspace, protected_paths=(home, home / "geode.db"))
    out = await call(
        run_bash,
        ctx,
        command="cat a/b/.geode/.env; ln -s a/b/.geode h; cat h/geode.db; "
        "touch a/b/.geode/x && echo WROTE; echo done",
    )
    assert isinstance(out, str)
    assert DOTENV_SECRET not in out and DB_SECRET not in out and "WROTE" not in out
    assert sorted(p.name for p in home.iterdir()) == [".env", "config.toml", "geode.db"]


async def test_runs_as_an_unprivileged_uid_and_hides_what_only_root_could_read(
    sandbox: None, call: Any, workspace: Path
) -> None:
    hidden = [p for p, _ in _walk_unreadable("/etc")]
    ctx = make_ctx(workspace)
    files = " ".join(hidden[:50])
    out = await call(
        run_bash,
        ctx,
        command=f"id -u; id -g; for f in {files}; do cat $f 2>/dev/null | head -c 64; "
        "ls -A $f/ 2>/dev/null | head -1; done; echo END",
    )
    assert isinstance(out, str)
    lines = out.splitlines()
    assert lines[2] != "0" and lines[3] != "0", out  # neither uid nor gid 0 inside
    assert lines[2:4] == [str(SandboxLimits().uid), str(SandboxLimits().gid)]
    assert lines[4:] == ["END"], out  # every non-world-readable /etc entry reads as empty
    if os.geteuid() == 0:
        # as root on the host the bound /etc would otherwise show them: prove one exists
        assert hidden, "expected at least /etc/shadow to be root-only"
    for path in hidden:
        st = os.lstat(path)
        assert not (stat.S_IMODE(st.st_mode) & 0o004) or stat.S_ISDIR(st.st_mode)


async def test_fork_bomb_is_stopped(sandbox: None, call: Any, workspace: Path) -> None:
    ctx = make_ctx(workspace, sandbox_limits=SandboxLimits(max_processes=40))
    command = "for i in $(seq 300); do sleep 10 & done; echo STARTED-ALL; wait"
    try:
        out = await call(run_bash, ctx, command=command, timeout=8)
        text = str(out)
    except ToolFailure as exc:
        text = str(exc)
    # the kernel refuses the forks (unprivileged host user), or the sandbox is killed for
    # it (root, whom RLIMIT_NPROC does not bind); either way never a plain timeout
    assert "more than 40 processes" in text or "Resource temporarily unavailable" in text, text


async def test_memory_file_size_and_tmpfs_limits(sandbox: None, call: Any, workspace: Path) -> None:
    limits = SandboxLimits(max_memory_mb=256, max_file_mb=20, tmpfs_mb=32)
    ctx = make_ctx(workspace, sandbox_limits=limits)
    out = await call(
        run_bash,
        ctx,
        command="python3 -c 'b = bytearray(600 * 1024 * 1024); print(\"ALLOCATED\")' 2>&1 "
        "| tail -1; "
        "head -c 30000000 /dev/zero > big.bin; ls -l big.bin | awk '{print \"WS\", $5}'; "
        "for i in 1 2 3; do head -c 15000000 /dev/zero > /tmp/f$i 2>/dev/null; done; "
        "echo TMP $(cat /tmp/f* | wc -c)",
    )
    assert isinstance(out, str)
    assert "ALLOCATED" not in out and "MemoryError" in out, out
    assert int(out.split("WS ")[1].split()[0]) == 20 * 1024 * 1024, out
    assert int(out.split("TMP ")[1].split()[0]) <= 32 * 1024 * 1024, out
    assert (workspace / "big.bin").stat().st_size == 20 * 1024 * 1024


def test_default_limits_stop_the_reported_probes() -> None:
    # the report: 400 processes, 300 MB into /tmp went through; defaults must stop both
    d = SandboxLimits()
    assert d.max_processes < 400 and d.tmpfs_mb * 1024 * 1024 < 300_000_000
