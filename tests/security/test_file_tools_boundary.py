"""The file tools against the attacks of issue #16 (classes 2, 4, 5, 9): a concurrent
symlink swap never leads a read or a write outside; GEODE's home is unreachable wherever the
workspace is; non-regular files are refused; a catastrophic regex cannot freeze the loop."""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from geode.tools.builtin import edit_file, glob, grep, list_dir, read_file, write_file
from geode.tools.errors import ToolFailure
from tests.security.conftest import SECRET, make_ctx

ROUNDS = 150


_libc = ctypes.CDLL(None, use_errno=True)
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _exchange(a: Path, b: Path) -> None:
    """renameat2(RENAME_EXCHANGE): ``a`` and ``b`` swap atomically (neither is ever missing)."""
    if _libc.renameat2(_AT_FDCWD, bytes(a), _AT_FDCWD, bytes(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class Swapper(threading.Thread):
    """Flips ``ws/d`` between a real directory and a symlink to ``outside`` as fast as it can."""

    def __init__(self, ws: Path, outside: Path) -> None:
        super().__init__(daemon=True)
        self.ws, self.outside = ws, outside
        self.stop = threading.Event()
        self.flips = 0

    def run(self) -> None:
        d, link = self.ws / "d", self.ws / "d.link"
        link.symlink_to(self.outside)
        while not self.stop.is_set():
            _exchange(d, link)  # d -> outside
            time.sleep(0)
            _exchange(d, link)  # d is the directory again
            self.flips += 1


@pytest.fixture
def swapper(workspace: Path, outside: Path) -> Any:
    (workspace / "d").mkdir()
    (workspace / "d" / "secret.txt").write_text("inside\n")
    (workspace / "d" / "edit.txt").write_text("inside\n")
    (outside / "edit.txt").write_text(f"OUTSIDE {SECRET}\n")
    sw = Swapper(workspace, outside)
    sw.start()
    yield sw
    sw.stop.set()
    sw.join()


async def test_a_concurrent_symlink_swap_never_leads_outside(
    call: Any, workspace: Path, outside: Path, swapper: Swapper
) -> None:
    ctx = make_ctx(workspace)
    before = sorted(p.name for p in outside.iterdir())
    leaked: list[str] = []
    for i in range(ROUNDS):
        for tool, args in (
            (read_file, {"path": "d/secret.txt"}),
            (grep, {"pattern": "OUTSIDE", "path": "d"}),
            (list_dir, {"path": "d"}),
            (write_file, {"path": f"d/new-{i}.txt", "content": "x"}),
            (edit_file, {"path": "d/edit.txt", "old_string": "inside", "new_string": "INSIDE"}),
            (edit_file, {"path": "d/edit.txt", "old_string": "INSIDE", "new_string": "inside"}),
        ):
            try:
                out = await call(tool, ctx, **args)
            except (ToolFailure, OSError):
                continue
            if SECRET in str(out) or "OUTSIDE" in str(out):
                leaked.append(f"{tool.name}: {out}")
    assert swapper.flips > 100  # the race really ran
    assert leaked == []
    # nothing created outside: no new file, no temp file of an atomic write
    assert sorted(p.name for p in outside.iterdir()) == before
    assert (outside / "edit.txt").read_text() == f"OUTSIDE {SECRET}\n"
    assert (outside / "secret.txt").read_text() == f"OUTSIDE {SECRET}\n"


@pytest.fixture
def home_in_ws(workspace: Path) -> Path:
    home = workspace / ".geode"
    home.mkdir()
    (home / ".env").write_text(f"ANTHROPIC_API_KEY={SECRET}\n")
    (home / "config.toml").write_text("[model]\ndefault = 'x'\n")
    return home


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        (read_file, {"path": ".geode/.env"}),
        (read_file, {"path": "./sub/../.geode/.env"}),
        (read_file, {"path": "to_env"}),
        (list_dir, {"path": ".geode"}),
        (glob, {"pattern": "*", "path": ".geode"}),
        (grep, {"pattern": "API", "path": ".geode"}),
        (write_file, {"path": ".geode/config.toml", "content": "[[hooks.Stop]]\n"}),
        (write_file, {"path": ".geode/new.toml", "content": "x"}),
        (edit_file, {"path": ".geode/config.toml", "old_string": "x", "new_string": "y"}),
    ],
)
async def test_geode_home_inside_the_workspace_is_unreachable(
    call: Any, workspace: Path, home_in_ws: Path, tool: Any, args: dict[str, Any]
) -> None:
    (workspace / "sub").mkdir()
    (workspace / "to_env").symlink_to(home_in_ws / ".env")
    ctx = make_ctx(workspace, protected_paths=(home_in_ws,))
    with pytest.raises(ToolFailure, match=r"refused.*GEODE's own files"):
        await call(tool, ctx, **args)
    assert (home_in_ws / "config.toml").read_text() == "[model]\ndefault = 'x'\n"
    assert sorted(p.name for p in home_in_ws.iterdir()) == [".env", "config.toml"]


