"""``run_bash``: a shell command, only ever inside a bubblewrap sandbox.

The sandbox (what it isolates, its limits) is described and built in
:mod:`geode.tools.builtin._sandbox`. If no working sandbox exists the tool refuses: it never
runs a command unsandboxed. On timeout or cancellation the whole sandbox is killed.

Its dependencies (``ctx.deps``, :class:`~geode.tools.deps.ToolDeps`): ``bash_network`` (only
literal ``True`` enables the network), ``bash_ro_paths`` (extra host paths to bind read-only,
e.g. a toolchain outside /usr), ``sandbox_limits`` (a :class:`SandboxLimits`),
``protected_paths`` (GEODE's home and store files, masked in the sandbox).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import structlog
from pydantic import Field

from geode.tools.base import ToolContext, ToolDef, tool
from geode.tools.builtin import _sandbox
from geode.tools.builtin._sandbox import SYSTEM_PATHS, SandboxLimits
from geode.tools.builtin._workspace import (
    own_inodes,
    own_links,
    protected_paths,
    truncate,
    workspace_root,
)
from geode.tools.errors import ToolFailure

__all__ = [
    "BASH_DEFAULT_TIMEOUT_S",
    "BASH_MAX_TIMEOUT_S",
    "NO_SANDBOX_MESSAGE",
    "SandboxLimits",
    "bwrap_argv",
    "make_run_bash",
    "run_bash",
    "sandbox_available",
]

log = structlog.get_logger(__name__)

BASH_DEFAULT_TIMEOUT_S = 30.0
BASH_MAX_TIMEOUT_S = 600.0
STDOUT_CAP_CHARS = 10_000
STDERR_CAP_CHARS = 5_000
#: bytes held in memory from the start and from the end of each stream; the middle is counted
_KEEP_BYTES = 64 * 1024
#: how long to wait for pipes to close after the sandbox was killed
_DRAIN_GRACE_S = 5.0

NO_SANDBOX_MESSAGE = (
    "run_bash needs bubblewrap: apt-get install bubblewrap; refusing to run unsandboxed"
)

#: how often the process count of a running sandbox is checked
_COUNT_EVERY_S = 0.2


def bwrap_argv(
    bwrap: str,
    workspace: Path,
    argv: Sequence[str],
    *,
    network: bool = False,
    ro_paths: Sequence[str] = (),
    limits: SandboxLimits | None = None,
    protected: Sequence[Path] = (),
) -> list[str]:
    """The full bwrap command line (see :func:`geode.tools.builtin._sandbox.bwrap_argv`)."""
    return _sandbox.bwrap_argv(
        bwrap,
        workspace,
        argv,
        network=network,
        ro_paths=ro_paths,
        limits=limits,
        protected=protected,
    )


def _probe() -> str | None:
    return _sandbox.probe()


def sandbox_available() -> bool:
    """Whether bubblewrap can build the sandbox on this machine (probed once, then cached)."""
    return _sandbox.probe() is None


def _reset_probe() -> None:
    """Forget the cached probe (tests, or after installing bubblewrap)."""
    _sandbox.reset_probe()


@dataclass
class _Captured:
    """One output stream: its first and last bytes, and how many were dropped between."""

    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    skipped: int = 0

    def add(self, chunk: bytes) -> None:
        room = _KEEP_BYTES - len(self.head)
        self.head += chunk[:room]
        self.tail += chunk[room:] if room > 0 else chunk
        if len(self.tail) > _KEEP_BYTES:
            cut = len(self.tail) - _KEEP_BYTES
            self.skipped += cut
            del self.tail[:cut]

    def render(self, cap: int) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if not self.skipped:
            return truncate(head + tail, cap, keep_tail=cap // 4)
        keep_tail = cap // 4
        shown_head, shown_tail = head[: cap - keep_tail], tail[len(tail) - keep_tail :]
        dropped = len(head) - len(shown_head) + self.skipped + len(tail) - len(shown_tail)
        return f"{shown_head}\n[... truncated {dropped} chars ...]\n{shown_tail}"

    def __bool__(self) -> bool:
        return bool(self.head)


async def _drain(stream: asyncio.StreamReader | None) -> _Captured:
    """Read a stream to EOF holding at most 2 x _KEEP_BYTES of it."""
    captured = _Captured()
    if stream is not None:
        while chunk := await stream.read(65536):
            captured.add(chunk)
    return captured


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    # bwrap is the group leader (start_new_session); its pid-namespace init dies with it
    # (--die-with-parent), which takes every process of the sandbox down with it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def _finish_drains(tasks: Sequence[asyncio.Task[_Captured]]) -> list[_Captured]:
    done, pending = await asyncio.wait(tasks, timeout=_DRAIN_GRACE_S)
    for task in pending:
        task.cancel()
    return [t.result() if t in done else _Captured() for t in tasks]


def _format(code: int | None, out: _Captured, err: _Captured) -> str:
    if code is None:
        status = "no exit status"
    elif code < 0:
        status = f"killed by signal {-code}"
    else:
        status = f"exit code {code}"
    parts = [status]
    # one trailing newline of each stream is dropped: the sections are joined by newlines
    if out:
        parts.append("--- stdout ---\n" + out.render(STDOUT_CAP_CHARS).removesuffix("\n"))
    if err:
        parts.append("--- stderr ---\n" + err.render(STDERR_CAP_CHARS).removesuffix("\n"))
    if len(parts) == 1:
        parts.append("(no output)")
    return "\n".join(parts)


async def _watch_processes(proc: asyncio.subprocess.Process, limit: int) -> int:
    """Return the process count once the sandbox has more than ``limit``; run until cancelled."""
    while True:
        await asyncio.sleep(_COUNT_EVERY_S)
        try:
            count = await asyncio.to_thread(_sandbox.count_sandbox_processes, proc.pid)
        except Exception:  # a /proc oddity must not end the call: the timeout still holds
            log.warning("run_bash.count_failed", exc_info=True)
            continue
        if count is not None and count > limit:
            return count


async def _run_sandboxed(argv: list[str], timeout_s: float, limits: SandboxLimits) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        # bwrap's own processes (its init is PID 1 of the sandbox, /proc/1/environ) carry
        # this environment: empty, so no secret of ours is in any process inside
        env={},
        close_fds=True,
    )
    drains = [
        asyncio.create_task(_drain(proc.stdout)),
        asyncio.create_task(_drain(proc.stderr)),
    ]
    watch = asyncio.create_task(_watch_processes(proc, limits.max_processes))
    waiter = asyncio.create_task(proc.wait())
    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.wait({waiter, watch}, return_when=asyncio.FIRST_COMPLETED)
    except TimeoutError:
        _kill_group(proc)
        await proc.wait()
        out, err = await _finish_drains(drains)
        log.info("run_bash.timeout", timeout_s=timeout_s)
        raise ToolFailure(
            f"command timed out after {timeout_s:g} s; the sandbox and every process in it "
            f"were killed. Partial output:\n{_format(None, out, err)}"
        ) from None
    except BaseException:
        # cancelled (executor deadline, shutdown): the command must not outlive the call
        _kill_group(proc)
        for task in drains:
            task.cancel()
        raise
    finally:
        watch.cancel()
        waiter.cancel()
    if not waiter.done() or waiter.cancelled():
        count = watch.result()
        _kill_group(proc)
        await proc.wait()
        out, err = await _finish_drains(drains)
        log.info("run_bash.too_many_processes", count=count, limit=limits.max_processes)
        raise ToolFailure(
            f"the command started more than {limits.max_processes} processes ({count}); the "
            f"sandbox and every process in it were killed. Partial output:\n"
            f"{_format(None, out, err)}"
        )
    out, err = await _finish_drains(drains)
    return _format(proc.returncode, out, err)


def _ro_paths(ctx: ToolContext) -> list[str]:
    value: Any = ctx.deps.bash_ro_paths
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ToolFailure("bash_ro_paths must be a list of absolute paths")
    paths = [str(p) for p in value]
    for p in paths:
        if not os.path.isabs(p) or "\x00" in p:
            raise ToolFailure(f"bash_ro_paths entry {p!r} is not an absolute path")
    return paths


def make_run_bash(*, deadline_s: float = BASH_MAX_TIMEOUT_S + 60.0) -> ToolDef:
    """Build the ``run_bash`` tool; ``deadline_s`` is the executor's hard deadline for a call
    (keep it above ``BASH_MAX_TIMEOUT_S`` so the tool's own timeout fires first)."""

    def keys(args: dict[str, Any], ctx: ToolContext) -> list[str]:
        # the command may touch anything in the workspace
        return [f"dir:{os.path.realpath(ctx.workspace)}"]

    @tool(name="run_bash", safety="dangerous", resource_keys=keys, deadline_s=deadline_s)
    async def run_bash(
        ctx: ToolContext,
        command: Annotated[str, Field(min_length=1, description="bash command line")],
        # the model-facing argument name; it is a value for the sandbox, not an asyncio timeout
        timeout: Annotated[  # noqa: ASYNC109
            float, Field(gt=0, le=BASH_MAX_TIMEOUT_S, description="seconds before it is killed")
        ] = BASH_DEFAULT_TIMEOUT_S,
    ) -> str:
        """Run a bash command in a sandbox, with the workspace as working directory.

        The workspace is the only writable place (plus a private /tmp); there is no network;
        processes left in the background end with the command. Output is capped (stdout
        10,000 chars, stderr 5,000).
        """
        timeout = min(float(timeout), BASH_MAX_TIMEOUT_S)
        reason = await asyncio.to_thread(_probe)
        bwrap = shutil.which("bwrap")
        if reason is not None or bwrap is None:
            log.warning("run_bash.no_sandbox", reason=reason)
            raise ToolFailure(f"{NO_SANDBOX_MESSAGE} ({reason})")
        root = workspace_root(ctx)
        if root == Path("/") or any(Path(p).is_relative_to(root) for p in SYSTEM_PATHS):
            raise ToolFailure(f"refused: the workspace {root} would expose system directories")
        protected = protected_paths(ctx, root)
        # GEODE's own files under another name in the workspace (hard links: the sandbox
        # masks GEODE's files by path, a link has a path of its own) are masked too (#30)
        own = await asyncio.to_thread(own_inodes, ctx.deps.protected_paths, root)
        protected += await asyncio.to_thread(own_links, root, own)
        network = ctx.deps.bash_network is True
        limits = ctx.deps.sandbox_limits
        bash = shutil.which("bash") or "/bin/bash"
        argv = bwrap_argv(
            bwrap,
            root,
            [bash, "-c", command],
            network=network,
            ro_paths=_ro_paths(ctx),
            limits=limits,
            protected=protected,
        )
        return await _run_sandboxed(argv, timeout, limits)

    return run_bash


run_bash = make_run_bash()
