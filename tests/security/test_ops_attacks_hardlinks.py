"""Issue #30 finding 7: a hard link defeats "GEODE's own files are refused".

``ln $GEODE_HOME/.env <workspace>/x`` gives GEODE's ``.env`` a name inside the workspace; no
path check sees it. Every file reader (read_file, grep, edit_file, send_file's reader,
attachments) must refuse a file whose inode is one of GEODE's own, whatever its name or link
count, checked on the opened fd so that a swap between a look and the read cannot pass.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from geode.tools.builtin import edit_file, grep, read_file, read_workspace_bytes
from geode.tools.errors import ToolFailure
from tests.security.conftest import SECRET, make_ctx

_libc = ctypes.CDLL(None, use_errno=True)
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _exchange(a: Path, b: Path) -> None:
    if _libc.renameat2(_AT_FDCWD, bytes(a), _AT_FDCWD, bytes(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A GEODE home as `geode serve` lays it out: the workspaces live under it."""
    home = tmp_path / "home"
    (home / "workspaces" / "telegram-1").mkdir(parents=True)
    (home / ".env").write_text(f"ANTHROPIC_API_KEY={SECRET}\n")
    (home / "geode.db").write_bytes(b"SQLite format 3\x00" + SECRET.encode())
    (home / "ledger").mkdir()
    (home / "ledger" / "2026-12-05.jsonl").write_text(f'{{"key": "{SECRET}"}}\n')
    return home


@pytest.fixture
def ws(home: Path) -> Path:
    return home / "workspaces" / "telegram-1"


def _ctx(ws: Path, home: Path, *extra: Path) -> Any:
    return make_ctx(ws, protected_paths=(home, *extra))


@pytest.mark.parametrize("target", [".env", "geode.db", "ledger/2026-12-05.jsonl"])
async def test_a_hard_link_to_geode_own_file_is_refused_by_every_reader(
    call: Any, home: Path, ws: Path, target: str
) -> None:
    os.link(home / target, ws / "x")
    ctx = _ctx(ws, home)
    for tool, args in (
        (read_file, {"path": "x"}),
        (grep, {"pattern": "sk-ant", "path": "x"}),
        (edit_file, {"path": "x", "old_string": "sk-ant", "new_string": "y"}),
    ):
        with pytest.raises(ToolFailure, match="GEODE's own files"):
            await call(tool, ctx, **args)
    with pytest.raises(ToolFailure, match="GEODE's own files"):
        read_workspace_bytes(ctx, "x", max_bytes=1 << 20)  # send_file's reader
    # a search over the whole workspace does not find it either
    assert await call(grep, ctx, pattern="sk-ant") == "(no matches)"
    assert SECRET in (home / target).read_text(errors="replace")  # untouched


async def test_refused_whatever_the_link_count(call: Any, home: Path, ws: Path) -> None:
    """The original name gone (link count back to 1): the inode is still GEODE's own as long
    as GEODE names it (here the Codex login, given as a protected file outside the home)."""
    auth = home.parent / "codex" / "auth.json"
    auth.parent.mkdir()
    auth.write_text('{"refresh_token": "rt-SECRET"}')
    os.link(auth, ws / "a")
    ctx = _ctx(ws, home, auth)
    with pytest.raises(ToolFailure, match="GEODE's own files"):
        await call(read_file, ctx, path="a")
    # a link in a subdirectory, under a harmless name, with three names in all
    (ws / "deep" / "er").mkdir(parents=True)
    os.link(home / ".env", ws / "deep" / "er" / "notes.txt")
    os.link(home / ".env", ws / "deep" / "notes2.md")
    assert os.stat(home / ".env").st_nlink == 3
    with pytest.raises(ToolFailure, match="GEODE's own files"):
        await call(read_file, ctx, path="deep/er/notes.txt")
    assert "sk-ant" not in str(await call(grep, ctx, pattern="ANTHROPIC", path="deep"))
    # the user's own files beside them stay readable
    (ws / "deep" / "mine.txt").write_text("mine\n")
    assert await call(read_file, ctx, path="deep/mine.txt") == "mine"


async def test_a_workspace_that_is_the_home_still_refuses_links(call: Any, tmp_path: Path
                                                                 ) -> None:
    """`geode repl` run in GEODE's home: its .env is refused under another name too, and
    the user's other files there are not mistaken for GEODE's."""
    home = tmp_path / "h"
    home.mkdir()
    (home / ".env").write_text(f"K={SECRET}\n")
    (home / "notes.txt").write_text("mine\n")
    os.link(home / ".env", home / "copy.txt")
    ctx = make_ctx(home, protected_paths=(home,))
    with pytest.raises(ToolFailure, match="GEODE's own files"):
        await call(read_file, ctx, path="copy.txt")
    assert await call(read_file, ctx, path="notes.txt") == "mine"


