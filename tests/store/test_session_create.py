"""SessionStore.create_if_missing on both dialects: the insert itself tells whether the
session existed (one statement, no look-up before it), and nothing of an existing
session is touched."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event

from geode.store import Store
from geode.store.sessions import SessionExistsError, SessionNotFoundError


async def test_create_if_missing_creates_once_and_leaves_an_existing_session(
    store: Store,
) -> None:
    assert await store.sessions.create_if_missing("t:1", mode="DAEMON", model="m1",
                                                  title="first") is True
    assert await store.sessions.create_if_missing("t:1", mode="DAEMON", model="m2",
                                                  title="second") is False
    record = await store.sessions.get("t:1")
    assert record is not None and (record.model, record.title) == ("m1", "first")
    with pytest.raises(SessionExistsError):
        await store.sessions.create("t:1", mode="DAEMON", model="m")
    with pytest.raises(SessionNotFoundError):
        await store.sessions.create_if_missing("t:2", mode="DAEMON", model="m",
                                               parent_session_id="no-such-session")
    assert await store.sessions.exists("t:2") is False
    assert await store.sessions.create_if_missing("t:2", mode="DAEMON", model="m",
                                                  parent_session_id="t:1") is True


async def test_create_if_missing_is_one_statement(store: Store) -> None:
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(store.sync_engine, "before_cursor_execute", seen)
    try:
        await store.sessions.create_if_missing("t:1", mode="DAEMON", model="m")
        await store.sessions.create_if_missing("t:1", mode="DAEMON", model="m")
    finally:
        event.remove(store.sync_engine, "before_cursor_execute", seen)
    assert [s.split()[0] for s in statements] == ["INSERT", "INSERT"]
