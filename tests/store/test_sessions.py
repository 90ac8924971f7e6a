"""Session rows, lineage and the status automaton."""

from __future__ import annotations

import pytest

from geode.store import (
    IllegalTransitionError,
    SessionExistsError,
    SessionNotFoundError,
    Store,
)


async def test_create_get_exists_and_list(store: Store) -> None:
    a = await store.sessions.create(
        mode="daemon", model="claude-x", title="first", metadata={"platform": "slack"}
    )
    b = await store.sessions.create("fixed-id", mode="repl", model="gpt-y")
    assert b == "fixed-id"
    assert len(a) == 32 and a != b

    rec = await store.sessions.get(a)
    assert rec is not None
    assert (rec.mode, rec.model, rec.title, rec.status) == ("daemon", "claude-x", "first", "active")
    assert rec.metadata == {"platform": "slack"}
    assert rec.created_at.tzinfo is not None
    assert await store.sessions.exists(b)
    assert not await store.sessions.exists("nope")
    assert await store.sessions.get("nope") is None

    await store.sessions.set_status(a, "paused")  # touches updated_at: a is now newest
    listed = await store.sessions.list(10)
    assert [s.id for s in listed] == [a, b]
    assert [s.id for s in await store.sessions.list(1)] == [a]
    assert [s.id for s in await store.sessions.list(10, status="active")] == [b]


async def test_duplicate_id_is_refused(store: Store) -> None:
    await store.sessions.create("dup", mode="headless", model="m")
    with pytest.raises(SessionExistsError, match="dup"):
        await store.sessions.create("dup", mode="headless", model="m")


async def test_lineage_links_a_new_session_to_the_old_one(store: Store) -> None:
    old = await store.sessions.create(mode="daemon", model="m")
    new = await store.sessions.create(mode="daemon", model="m", parent_session_id=old)
    rec = await store.sessions.get(new)
    assert rec is not None and rec.parent_session_id == old
    with pytest.raises(SessionNotFoundError, match="missing-parent"):
        await store.sessions.create(mode="daemon", model="m", parent_session_id="missing-parent")


async def test_ensure_gets_or_creates_once(store: Store) -> None:
    first = await store.sessions.ensure("slack:T1:C1:123.4", mode="daemon", model="m")
    second = await store.sessions.ensure("slack:T1:C1:123.4", mode="other", model="other")
    assert first.id == second.id == "slack:T1:C1:123.4"
    assert second.mode == "daemon"
    assert await store.sessions.count() == 1


@pytest.mark.parametrize(
    "path",
    [
        ["paused", "active", "completed"],
        ["paused", "error"],
        ["active", "active", "paused", "paused", "completed", "completed"],
    ],
)
async def test_legal_transitions(store: Store, path: list[str]) -> None:
    sid = await store.sessions.create(mode="headless", model="m")
    for status in path:
        await store.sessions.set_status(sid, status)
    rec = await store.sessions.get(sid)
    assert rec is not None and rec.status == path[-1]


@pytest.mark.parametrize(
    ("terminal", "target"),
    [
        ("completed", "active"),
        ("completed", "paused"),
        ("completed", "error"),
        ("error", "completed"),
        ("error", "active"),
    ],
)
async def test_terminal_status_is_left_only_by_reopen(
    store: Store, terminal: str, target: str
) -> None:
    sid = await store.sessions.create(mode="headless", model="m")
    await store.sessions.set_status(sid, terminal)
    with pytest.raises(IllegalTransitionError) as info:
        await store.sessions.set_status(sid, target)
    assert (info.value.current, info.value.target) == (terminal, target)
    assert "reopen" in str(info.value)
    rec = await store.sessions.get(sid)
    assert rec is not None and rec.status == terminal  # refused: unchanged

    await store.sessions.reopen(sid)
    await store.sessions.set_status(sid, target)
    rec = await store.sessions.get(sid)
    assert rec is not None and rec.status == target


async def test_unknown_status_and_unknown_session(store: Store) -> None:
    sid = await store.sessions.create(mode="headless", model="m")
    with pytest.raises(IllegalTransitionError):
        await store.sessions.set_status(sid, "running")
    with pytest.raises(SessionNotFoundError):
        await store.sessions.set_status("ghost", "paused")
    with pytest.raises(SessionNotFoundError):
        await store.sessions.reopen("ghost")


async def test_latest_in_a_workspace_and_the_first_title(store: Store) -> None:
    """`geode run -c` and the sessions list's title (issue #23 item 4), on both backends."""
    s = store.sessions
    older = await s.create(mode="HEADLESS", model="m",
                           metadata={"source": "cli", "workspace": "/w/a"})
    await s.create(mode="HEADLESS", model="m", metadata={"source": "cli", "workspace": "/w/b"})
    await s.create(mode="DAEMON", model="m",
                   metadata={"source": "telegram", "workspace": "/w/a"})
    newer = await s.create(mode="REPL", model="m",
                           metadata={"source": "cli", "workspace": "/w/a"})
    found = await s.latest_in("/w/a", source="cli")
    assert found is not None and found.id == newer
    assert await s.latest_in("/w/none", source="cli") is None
    await s.title_if_untitled(older, "first prompt")
    await s.title_if_untitled(older, "second prompt")
    got = await s.get(older)
    assert got is not None and got.title == "first prompt"
