"""SIGKILL `geode sessions rewind` at each point of a rewind, then restart: all or nothing.

Killed before its intent is written, nothing changed; killed after it (before any file, in
the middle of the files, or after the files but before the head moved), the next process
that touches the session (`geode sessions rewind` again, or the session's next turn)
finishes it: the files as before the rewound turns, the head moved once, one timeline
entry, one archive of the conversation. On SQLite and on PostgreSQL (the shared store of
several replicas)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from geode.rewind import BlobStore, finish_all_pending
from geode.store import open_store
from geode.store.rewinds import RewindStore
from geode.tools.builtin import sandbox_available
from tests.rewind._session import Recorded, env_for, next_request, record, tree

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="run_bash needs bubblewrap")

LAUNCHER = Path(__file__).with_name("_paused_rewind.py")


def _env(rec: Recorded) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEODE_")}
    return {**env, **env_for(rec.home, rec.store_url)}


async def _geode(rec: Recorded, *args: str, pause: tuple[str, Path] | None = None
                 ) -> asyncio.subprocess.Process:
    head = ["-m", "geode"] if pause is None else [str(LAUNCHER), pause[0], str(pause[1])]
    return await asyncio.create_subprocess_exec(
        sys.executable, *head, *args, cwd=rec.home, env=_env(rec),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def _killed_at(rec: Recorded, point: str, marker: Path) -> None:
    proc = await _geode(rec, "sessions", "rewind", rec.session_id, "--turns", "2", "--yes",
                        pause=(point, marker))
    loop = asyncio.get_running_loop()
    end = loop.time() + 60
    while not marker.exists():
        if proc.returncode is not None or loop.time() > end:
            _, err = await proc.communicate()
            raise AssertionError(f"never reached {point}: {err.decode()[-2000:]}")
        await asyncio.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    await proc.wait()


async def _records(rec: Recorded) -> tuple[dict | None, int, int]:
    """The pending intent, the session.rewound rows, the archive sessions."""
    store = await open_store(rec.store_url)
    try:
        pending = await RewindStore(store=store).pending(rec.session_id)
        rows = [r for r in await store.timeline.list(rec.session_id)
                if r.kind == "session.rewound"]
        archives = [s for s in await store.sessions.list(500)
                    if s.parent_session_id == rec.session_id]
        return pending, len(rows), len(archives)
    finally:
        await store.aclose()


@pytest.mark.parametrize(("store", "point"), [
    ("sqlite", "confirmed"), ("sqlite", "intent_written"), ("sqlite", "file_restored#2"),
    ("sqlite", "files_restored"), ("postgres", "file_restored#2")])
async def test_kill_during_a_rewind_then_restart(
    tmp_path: Path, request: pytest.FixtureRequest, store: str, point: str
) -> None:
    url = None if store == "sqlite" else str(request.getfixturevalue("pg_store_url"))
    rec = await record(tmp_path, store_url=url)
    await _killed_at(rec, point, tmp_path / "paused")
    pending, rewound, archives = await _records(rec)
    assert (rewound, archives) == (0, 0)  # the head never moved halfway
    if point == "confirmed":
        assert pending is None
        assert tree(rec.workspace) == rec.trees[3]  # nothing happened
        return
    assert pending is not None and pending["numbers"] == [2, 3]

    if store == "postgres":  # a process starting finishes every unfinished rewind
        db = await open_store(rec.store_url)
        try:
            [done_all] = await finish_all_pending(db, BlobStore(rec.home / "rewind"))
        finally:
            await db.aclose()
        assert done_all.turns == [2, 3] and done_all.session_id == rec.session_id
        assert tree(rec.workspace) == rec.trees[1]
        assert await _records(rec) == (None, 1, 1)
        return
    # the restart: asking again finishes the rewind that was asked, not a new one
    proc = await _geode(rec, "sessions", "rewind", rec.session_id, "--turns", "1", "--yes",
                        "--json")
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()[-2000:]
    done = json.loads(out)
    assert done["resumed"] is True and done["rewound"]["turns"] == [2, 3]
    assert tree(rec.workspace) == rec.trees[1]
    assert await _records(rec) == (None, 1, 1)


async def test_the_next_turn_finishes_a_rewind_a_dead_process_left(tmp_path: Path) -> None:
    rec = await record(tmp_path)
    await _killed_at(rec, "file_restored#1", tmp_path / "paused")
    seen = await next_request(rec, "still there?")
    assert [t for t in seen if t.startswith("user:")] == ["user:set things up",
                                                           "user:still there?"]
    assert tree(rec.workspace) == rec.trees[1]
    assert await _records(rec) == (None, 1, 1)


async def test_a_turn_that_saved_while_the_intent_was_pending_is_taken_back_too(
    tmp_path: Path,
) -> None:
    from geode.messages import Message
    from geode.rewind import finish_pending

    rec = await record(tmp_path)
    await _killed_at(rec, "intent_written", tmp_path / "paused")
    db = await open_store(rec.store_url)
    try:
        # a turn that was running already saves a checkpoint after the intent was written
        chain = db.checkpointer(rec.session_id)
        head = await chain.load()
        assert head is not None
        await chain.save(messages=[*head.messages, Message.user("late")], state=head.state,
                         status=head.status)
        done = await finish_pending(db, BlobStore(rec.home / "rewind"), rec.session_id)
        assert done is not None and done.applied
        now = await db.checkpointer(rec.session_id).load()
        assert now is not None
        assert [m.text for m in now.messages if m.role == "user" and m.text] == [
            "set things up"]
        [row] = [r for r in await db.timeline.list(rec.session_id)
                 if r.kind == "session.rewound"]
        assert row.payload["moved_since_planned"] is True
    finally:
        await db.aclose()
    assert tree(rec.workspace) == rec.trees[1]


async def test_geode_serve_finishes_a_rewind_a_dead_process_left_when_it_starts(
    tmp_path: Path,
) -> None:
    """A thread nobody writes to again is not left half rewound: `geode serve` finishes every
    unfinished rewind as it starts, before it serves anything."""
    from tests.scenarios._serve_proc import free_port

    rec = await record(tmp_path)
    await _killed_at(rec, "file_restored#2", tmp_path / "paused")
    assert (await _records(rec))[0] is not None
    env = {**_env(rec), "GEODE_HEALTH_PORT": str(free_port())}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "geode", "serve", "--demo", cwd=rec.home, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while await _records(rec) != (None, 1, 1):
            assert proc.returncode is None and loop.time() < end, "serve never finished it"
            await asyncio.sleep(0.2)
        assert tree(rec.workspace) == rec.trees[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert b"rewind.finished_at_start" in out
