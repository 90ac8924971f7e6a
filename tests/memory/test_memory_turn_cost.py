"""What memory adds to a turn's store work, counted (never timed), on SQLite and PostgreSQL:
a turn with memory on asks the store for the same transactions as a turn without it (the
memory read runs in the transaction that creates or finds the session's row, the use
counts in the turn's first checkpoint save) and runs two more statements, one SELECT and
one UPDATE of ``memory_entries``; for a thread's first turn and for a later one."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import event

from geode.daemon.port import SessionOverrides
from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.providers.scripted import ScriptedProvider
from geode.settings import load_settings
from geode.store import Store, open_store
from geode.store.memory import MemoryAudit, MemoryStore

AUDIT = MemoryAudit(by="cli", via="cli")


@dataclass
class Work:
    """The units of work a turn asked the store for (``run_read:<fn>``, ``run_write:<fn>``,
    ``later:<fn>``, ``read``, ``write``) and the statements each ran."""

    units: list[str] = field(default_factory=list)
    statements: list[tuple[str, str]] = field(default_factory=list)  # (unit, SQL)

    def memory_statements(self) -> list[tuple[str, str]]:
        return [(unit, sql.split()[0]) for unit, sql in self.statements
                if "memory_entries" in sql]


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", type(fn).__name__)


@contextmanager
def counted(store: Store) -> Iterator[Work]:
    """Every transaction the store is asked for inside, and the SQL run in each (both
    engines; a statement outside any of them is counted under ``other``)."""
    work = Work()
    here = threading.local()

    def inside(label: str, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        work.units.append(label)

        def run(conn: Any) -> Any:
            here.unit = label
            try:
                return fn(conn)
            finally:
                here.unit = None

        return run

    real = {n: getattr(store, n) for n in ("run_read", "run_write", "run_write_later",
                                           "read", "write")}

    async def run_read(fn: Any) -> Any:
        return await real["run_read"](inside(f"run_read:{_name(fn)}", fn))

    async def run_write(fn: Any) -> Any:
        return await real["run_write"](inside(f"run_write:{_name(fn)}", fn))

    async def run_write_later(fn: Any, *, on_error: Any) -> None:
        await real["run_write_later"](inside(f"later:{_name(fn)}", fn), on_error=on_error)

    def async_unit(name: str) -> Any:
        @asynccontextmanager
        async def unit() -> Any:
            work.units.append(name)
            async with real[name]() as conn:
                yield conn
        return unit

    def seen(_conn: Any, _cursor: Any, sql: str, *_a: Any) -> None:
        work.statements.append((getattr(here, "unit", None) or "other", sql))

    engines = [store.sync_engine, store.engine.sync_engine]
    patched = {"run_read": run_read, "run_write": run_write,
               "run_write_later": run_write_later, "read": async_unit("read"),
               "write": async_unit("write")}
    for n, f in patched.items():
        setattr(store, n, f)
    for e in engines:
        event.listen(e, "before_cursor_execute", seen)
    try:
        yield work
    finally:
        for e in engines:
            event.remove(e, "before_cursor_execute", seen)
        for n in patched:
            delattr(store, n)  # the class's methods again


async def _turns(tmp_path: Path, store_url: str, *, memory: bool) -> list[Work]:
    """Two turns of one channel thread (the first creates its session), counted."""
    tag = uuid.uuid4().hex[:8]
    home, ws = tmp_path / f"home-{tag}", tmp_path / f"ws-{tag}"
    home.mkdir()
    ws.mkdir()
    settings, secrets = load_settings(cwd=ws, env={"GEODE_HOME": str(home),
                                                   "GEODE_STORE__URL": store_url})
    channel = f"telegram:-{tag}"
    overrides = SessionOverrides(memory="channel" if memory else "off", spend_scope=channel)
    store = await open_store(store_url)
    works: list[Work] = []
    try:
        entries = MemoryStore(store=store)
        for i in range(6):  # a dozen: six about the person, six for the channel
            await entries.add(scope="user", owner="telegram:42", text=f"fact {i} {tag}",
                              audit=AUDIT)
            await entries.add(scope="channel", owner=channel, text=f"note {i} {tag}",
                              audit=AUDIT)
        async with Runtime(settings=settings, secrets=secrets, store=store) as runtime:
            for n in range(2):
                provider = ScriptedProvider(["ok"])
                ctx = SessionContext(mode="DAEMON", workspace=ws, session_id=f"s-{tag}",
                                     provider=provider, source="telegram", user="42",
                                     overrides=overrides, title="t")
                with counted(store) as work:
                    session = await runtime.open_session(ctx)
                    result = await session.run(f"hello {n}", turn_id=f"t-{n}")
                    await store.flush_later()
                assert result.ok, result
                assert (f"note 5 {tag}" in provider.calls[0].system) is memory
                works.append(work)
        if memory:  # each shown entry counted once a turn, committed with the checkpoint
            assert {e.use_count for e in await entries.list() if tag in e.text} == {2}
    finally:
        await store.aclose()
    return works


async def test_memory_adds_no_transaction_and_two_statements_to_a_turn(
        tmp_path: Path, store_url: str) -> None:
    off = await _turns(tmp_path, store_url, memory=False)
    on = await _turns(tmp_path, store_url, memory=True)
    for first, (without, with_) in enumerate(zip(off, on, strict=True)):
        new = first == 0
        # the same units of work, whatever the order the later ones rode in
        assert Counter(with_.units) == Counter(without.units), (new, with_.units)
        assert without.memory_statements() == []
        # one read in the transaction that creates (or finds) the session's row, one UPDATE
        # of the use counts in the turn's first checkpoint save
        assert with_.memory_statements() == [
            ("run_write:SessionStore.create.<locals>.insert", "SELECT"),
            ("run_write:SessionCheckpointer._save.<locals>.link", "UPDATE"),
        ], new
        assert len(with_.statements) == len(without.statements) + 2, new


async def test_a_session_opened_without_the_rows_read_reads_them_itself(
        tmp_path: Path, store_url: str) -> None:
    """A terminal continuing a session (its row must exist, no create): memory is read on
    its own then, and still counted with the turn's checkpoint."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    settings, secrets = load_settings(cwd=ws, env={"GEODE_HOME": str(home),
                                                   "GEODE_STORE__URL": store_url})
    tag = uuid.uuid4().hex[:8]
    store = await open_store(store_url)
    try:
        entries = MemoryStore(store=store)
        fact = await entries.add(scope="user", owner=f"cli:{tag}", text="likes tea",
                                 audit=AUDIT)
        sid = await store.sessions.create(mode="HEADLESS", model="scripted")
        provider = ScriptedProvider(["ok"])
        async with Runtime(settings=settings, secrets=secrets, store=store) as runtime:
            session = await runtime.open_session(SessionContext(
                mode="HEADLESS", workspace=ws, session_id=sid, provider=provider,
                source="cli", user=tag, overrides=SessionOverrides(memory="user")))
            assert (await session.run("hi")).ok
        assert f"[{fact.id}] likes tea" in provider.calls[0].system
        got = await entries.get(fact.id)
        assert got is not None and got.use_count == 1
    finally:
        await store.aclose()
