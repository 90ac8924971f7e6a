"""Fixtures for the built-in tool tests: a workspace with escape bait, a tool caller that
validates arguments like the executor does, a loopback-only network guard, the sandbox and
X display requirements (skipped only outside CI)."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from geode.tools.base import ToolContext, ToolDef, ToolOutput
from tests._tk_entry import tk_python as tk_python_found

IN_CI = os.environ.get("CI") == "true"


def require(available: bool, what: str) -> None:
    """Skip when ``what`` is missing here; under CI=true a missing requirement fails."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is required under CI=true (see .ci/apt-packages.txt)")
    pytest.skip(f"{what} is not available on this machine")


async def _call(tool: ToolDef, ctx: ToolContext, **args: Any) -> ToolOutput:
    """Validate ``args`` against the tool's schema (as the executor does), then dispatch."""
    jsonschema.validate(args, tool.input_schema)
    return await tool.handler(ctx, **args)


Call = Callable[..., Awaitable[ToolOutput]]


@pytest.fixture
def call() -> Call:
    return _call


@pytest.fixture
def sandbox() -> None:
    """The bubblewrap sandbox run_bash needs."""
    from geode.tools.builtin.bash import sandbox_available

    require(sandbox_available(), "bubblewrap sandbox (apt-get install bubblewrap)")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace holding a secret; nothing may reach it."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("SECRET outside the workspace\n")
    return out


@pytest.fixture
def workspace(tmp_path: Path, outside: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "hello.txt").write_text("hello world\nsecond line\n")
    (ws / "sub" / "code.py").write_text("def f():\n    return 1  # SECRET-looking but inside\n")
    (ws / "link_out").symlink_to(outside / "secret.txt")  # file symlink leading out
    (ws / "dir_out").symlink_to(outside)  # directory symlink leading out
    (ws / "dangling").symlink_to(outside / "new.txt")  # dangling link leading out
    (ws / "link_in").symlink_to(ws / "hello.txt")  # a symlink that stays inside
    return ws


@pytest.fixture
def ctx(workspace: Path) -> ToolContext:
    return ToolContext(
        session_id="s-1", turn_id="t-1", call_id="c-1", workspace=workspace, mode="repl"
    )


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Fail any connect to a non-loopback address (asyncio connects via socket.connect)."""
    attempts: list[Any] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def check(address: Any) -> None:
        if isinstance(address, tuple) and address:
            try:
                ip = ipaddress.ip_address(str(address[0]).split("%", 1)[0])
            except ValueError:
                return
            if not ip.is_loopback:
                attempts.append(address)
                raise AssertionError(f"test tried to reach non-loopback address {address}")

    def connect(self: socket.socket, address: Any) -> None:
        check(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(address)
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    yield attempts
    assert attempts == [], f"non-loopback connects attempted: {attempts}"


@pytest.fixture(scope="module")
def x_display(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh Xvfb server (640x480) on a free display number; yields ":N"."""
    have = all(shutil.which(p) for p in ("Xvfb", "xdotool", "import"))
    require(have, "Xvfb, xdotool, ImageMagick's import (apt-get install xvfb xdotool imagemagick)")
    log = tmp_path_factory.mktemp("xvfb") / "xvfb.log"
    read_fd, write_fd = os.pipe()
    with log.open("wb") as log_fh:
        # -displayfd: the server picks a free display number and writes it to us
        proc = subprocess.Popen(
            # -noreset: keep state (the pointer) when the last client disconnects
            [
                "Xvfb",
                "-displayfd",
                str(write_fd),
                "-screen",
                "0",
                "640x480x24",
                "-noreset",
                "-nolisten",
                "tcp",
            ],
            pass_fds=(write_fd,),
            stdout=log_fh,
            stderr=log_fh,
            start_new_session=True,
        )
    os.close(write_fd)
    try:
        with os.fdopen(read_fd, "rb") as fh:
            number = fh.readline().strip().decode()
        if not number.isdigit():
            pytest.fail(f"Xvfb did not start: {log.read_text()}")
        yield f":{number}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def tk_python() -> str:
    """A Python interpreter that can import tkinter (this one, or Debian's python3-tk)."""
    python = tk_python_found()
    require(bool(python), "a Python with tkinter (apt-get install python3-tk)")
    return python
