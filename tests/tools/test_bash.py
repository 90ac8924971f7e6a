"""run_bash: runs only in the bubblewrap sandbox; confinement, no network, timeout, caps.

Skipped only when no sandbox can run here and CI != "true"; under CI=true they must run.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from geode.tools.base import ToolContext, ToolDeps
from geode.tools.builtin import bash as bash_mod
from geode.tools.builtin import run_bash, sandbox_available
from geode.tools.errors import ToolFailure


@pytest.fixture
def reset_probe() -> Iterator[None]:
    bash_mod._reset_probe()
    yield
    bash_mod._reset_probe()


async def test_echo_runs_in_the_workspace(
    sandbox: None, call: Any, ctx: ToolContext, workspace: Path
) -> None:
    out = await call(run_bash, ctx, command="echo hi; pwd; cat hello.txt; echo oops >&2; exit 3")
    real = os.path.realpath(workspace)
    assert out == (
        f"exit code 3\n--- stdout ---\nhi\n{real}\nhello world\nsecond line\n--- stderr ---\noops"
    )


async def test_writes_land_in_the_workspace_only(
    sandbox: None, call: Any, ctx: ToolContext, workspace: Path, outside: Path
) -> None:
    tag = uuid.uuid4().hex
    script = "; ".join(
        [
            "echo made > made.txt",
            f"touch {outside}/x-{tag} 2>/dev/null || echo outside-refused",
            f"touch /tmp/../root/x-{tag} 2>/dev/null || echo root-refused",
            f"touch /etc/x-{tag} 2>/dev/null || echo etc-refused",
            f"touch /usr/x-{tag} 2>/dev/null || echo usr-refused",
            # as root, an uncapped sandbox could remount / read-write: must fail
            "mount -o remount,rw,bind /etc 2>/dev/null || echo remount-refused",
            f"touch /etc/y-{tag} 2>/dev/null || echo etc-still-refused",
            f"echo tmp > /tmp/t-{tag} && cat /tmp/t-{tag}",
        ]
    )
    before = sorted(p.name for p in outside.iterdir())
    out = await call(run_bash, ctx, command=script)
    assert isinstance(out, str)
    assert out.splitlines()[2:] == [
        "outside-refused",
        "root-refused",
        "etc-refused",
        "usr-refused",
        "remount-refused",
        "etc-still-refused",
        "tmp",
    ]
    assert (workspace / "made.txt").read_text() == "made\n"
    assert sorted(p.name for p in outside.iterdir()) == before
    for host_path in (f"/root/x-{tag}", f"/etc/x-{tag}", f"/etc/y-{tag}", f"/usr/x-{tag}"):
        assert not os.path.exists(host_path)
    # the sandbox's /tmp is private: nothing of it reaches the host's /tmp
    assert not os.path.exists(f"/tmp/t-{tag}")


async def test_secrets_are_not_visible(
    sandbox: None,
    call: Any,
    ctx: ToolContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GEODE_TEST_SECRET_KEY", "sk-should-not-leak")
    out = await call(
        run_bash,
        ctx,
        command="echo key=${GEODE_TEST_SECRET_KEY:-unset}; cat /etc/shadow 2>/dev/null | wc -c; "
        "ls /root 2>/dev/null | wc -l",
    )
    assert isinstance(out, str)
    assert out.splitlines()[2:] == ["key=unset", "0", "0"]
    assert "sk-should-not-leak" not in out


async def _listener() -> tuple[asyncio.Server, list[int]]:
    accepted: list[int] = []

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    return server, accepted


CONNECT = (
    "exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED || echo CONNECT-FAILED; "
    'python3 -c \'import socket; socket.create_connection(("127.0.0.1", {port}), 2); '
    'print("PY-CONNECTED")\' 2>/dev/null || echo PY-CONNECT-FAILED'
)


async def test_no_network_by_default(sandbox: None, call: Any, ctx: ToolContext) -> None:
    server, accepted = await _listener()
    port = server.sockets[0].getsockname()[1]
    async with server:
        out = await call(run_bash, ctx, command=CONNECT.format(port=port))
    assert isinstance(out, str)
    lines = out.splitlines()
    assert "CONNECT-FAILED" in lines and "PY-CONNECT-FAILED" in lines
    assert "CONNECTED" not in lines and "PY-CONNECTED" not in lines
    assert accepted == []


async def test_network_only_with_literal_true(
    sandbox: None, call: Any, ctx: ToolContext, workspace: Path
) -> None:
    server, accepted = await _listener()
    port = server.sockets[0].getsockname()[1]
    truthy_string = ToolContext(
        session_id="s", turn_id="t", call_id="c", workspace=workspace, mode="repl",
        deps=ToolDeps(bash_network="true"),  # type: ignore[arg-type]
    )  # fmt: skip
    enabled = ToolContext(
        session_id="s", turn_id="t", call_id="c", workspace=workspace, mode="repl",
        deps=ToolDeps(bash_network=True),
    )  # fmt: skip
    async with server:
        denied = await call(run_bash, truthy_string, command=CONNECT.format(port=port))
        assert accepted == []
        allowed = await call(run_bash, enabled, command=CONNECT.format(port=port))
        await asyncio.sleep(0)  # let the accept callback run
    assert "CONNECT-FAILED" in denied.splitlines()
    # the shell's own connect is the positive control (python3 may be absent in the sandbox)
    assert "CONNECTED" in allowed.splitlines() and "CONNECT-FAILED" not in allowed.splitlines()
    assert accepted  # the positive control reached the listener


def _sandbox_procs(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                pids.append(int(entry))
    return pids


async def test_timeout_kills_the_whole_sandbox(
    sandbox: None, call: Any, ctx: ToolContext, workspace: Path
) -> None:
    marker = f"{uuid.uuid4().int % 10_000 + 1000}.{uuid.uuid4().int % 1000:03d}7"
    command = f"echo started; (sleep {marker}; touch late) & sleep {marker}"
    with pytest.raises(ToolFailure) as info:
        await call(run_bash, ctx, command=command, timeout=1)
    msg = str(info.value)
    assert msg.startswith("command timed out after 1 s; the sandbox and every process")
    assert "started" in msg  # partial output is kept
    # the kill is asynchronous in the kernel: wait (bounded) until no process of it is left
    for _ in range(100):
        if not _sandbox_procs(f"sleep\x00{marker}"):
            break
        await asyncio.sleep(0.05)
    assert _sandbox_procs(f"sleep\x00{marker}") == []
    assert not (workspace / "late").exists()


async def test_background_processes_end_with_the_command(
    sandbox: None, call: Any, ctx: ToolContext
) -> None:
    marker = f"{uuid.uuid4().int % 10_000 + 1000}.5"
    out = await call(run_bash, ctx, command=f"sleep {marker} & echo bg-started")
    assert out == "exit code 0\n--- stdout ---\nbg-started"
    for _ in range(100):
        if not _sandbox_procs(f"sleep\x00{marker}"):
            break
        await asyncio.sleep(0.05)
    assert _sandbox_procs(f"sleep\x00{marker}") == []


async def test_output_caps(sandbox: None, call: Any, ctx: ToolContext) -> None:
    out = await call(
        run_bash,
        ctx,
        command="head -c 30000 /dev/zero | tr '\\0' a; echo; echo END; "
        "head -c 9000 /dev/zero | tr '\\0' e >&2",
    )
    assert isinstance(out, str)
    stdout, stderr = out.split("--- stderr ---\n")
    # 30,000 a's + "\n" + "END\n" = 30,005 chars; 10,000 kept (7,500 head + 2,500 tail)
    assert "[... truncated 20005 chars ...]" in stdout
    assert stdout.rstrip("\n").endswith("END")  # the tail (where errors are) is kept
    assert max(len(run) for run in stdout.split("\n")) == 7_500
    assert stdout.count("\n" + "a" * 2_495 + "\nEND") == 1
    assert stderr.split("\n") == ["e" * 3_750, "[... truncated 4000 chars ...]", "e" * 1_250]


async def test_timeout_argument_is_bounded(call: Any, ctx: ToolContext) -> None:
    import jsonschema

    with pytest.raises(jsonschema.ValidationError):
        await call(run_bash, ctx, command="true", timeout=601)
    assert run_bash.safety == "dangerous"
    assert run_bash.deadline_s > bash_mod.BASH_MAX_TIMEOUT_S
    assert bash_mod.make_run_bash(deadline_s=900).deadline_s == 900


async def test_refuses_without_bubblewrap(
    reset_probe: None,
    call: Any,
    ctx: ToolContext,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_which = shutil.which

    def which(name: str, *args: Any, **kwargs: Any) -> str | None:
        return None if name == "bwrap" else real_which(name)

    monkeypatch.setattr(shutil, "which", which)
    assert sandbox_available() is False
    with pytest.raises(ToolFailure) as info:
        await call(run_bash, ctx, command="touch ran-unsandboxed")
    assert str(info.value).startswith(
        "run_bash needs bubblewrap: apt-get install bubblewrap; refusing to run unsandboxed"
    )
    assert not (workspace / "ran-unsandboxed").exists()


async def test_refuses_when_bwrap_cannot_create_namespaces(
    reset_probe: None,
    call: Any,
    ctx: ToolContext,
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    assert sandbox_available() is False
    with pytest.raises(ToolFailure, match=r"refusing to run unsandboxed.*No permissions"):
        await call(run_bash, ctx, command="touch ran-unsandboxed")
    assert not (workspace / "ran-unsandboxed").exists()
