"""SQLite's repeated statements run on the DBAPI cursor, each compiled once.

SQLAlchemy Core spends 40-100 us of Python on every execution of even a cached statement
(execution context, parameter and result set-up, events) while SQLite's own work for one of
the store's statements is 5-20 us; a channel reply runs ~30 of them in the writer thread.
:class:`FastConnection` wraps the SQLAlchemy ``Connection`` the store hands to a
transaction's function and runs a statement *object seen before* the short way: SQL
compiled once by SQLAlchemy itself (same dialect, same text), parameters in the compiled
order through the column types' own bind processors, rows back through their result
processors. What it does not handle goes to SQLAlchemy unchanged:

* a statement object the first time it is seen (a statement built per call would pay a
  compile each time; only the hot path's prebuilt statements come back);
* defaults SQLAlchemy would fill in (a column left out of an INSERT with a Python-side
  default), expanding ``IN`` parameters, execution options, an executemany whose
  parameter sets differ in their keys (one with the same keys runs them in turn);
* an engine with ``before/after_cursor_execute`` listeners (tests counting statements,
  tracing instrumentation): observers see every statement as before.

SQLite only: the store wraps its pysqlite connections (PostgreSQL stays on SQLAlchemy). The
results offer what the store's code uses of SQLAlchemy's (``first``, ``one``,
``scalar``, ``all``, ``rowcount``, ``inserted_primary_key``, rows with attribute, index
and ``_mapping`` access); DBAPI errors are raised as SQLAlchemy's (``IntegrityError`` …).
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, NoResultFound
from sqlalchemy.exc import MultipleResultsFound as _Multiple
from sqlalchemy.sql.base import Executable

__all__ = ["FastConnection"]

#: a statement's plans by (id of the statement, its parameters' keys); an entry goes with
#: its statement (weakref callback)
_Key = tuple[int, tuple[str, ...]]
_UNSEEN = object()  # a parameter without a default
_MISS = object()  # seen once, not yet compiled
_SLOW = object()  # compiled once and found unsupported: SQLAlchemy runs it


class _Plan:
    """One statement's SQL for the dialect, how to bind its parameters and read its rows."""

    __slots__ = ("binds", "pk", "readers", "row_type", "sql")

    def __init__(self, sql: str, binds: list[tuple[str, Any, Callable[[Any], Any] | None]],
                 row_type: Any, readers: list[Callable[[Any], Any] | None] | None,
                 pk: list[str] | None) -> None:
        self.sql = sql
        #: (name, default or _UNSEEN if required, bind processor) in the SQL's order
        self.binds = binds
        #: a namedtuple class for rows (None: the statement returns none)
        self.row_type = row_type
        self.readers = readers
        #: an INSERT's primary key columns (their values, or the rowid for the one integer)
        self.pk = pk

    def params(self, given: Mapping[str, Any]) -> list[Any]:
        out = []
        for name, default, proc in self.binds:
            value = given.get(name, default) if given else default
            if value is _UNSEEN:
                raise KeyError(name)
            out.append(proc(value) if proc is not None else value)
        return out


class _Row(tuple[Any, ...]):  # base of each statement's row namedtuple
    __slots__ = ()

    @property
    def _mapping(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=True))  # type: ignore[attr-defined]