async def test_searches_over_the_workspace_skip_geode_home(
    call: Any, workspace: Path, home_in_ws: Path
) -> None:
    ctx = make_ctx(workspace, protected_paths=(home_in_ws,))
    found = await call(grep, ctx, pattern="API_KEY|model")
    assert found == "(no matches)"
    listed = await call(glob, ctx, pattern="**/*")
    assert ".env" not in str(listed) and "config.toml" not in str(listed)


async def test_a_fifo_is_refused_not_waited_on(call: Any, workspace: Path) -> None:
    fifo = workspace / "pipe"
    os.mkfifo(fifo)
    ctx = make_ctx(workspace)
    try:
        with pytest.raises(ToolFailure, match="not a regular file"):
            await asyncio.wait_for(call(read_file, ctx, path="pipe"), 10)
        with pytest.raises(ToolFailure, match="not a regular file"):
            await asyncio.wait_for(
                call(edit_file, ctx, path="pipe", old_string="a", new_string="b"), 10
            )
        # grep over the directory skips it instead of hanging
        assert await asyncio.wait_for(call(grep, ctx, pattern="hello"), 10) == (
            "hello.txt:1:hello"
        )
    finally:
        # on the old code a reader is stuck in open(): a writer's open/close releases it
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


async def test_catastrophic_regex_keeps_the_loop_responsive(call: Any, workspace: Path) -> None:
    (workspace / "x.txt").write_text(("x" * 27 + "\n") * 50 + "xxy\n")
    ctx = make_ctx(workspace)
    loop = asyncio.get_running_loop()
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = loop.time()
        while not done.is_set():
            await asyncio.sleep(0.05)
            now = loop.time()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    try:
        # the tool's deadline: it must end well within it (the old engine took minutes)
        out = await asyncio.wait_for(call(grep, ctx, pattern="(x|x)*y"), grep.deadline_s)
    finally:
        done.set()
        await tick
    assert out == "x.txt:51:xxy"
    # a concurrent coroutine (the health endpoint, other chats) was served all along
    assert gaps and max(gaps) < 1.0, max(gaps)


async def test_grep_stops_its_thread_when_cancelled(
    call: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geode.tools.builtin import files as files_mod

    started = threading.Event()
    stopped = threading.Event()
    real = files_mod._grep_fd

    def slow(fd: int, shown: str, regex: Any, cap: int, tally: Any, stop: Any) -> None:
        started.set()
        # stands for a long search: ends only when told to stop (or after 30 s)
        stop.wait(30)
        if stop.is_set():
            stopped.set()
        real(fd, shown, regex, cap, tally, stop)

    monkeypatch.setattr(files_mod, "_grep_fd", slow)
    ctx = make_ctx(workspace)
    task = asyncio.create_task(call(grep, ctx, pattern="hello"))
    await asyncio.to_thread(started.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(stopped.wait, 10)


async def test_workspace_that_is_geode_home_keeps_its_files_out_of_reach(
    call: Any, workspace: Path
) -> None:
    (workspace / ".env").write_text(f"ANTHROPIC_API_KEY={SECRET}\n")
    (workspace / "config.toml").write_text("[model]\n")
    ctx = make_ctx(workspace, protected_paths=(workspace,))
    for path in (".env", "config.toml", "ledger/x.jsonl"):
        with pytest.raises(ToolFailure, match="GEODE's own files"):
            await call(write_file, ctx, path=path, content="[[hooks.Stop]]")
    with pytest.raises(ToolFailure, match="GEODE's own files"):
        await call(read_file, ctx, path=".env")
    # the user's own files there are still theirs
    assert await call(write_file, ctx, path="notes.txt", content="hi") == (
        "created notes.txt (2 bytes)"
    )
    assert (workspace / "config.toml").read_text() == "[model]\n"