async def test_a_swap_to_a_hard_link_between_look_and_read_never_leaks(
    call: Any, home: Path, ws: Path
) -> None:
    """``x`` flips (atomically, renameat2 RENAME_EXCHANGE) between a harmless file and a
    hard link of GEODE's .env as fast as it can while the readers read it: the check is on
    the opened fd, so each read sees the harmless file or is refused, never the secret."""
    (ws / "x").write_text("harmless\n")
    os.link(home / ".env", ws / "x.link")
    stop = threading.Event()
    flips = [0]

    def swap() -> None:
        while not stop.is_set():
            _exchange(ws / "x", ws / "x.link")
            time.sleep(0)
            _exchange(ws / "x", ws / "x.link")
            flips[0] += 1

    t = threading.Thread(target=swap, daemon=True)
    t.start()
    ctx = _ctx(ws, home)
    seen = {"ok": 0, "refused": 0}
    try:
        for _ in range(300):
            for tool, args in ((read_file, {"path": "x"}),
                               (grep, {"pattern": ".", "path": "x"})):
                try:
                    out = str(await call(tool, ctx, **args))
                except ToolFailure as exc:
                    assert SECRET not in str(exc)
                    seen["refused"] += 1
                    continue
                assert SECRET not in out and "ANTHROPIC" not in out, out
                seen["ok"] += 1
            try:
                _, data = await asyncio.to_thread(read_workspace_bytes, ctx, "x",
                                                  max_bytes=1 << 20)
            except ToolFailure:
                seen["refused"] += 1
            else:
                assert SECRET.encode() not in data
                seen["ok"] += 1
    finally:
        stop.set()
        t.join()
    assert flips[0] > 50
    assert seen["refused"] and seen["ok"], seen  # the race really hit both sides


# -- attachments: the layer reads back what it saved, never a link planted at its name -------


class _Client:
    def __init__(self, content: bytes) -> None:
        self.content = content
        self.calls = 0

    async def download(self, attachment: Any, dest: Path, *, max_bytes: int) -> int:
        self.calls += 1
        dest.write_bytes(self.content)
        return len(self.content)


def _event() -> Any:
    from bots.events import Attachment, InboundEvent

    return InboundEvent(platform="telegram", workspace="1", channel="-1", thread_root="7",
                        message_id="7", sender="42", dedupe_key="k7", text="see",
                        attachments=(Attachment(name="a.log", mime="text/plain", size=3,
                                                ref="F1"),))


async def test_an_attachment_name_holding_a_hard_link_is_not_read(home: Path, ws: Path) -> None:
    """A link to GEODE's .env planted where an attachment will be saved (the name is
    predictable: ``<message id>-<n>-<name>``): it is not adopted as the download, nor given
    to the model inline; nor is .env truncated by the download."""
    from bots.attachments import receive_attachments
    from bots.store import AttachmentRecords
    from geode.settings import BindingSettings
    from geode.store import open_store

    folder = ws / "threads" / "7"
    folder.mkdir(parents=True)
    os.link(home / ".env", folder / "7-0-a.log")
    os.link(home / ".env", folder / "7-0-a.log.part")
    async with await open_store(f"sqlite:///{home.parent / 'attach.db'}") as store:
        got = await receive_attachments(
            _Client(b"abc"), _event(),
            binding=BindingSettings(platform="telegram", channel="-1"),  # type: ignore[arg-type]
            workspace=ws, folder=folder, records=AttachmentRecords(store=store), event_id=1,
            session_id="s1", protected=(home,))
    assert not any(SECRET in part for part in got.parts), got.parts
    assert any("not read" in part for part in got.parts), got.parts
    assert SECRET in (home / ".env").read_text()


def test_an_approval_request_never_shows_a_hard_linked_file(home: Path, ws: Path) -> None:
    """write_file / edit_file of a hard link to .env: the request's diff (posted in the
    thread) would have shown .env's lines as the file's current content."""
    from geode.executor.summary import describe_call, full_call

    (home / ".env").write_text("DB_PASSWORD=hunter2-not-a-known-shape\n")
    os.link(home / ".env", ws / "x")
    for args in ({"path": "x", "content": "new\n"},
                 {"path": "x", "old_string": "DB_PASSWORD", "new_string": "X"}):
        tool = "write_file" if "content" in args else "edit_file"
        assert "hunter2" not in describe_call(tool, args, ws)
        assert "hunter2" not in full_call(tool, args, ws)
    assert "not shown" in describe_call("write_file", {"path": "x", "content": "n\n"}, ws)


async def test_run_bash_masks_a_hard_link_to_geode_files(
        call: Any, home: Path, ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox masks GEODE's files by path; a hard link in the workspace has a path of
    its own: it is found by its inode and masked (bound over with /dev/null) too. Checked
    on the sandbox's command line (the real bubblewrap runs in tests/security under CI)."""
    from geode.tools.builtin import bash

    os.link(home / ".env", ws / "x")
    (ws / "sub").mkdir()
    os.link(home / "geode.db", ws / "sub" / "y")
    (ws / "mine.txt").write_text("mine\n")
    seen: list[list[str]] = []

    async def fake_run(argv: list[str], timeout_s: float, limits: Any) -> str:
        seen.append(argv)
        return "ran"

    monkeypatch.setattr(bash, "_probe", lambda: None)
    monkeypatch.setattr(bash.shutil, "which", lambda name: f"/nonexistent/{name}")
    monkeypatch.setattr(bash, "_run_sandboxed", fake_run)
    assert await call(bash.run_bash, _ctx(ws, home), command="cat x sub/y") == "ran"
    [argv] = seen
    masked = {argv[i + 2] for i, a in enumerate(argv[:-2])
              if a == "--ro-bind" and argv[i + 1] == "/dev/null"}
    assert {str(ws / "x"), str(ws / "sub" / "y")} <= masked
    assert str(ws / "mine.txt") not in masked