class FastResult:
    """The rows of one execution, read at once (SQLite's cursor is done with after)."""

    __slots__ = ("_pk", "_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int, pk: tuple[Any, ...] | None) -> None:
        self._rows = rows
        self.rowcount = rowcount
        self._pk = pk

    @property
    def inserted_primary_key(self) -> tuple[Any, ...]:
        if self._pk is None:
            raise AttributeError("not an INSERT")
        return self._pk

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def all(self) -> list[Any]:
        return list(self._rows)

    fetchall = all

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None

    def one_or_none(self) -> Any:
        if len(self._rows) > 1:
            raise _Multiple("Multiple rows were found when one or none was required")
        return self.first()

    def one(self) -> Any:
        if not self._rows:
            raise NoResultFound("No row was found when one was required")
        return self.one_or_none()

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalar_one(self) -> Any:
        return self.one()[0]

    def scalar_one_or_none(self) -> Any:
        row = self.one_or_none()
        return None if row is None else row[0]

    def scalars(self) -> FastResult:
        return FastResult([r[0] for r in self._rows], self.rowcount, self._pk)


class FastConnection:
    """A SQLAlchemy ``Connection`` (every attribute passes through) whose ``execute`` runs
    statements seen before on the DBAPI cursor (see the module docstring)."""

    __slots__ = ("_conn", "_dialect", "_observed", "_raw")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._raw: Any = conn.connection.driver_connection
        self._dialect = conn.dialect
        dispatch = conn.engine.dispatch
        self._observed = bool(dispatch.before_cursor_execute or dispatch.after_cursor_execute)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def execute(self, statement: Any, parameters: Any = None, *,
                execution_options: Any = None) -> Any:
        if execution_options is None and not self._observed:
            if parameters is None or isinstance(parameters, Mapping):
                plan = _plan_for(statement, parameters, self._dialect)
                if plan is not None:
                    return self._run(plan, parameters)
            elif _uniform(parameters):
                # executemany: each parameter set in turn, rows and counts added up (what
                # SQLAlchemy returns for it, in the parameters' order)
                plan = _plan_for(statement, parameters[0], self._dialect)
                if plan is not None:
                    return self._run_many(plan, parameters)
        if execution_options is None:
            return self._conn.execute(statement, parameters)
        return self._conn.execute(statement, parameters, execution_options=execution_options)

    def _run_many(self, plan: _Plan, many: Sequence[Mapping[str, Any]]) -> FastResult:
        rows: list[Any] = []
        count = 0
        for given in many:
            one = self._run(plan, given)
            rows.extend(one._rows)
            count += one.rowcount
        return FastResult(rows, count, None)

    def _run(self, plan: _Plan, given: Mapping[str, Any] | None) -> FastResult:
        params = plan.params(given or {})
        cur = self._raw.cursor()
        try:
            try:
                cur.execute(plan.sql, params)
                raw_rows = cur.fetchall() if plan.row_type is not None else ()
            except self._dialect.loaded_dbapi.Error as exc:
                raise DBAPIError.instance(plan.sql, params, exc,
                                          self._dialect.loaded_dbapi.Error,
                                          dialect=self._dialect) from exc
            rowcount = cur.rowcount
            lastrowid = cur.lastrowid
        finally:
            cur.close()
        rows: list[Any] = []
        if raw_rows:
            make, readers = plan.row_type._make, plan.readers or ()
            for raw in raw_rows:
                rows.append(make([v if f is None or v is None else f(v)
                                  for f, v in zip(readers, raw, strict=True)]))
        pk = None
        if plan.pk is not None:
            given = given or {}
            pk = tuple(given.get(name, lastrowid) for name in plan.pk)
        return FastResult(rows, rowcount, pk)


def _uniform(parameters: Any) -> bool:
    """A list of parameter dicts with the same keys (an executemany the short way takes)."""
    if not isinstance(parameters, list) or not parameters:
        return False
    first = parameters[0]
    if not isinstance(first, Mapping):
        return False
    keys = first.keys()
    return all(isinstance(p, Mapping) and p.keys() == keys for p in parameters)


_plans: dict[_Key, Any] = {}
_ids: dict[int, list[_Key]] = {}  # a statement's keys in _plans, dropped with it
_refs: dict[int, weakref.ref[Any]] = {}
# the writer thread and the read workers share the table; re-entrant: a statement freed
# while it is held runs its callback in the same thread
_lock = threading.RLock()


def _plan_for(statement: Any, given: Mapping[str, Any] | None, dialect: Any) -> _Plan | None:
    if not isinstance(statement, Executable):
        return None
    key = (id(statement), tuple(given) if given else ())
    plan = _plans.get(key)
    if plan is _SLOW:
        return None
    if plan is not None and plan is not _MISS:
        return plan  # type: ignore[no-any-return]
    with _lock:
        plan = _plans.get(key)
        if plan is None:  # first sight: remember it, SQLAlchemy runs it
            _remember(statement, key, _MISS)
            return None
        if plan is _MISS:
            try:
                plan = _compile(statement, key[1], dialect)
            except Exception:  # anything unforeseen: SQLAlchemy's way, always
                plan = None
            _plans[key] = plan if plan is not None else _SLOW
    return plan if isinstance(plan, _Plan) else None


def _remember(statement: Any, key: _Key, value: Any) -> None:
    """Enter ``key`` for ``statement``; its entries go when it does (an id is unique only
    while its object lives: the callback runs at once when CPython frees the object)."""
    sid = key[0]
    if sid not in _refs:

        def gone(_ref: Any, sid: int = sid) -> None:
            with _lock:
                for k in _ids.pop(sid, ()):
                    _plans.pop(k, None)
                _refs.pop(sid, None)

        _refs[sid] = weakref.ref(statement, gone)
    _ids.setdefault(sid, []).append(key)
    _plans[key] = value


def _compile(statement: Any, keys: Sequence[str], dialect: Any) -> _Plan | None:
    is_dml = getattr(statement, "is_dml", False)
    if not (is_dml or getattr(statement, "is_select", False)):
        return None
    compiled = statement.compile(dialect=dialect, column_keys=list(keys) if is_dml else None)
    names = compiled.positiontup
    if (names is None or "POSTCOMPILE" in compiled.string or compiled.insert_prefetch
            or compiled.update_prefetch
            or getattr(compiled, "implicit_returning", None)):
        return None
    binds = []
    for name in names:
        bind = compiled.binds[name]
        if name in keys:
            default: Any = _UNSEEN
        elif bind.required or bind.callable is not None:
            return None  # SQLAlchemy says what is missing, or computes the value
        else:
            default = bind.value  # a literal of the statement's
        proc = bind.type.dialect_impl(dialect).bind_processor(dialect)
        binds.append((name, default, proc))
    row_type: Any = None
    readers = None
    if statement.is_select or getattr(compiled, "effective_returning", None):
        described = (statement.returning_column_descriptions if is_dml
                     else statement.column_descriptions)
        fields = [d["name"] for d in described]
        try:
            fields_type: Any = collections.namedtuple("Row", fields, module=__name__)  # type: ignore[misc]
        except (TypeError, ValueError):  # a name a namedtuple cannot take
            return None
        row_type = type("Row", (fields_type, _Row), {"__slots__": ()})
        readers = [d["type"].dialect_impl(dialect).result_processor(dialect, None)
                   for d in described]
    pk = None
    if getattr(statement, "is_insert", False):
        pk = [c.key for c in statement.table.primary_key.columns]
    return _Plan(compiled.string, binds, row_type, readers, pk)
