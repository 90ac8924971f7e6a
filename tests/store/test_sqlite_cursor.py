"""SQLite's repeated statements on the DBAPI cursor (``geode.store._sqlite_cursor``): the same rows,
counts, keys and errors as SQLAlchemy's own execution, and SQLAlchemy's way for everything
the short way does not cover."""

from __future__ import annotations

import gc
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    bindparam,
    cast,
    create_engine,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, StatementError

from geode.store import _sqlite_cursor as _fast
from geode.store._sqlite_cursor import FastConnection, FastResult

md = MetaData()
T = Table(
    "t", md,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("key", String(50), nullable=False, unique=True),
    Column("doc", JSON, nullable=False),
    Column("flag", Boolean, nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("note", String(50), nullable=False, default="none"),
)
AT = datetime(2026, 12, 5, 4, 30, 1, 123456, tzinfo=UTC)

INSERT = insert(T)
INSERT_IGNORE = sqlite_insert(T).on_conflict_do_nothing(index_elements=["key"]).returning(T.c.id)
READY = (update(T).where(T.c.id == bindparam("b_id"), T.c.flag.is_(False))
         .returning(*T.c))
BY_KEY = select(T).where(T.c.key == bindparam("b_key"))
CLOCK = select(T.c.id, cast(func.julianday("now") * 0 + 7, BigInteger).label("now"),
               T.c.doc).where(T.c.key == bindparam("b_key"))
COUNT = select(func.count()).select_from(T)


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    eng = create_engine(f"sqlite+pysqlite:///{tmp_path / 'f.db'}")

    @event.listens_for(eng, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # as the store's engine: BEGIN is ours

    md.create_all(eng)
    yield eng
    eng.dispose()


def row(key: str, **kw: Any) -> dict[str, Any]:
    return {"key": key, "doc": {"a": [1, "x"], "n": None}, "flag": False, "at": AT,
            "note": "n", **kw}


def twice(conn: Connection, fast: FastConnection, stmt: Any, params: Any = None) -> Any:
    """Run ``stmt`` through the FastConnection twice (the first sight is SQLAlchemy's)."""
    fast.execute(stmt, params)
    return fast.execute(stmt, params)


def spy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which way each FastConnection.execute went."""
    ways: list[str] = []
    run = FastConnection._run

    def fast_run(self: FastConnection, plan: Any, given: Any) -> Any:
        ways.append("fast")
        return run(self, plan, given)

    monkeypatch.setattr(FastConnection, "_run", fast_run)
    return ways


def test_rows_counts_and_keys_as_sqlalchemy_gives_them(engine: Engine,
                                                        monkeypatch: pytest.MonkeyPatch):
    ways = spy(monkeypatch)
    with engine.connect() as conn:
        conn.exec_driver_sql("BEGIN")
        fast = FastConnection(conn)
        # INSERT: the primary key as SQLAlchemy reports it (the rowid)
        sa_pk = conn.execute(INSERT, row("a")).inserted_primary_key
        assert ways == []
        fast.execute(INSERT, row("b"))  # first sight: SQLAlchemy
        assert ways == []
        res = fast.execute(INSERT, row("c"))
        assert ways == ["fast"] and isinstance(res, FastResult)
        assert tuple(res.inserted_primary_key) == (sa_pk[0] + 2,)
        assert res.rowcount == 1
        # ON CONFLICT DO NOTHING RETURNING: a row for a new key, none for a known one
        fast.execute(INSERT_IGNORE, row("d0"))
        assert fast.execute(INSERT_IGNORE, row("d")).first() is not None
        assert fast.execute(INSERT_IGNORE, row("d")).first() is None
        # UPDATE ... RETURNING every column, JSON / Boolean / DateTime read back
        params = {"b_id": 1, "flag": True, "doc": {"z": 1}}
        expected = conn.execute(READY, params).first()
        conn.execute(update(T).where(T.c.id == 1).values(flag=False, doc=row("a")["doc"]))
        fast.execute(READY, params)  # first sight
        conn.execute(update(T).where(T.c.id == 1).values(flag=False, doc=row("a")["doc"]))
        got = fast.execute(READY, params).first()
        assert tuple(got) == tuple(expected)
        assert got._mapping == dict(expected._mapping)
        assert got.doc == {"z": 1} and got.flag is True and got.at == AT.replace(tzinfo=None)
        assert type(got.at) is type(expected.at) and type(got.id) is int
        # the literal in the WHERE clause is bound too: not pending any more -> no row
        assert fast.execute(READY, params).first() is None
        # SELECT: rows, labelled expressions, scalars
        for stmt, p in ((BY_KEY, {"b_key": "c"}), (CLOCK, {"b_key": "c"}), (COUNT, None)):
            want = conn.execute(stmt, p).all()
            assert [tuple(r) for r in twice(conn, fast, stmt, p).all()] == [tuple(r) for r in want]
        assert fast.execute(CLOCK, {"b_key": "c"}).one().now == 7
        assert fast.execute(COUNT).scalar_one() == 5
        assert fast.execute(BY_KEY, {"b_key": "nope"}).one_or_none() is None
        assert fast.execute(BY_KEY, {"b_key": "c"}).scalar() == 3
        assert ways.count("fast") >= 8


def test_errors_are_sqlalchemys(engine: Engine, monkeypatch: pytest.MonkeyPatch):
    ways = spy(monkeypatch)
    with engine.connect() as conn:
        conn.exec_driver_sql("BEGIN")
        fast = FastConnection(conn)
        fast.execute(INSERT, row("x"))
        fast.execute(INSERT, row("y"))
        ways.clear()
        with pytest.raises(IntegrityError) as caught:
            fast.execute(INSERT, row("y"))
        assert ways == ["fast"]
        assert isinstance(caught.value.orig, sqlite3.IntegrityError)
        # a required parameter left out is never bound as NULL, either way
        for _ in range(3):
            with pytest.raises(StatementError, match="b_key"):
                fast.execute(BY_KEY, {"other": "y"})


def test_what_the_short_way_does_not_cover_goes_to_sqlalchemy(
        engine: Engine, monkeypatch: pytest.MonkeyPatch):
    ways = spy(monkeypatch)
    with engine.connect() as conn:
        conn.exec_driver_sql("BEGIN")
        fast = FastConnection(conn)
        # a column left out that has a Python-side default: SQLAlchemy fills it in
        for key in ("p1", "p2", "p3"):
            params = row(key)
            del params["note"]
            fast.execute(INSERT, params)
        assert ways == []
        assert conn.execute(select(T.c.note).where(T.c.key == "p3")).scalar() == "none"
        # expanding IN, execution options
        in_ = select(T.c.key).where(T.c.key.in_(bindparam("keys", expanding=True)))
        assert sorted(twice(conn, fast, in_, {"keys": ["p1", "p2"]}).scalars()) == ["p1", "p2"]
        conn.execute(INSERT, [row("m1"), row("m2"), row("m3")])
        for _ in range(2):
            assert fast.execute(BY_KEY, {"b_key": "m1"},
                                execution_options={"x": 1}).one().key == "m1"
        assert ways == []
        # a statement built per call is never seen twice: never compiled
        for i in range(1, 4):
            assert fast.execute(select(T.c.key).where(T.c.key == f"m{i}")).scalar() == f"m{i}"
        assert ways == []


def test_an_observed_engine_sees_every_statement(engine: Engine,
                                                 monkeypatch: pytest.MonkeyPatch):
    ways = spy(monkeypatch)
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute",
                 lambda conn, cur, stmt, *a: seen.append(stmt))
    with engine.connect() as conn:
        conn.exec_driver_sql("BEGIN")
        fast = FastConnection(conn)
        for _ in range(3):
            fast.execute(BY_KEY, {"b_key": "x"})
    assert ways == [] and len([s for s in seen if s.startswith("SELECT")]) == 3


def test_a_plan_goes_with_its_statement():
    """An id is reused once its object is freed: the plans of a freed statement go with it,
    so a new statement at the same address is never run with another's SQL."""
    eng = create_engine("sqlite://")
    stmt = select(T).where(T.c.key == bindparam("b_key"))
    sid = id(stmt)
    _fast._plan_for(stmt, {"b_key": "x"}, eng.dialect)
    assert _fast._plan_for(stmt, {"b_key": "x"}, eng.dialect) is not None
    assert any(k[0] == sid for k in _fast._plans)
    del stmt
    gc.collect()
    assert not any(k[0] == sid for k in _fast._plans)
    assert sid not in _fast._refs and sid not in _fast._ids


def test_executemany_runs_each_set_in_turn(engine: Engine, monkeypatch: pytest.MonkeyPatch):
    ways = spy(monkeypatch)
    ret = sqlite_insert(T).on_conflict_do_nothing().returning(T.c.key)
    with engine.connect() as conn:
        conn.exec_driver_sql("BEGIN")
        fast = FastConnection(conn)
        fast.execute(ret, [row("e0")])  # first sight
        assert ways == []
        got = fast.execute(ret, [row("e1"), row("e2"), row("e1"), row("e3")])
        assert ways == ["fast"] * 4
        assert [r.key for r in got] == ["e1", "e2", "e3"]  # the duplicate returns nothing
        upd = update(T).where(T.c.key == bindparam("b_key")).values(note=bindparam("n"))
        fast.execute(upd, [{"b_key": "e1", "n": "x"}])
        assert fast.execute(upd, [{"b_key": "e1", "n": "y"}, {"b_key": "e2", "n": "y"},
                                  {"b_key": "nope", "n": "y"}]).rowcount == 2
        # parameter sets of different keys: SQLAlchemy's executemany (which refuses them)
        ways.clear()
        mixed = [row("f3"), {k: v for k, v in row("f4").items() if k != "note"}]
        for _ in range(2):
            with pytest.raises(StatementError, match="note"):
                fast.execute(INSERT, mixed)
        assert ways == []
