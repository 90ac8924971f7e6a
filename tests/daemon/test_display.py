"""The X display of computer-use bindings: `geode serve` starts and supervises its own Xvfb
(restarted on the same display number after it dies, stopped at shutdown, none left behind
after SIGTERM or kill -9), or uses the configured one; the lock gives it to one turn at a
time and is released however the turn ends."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from geode.daemon.display import ComputerDisplay, XvfbSupervisor
from tests.daemon.conftest import DaemonMaker, start_serve

CI = os.environ.get("CI") == "true"
BINDING = '[[bindings]]\nplatform = "telegram"\nchannel = "-100"\ncomputer_use = true\n'


@pytest.fixture(autouse=True)
def _x_tools() -> None:
    if not all(shutil.which(p) for p in ("Xvfb", "xdotool")):
        if CI:
            pytest.fail("Xvfb and xdotool are required under CI=true (.ci/apt-packages.txt)")
        pytest.skip("needs Xvfb and xdotool")


def _answers(display: str) -> bool:
    done = subprocess.run(["xdotool", "getdisplaygeometry"], capture_output=True, timeout=10,
                          env={"DISPLAY": display, "PATH": os.environ["PATH"]}, check=False)
    return done.returncode == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie no one reaped yet is dead too
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0] != "Z"


def _xvfb_child(parent: int) -> int:
    kids = [int(p) for task in Path(f"/proc/{parent}/task").iterdir()
            for p in (task / "children").read_text().split()]
    xvfb = [k for k in kids if Path(f"/proc/{k}/cmdline").read_bytes().split(b"\0")[0]
            .endswith(b"Xvfb")]
    assert len(xvfb) == 1, kids
    return xvfb[0]


async def _until(cond, what: str, within: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(within):
        while not cond():
            await asyncio.sleep(0.02)


async def test_xvfb_is_restarted_on_its_display_after_it_dies_and_stopped_at_the_end() -> None:
    sup = XvfbSupervisor(screen="320x200x24", min_backoff_s=0.05)
    display = await sup.start()
    try:
        assert re.fullmatch(r":\d+", display) and _answers(display)
        first = sup.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await _until(lambda: sup.pid not in (None, first), "restart")
        assert sup.restarts == 1 and sup.display == display  # the sessions' DISPLAY holds
        assert _answers(display)
        second = sup.pid
    finally:
        await sup.stop()
    assert second is not None and not _alive(second) and not _alive(first)
    assert sup.pid is None


async def test_a_configured_display_is_used_and_no_xvfb_started(
    make_daemon: DaemonMaker, home: Path
) -> None:
    (home / "config.toml").write_text(BINDING)
    d = await make_daemon(["hi"], env={"GEODE_COMPUTER__DISPLAY": ":31999"})
    assert d.computer is not None and d.computer.name == ":31999"
    assert d.computer.supervisor is None
    other = home / "other"
    other.mkdir()
    (other / "config.toml").write_text(BINDING)
    d2 = await make_daemon(["hi"], home_dir=other, env={"DISPLAY": ":31998"})
    assert d2.computer is not None and d2.computer.name == ":31998"  # X's own variable


async def test_no_display_without_a_computer_use_binding(make_daemon: DaemonMaker) -> None:
    d = await make_daemon(["hi"])
    assert d.computer is None


async def test_the_display_lock_serves_one_turn_at_a_time_and_frees_on_cancel() -> None:
    display = ComputerDisplay(name=":31997")
    order: list[str] = []
    lines: list[str] = []
    async with display.turn("thread-a") as name:
        assert name == ":31997" and display.holder == "thread-a"

        async def second() -> None:
            async with display.turn("thread-b", on_wait=lines.append):
                order.append("b")

        waiter = asyncio.create_task(second())
        await _until(lambda: bool(lines), "waiting")
        assert lines[0] == ("waiting for the computer display :31997: another thread's "
                            "computer-use turn is using it") and order == []
        waiter.cancel()  # /stop of the waiting turn
        with pytest.raises(asyncio.CancelledError):
            await waiter
        late = asyncio.create_task(second())
        await _until(lambda: len(lines) >= 3, "waiting again")
    await late
    assert order == ["b"] and not display.busy and display.holder == ""
    with pytest.raises(RuntimeError):  # an error in the turn releases it too
        async with display.turn("thread-c"):
            raise RuntimeError("boom")
    assert not display.busy


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
async def test_serve_leaves_no_xvfb_behind(home: Path, sig: int) -> None:
    (home / "config.toml").write_text(BINDING)
    serve = await asyncio.to_thread(start_serve, home, args=("--demo",), DISPLAY="")
    try:
        found = re.search(r"display (:\d+) for computer use \(Xvfb started and supervised",
                          serve.output())
        assert found, serve.output()
        display = found.group(1)
        assert _answers(display)
        pid = _xvfb_child(serve.proc.pid)
        assert _alive(pid)
    finally:
        code = await asyncio.to_thread(serve.stop, sig)
    if sig == signal.SIGTERM:
        assert code == 0, serve.output()
        assert not _alive(pid)  # stopped before serve exited
    else:  # killed -9: the kernel ends it with its parent (setpriv --pdeathsig)
        await _until(lambda: not _alive(pid), "xvfb gone")
