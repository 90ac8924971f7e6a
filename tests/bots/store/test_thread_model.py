"""The thread's /model choice in ``channel_threads.model``: written and read on SQLite and
PostgreSQL, kept by /new, and a database of the previous bots revision (threads without the
column) keeps its threads, on their binding's model."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, text

from bots.events import InboundEvent
from bots.store.threads import ThreadSessions
from geode.store import Store, open_store


def _event(root: str) -> InboundEvent:
    return InboundEvent(platform="telegram", workspace="1", channel="-100", thread_root=root,
                        message_id=root, sender="7", dedupe_key=f"telegram:1:-100:{root}",
                        text="/model x")


async def test_a_threads_model_is_written_read_and_kept_by_new(store: Store) -> None:
    threads = ThreadSessions(store=store)
    ev = _event("500")
    assert (await threads.engage(ev)).model == ""
    await threads.set_model(ev, "openai:beta-2")
    state = await threads.get(ev.thread_key)
    assert state is not None and state.model == "openai:beta-2"
    await threads.start_new(ev)  # a new session; the thread's pick stays
    state = await threads.get(ev.thread_key)
    assert state is not None and (state.generation, state.model) == (1, "openai:beta-2")
    other = _event("501")
    await threads.set_model(other, "openai:alpha-1")  # a thread first seen by /model
    assert (await threads.get(other.thread_key)).model == "openai:alpha-1"  # type: ignore[union-attr]
    assert (await threads.get(ev.thread_key)).model == "openai:beta-2"  # type: ignore[union-attr]


async def test_a_database_before_the_column_keeps_its_threads(tmp_path: Path) -> None:
    from alembic import command

    from geode.store.schema import _alembic_config

    (tmp_path / "home").mkdir()
    url = f"sqlite:///{tmp_path / 'home' / 'geode.db'}"
    await (await open_store(url)).aclose()
    engine = create_engine(url)
    with engine.begin() as conn:  # back to the revision before the column, with a thread in it
        command.downgrade(_alembic_config(conn), "bots_0002")
        conn.execute(text(
            "INSERT INTO channel_threads (thread_key, platform, workspace, channel, thread_root,"
            " session_id, generation, engaged, created_at, updated_at) VALUES ('k', 'telegram',"
            " '1', '-100', '9', 'k', 0, 1, '2026-12-01 00:00:00', '2026-12-01 00:00:00')"))
        assert "model" not in {r[1] for r in conn.execute(text(
            "PRAGMA table_info(channel_threads)"))}
    engine.dispose()
    store = await open_store(url)  # migrates it
    try:
        state = await ThreadSessions(store=store).get("k")
        assert state is not None and (state.session_id, state.model) == ("k", "")
    finally:
        await store.aclose()
