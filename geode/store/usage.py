"""The usage ledger: one row per model call, what the spend caps are checked against.

Rows are written after each call (tokens as the provider reported them, the cost when the
model has a configured price, else NULL) and summed before the next one
(:meth:`UsageLedger.totals`: every cap of a check in one read transaction). The table is
the store's, so every replica on a PostgreSQL store and every restart sees the same sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo

import structlog
from sqlalchemy import func, insert, select
from sqlalchemy.sql.elements import ColumnElement

from geode.store.models import usage_table

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store.engine import Store

__all__ = ["GROUPINGS", "Grouping", "UsageFilter", "UsageLedger", "UsageRecord", "UsageTotals"]

log = structlog.get_logger(__name__)

_U = usage_table
_INSERT = insert(_U)

Grouping = Literal["binding", "user", "model", "day"]
GROUPINGS: tuple[Grouping, ...] = ("binding", "user", "model", "day")
_GROUP_COLUMNS: dict[str, Any] = {"binding": _U.c.binding, "model": _U.c.model}


@dataclass(frozen=True, kw_only=True)
class UsageRecord:
    """One model call's usage and who it counts against."""

    session_id: str
    turn_id: str = ""
    binding: str = ""
    platform: str = ""
    user: str = ""
    thread: str = ""
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    #: None when the model has no configured price
    cost_usd: float | None = None


@dataclass(frozen=True, kw_only=True)
class UsageFilter:
    """Which rows a sum covers; a field left ``None`` does not restrict."""

    since_ms: int | None = None
    until_ms: int | None = None
    binding: str | None = None
    platform: str | None = None
    user: str | None = None
    thread: str | None = None
    session_id: str | None = None
    turn_id: str | None = None

    def where(self) -> list[ColumnElement[bool]]:
        out: list[ColumnElement[bool]] = []
        if self.since_ms is not None:
            out.append(_U.c.at >= self.since_ms)
        if self.until_ms is not None:
            out.append(_U.c.at < self.until_ms)
        for value, column in ((self.binding, _U.c.binding), (self.platform, _U.c.platform),
                              (self.user, _U.c.platform_user), (self.thread, _U.c.thread),
                              (self.session_id, _U.c.session_id), (self.turn_id, _U.c.turn_id)):
            if value is not None:
                out.append(column == value)
        return out


@dataclass(frozen=True, kw_only=True)
class UsageTotals:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    #: summed over the priced calls; None when no call of them had a price
    cost_usd: float | None = None

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def plus(self, other: UsageTotals) -> UsageTotals:
        cost = None if self.cost_usd is None and other.cost_usd is None else (
            (self.cost_usd or 0.0) + (other.cost_usd or 0.0))
        return UsageTotals(calls=self.calls + other.calls,
                           input_tokens=self.input_tokens + other.input_tokens,
                           output_tokens=self.output_tokens + other.output_tokens, cost_usd=cost)

    def to_json(self) -> dict[str, Any]:
        return {"calls": self.calls, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "tokens": self.tokens,
                "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6)}


_SUMS = (func.count(), func.coalesce(func.sum(_U.c.input_tokens), 0),
         func.coalesce(func.sum(_U.c.output_tokens), 0), func.sum(_U.c.cost_usd))


def _totals(row: Any) -> UsageTotals:
    return UsageTotals(calls=int(row[0]), input_tokens=int(row[1]), output_tokens=int(row[2]),
                       cost_usd=None if row[3] is None else float(row[3]))


class UsageLedger:
    """The ``usage_ledger`` table of one :class:`~geode.store.Store`."""

    def __init__(self, *, store: Store) -> None:
        self._store = store

    async def record(self, rec: UsageRecord, *, at_ms: int) -> None:
        """Append one model call's row, without waiting for its commit
        (``Store.run_write_later``): on SQLite it rides in the store's next write, which
        for a turn's model call is the checkpoint that saves the call's answer (the row is
        committed with the answer it paid for, in one transaction), or in a transaction of
        its own within ``_GroupCommit.LATER_S``. The sums (:meth:`totals`, :meth:`report`)
        commit waiting rows first, so a spend check always sees every call made before it.
        A row the store refuses is logged (``usage.record_failed``), never raised."""
        params = {
            "at": at_ms, "session_id": rec.session_id, "turn_id": rec.turn_id,
            "binding": rec.binding, "platform": rec.platform, "platform_user": rec.user,
            "thread": rec.thread, "model": rec.model, "input_tokens": rec.input_tokens,
            "output_tokens": rec.output_tokens, "cost_usd": rec.cost_usd,
        }

        def write(conn: Connection) -> None:
            conn.execute(_INSERT, params)

        def failed(exc: Exception) -> None:
            # The call happened and its answer is in hand; the caps undercount by it.
            log.error("usage.record_failed", model=rec.model, session_id=rec.session_id,
                      error=type(exc).__name__)

        await self._store.run_write_later(write, on_error=failed)

    async def totals(self, filters: Sequence[UsageFilter]) -> list[UsageTotals]:
        """The sums for each filter, all read in one transaction."""
        queries = [select(*_SUMS).where(*f.where()) for f in filters]

        def read(conn: Connection) -> list[UsageTotals]:
            return [_totals(conn.execute(q).one()) for q in queries]

        await self._store.flush_later()  # rows recorded without waiting: committed first
        return await self._store.run_read(read)

    async def report(
        self, *, by: Grouping, since_ms: int | None = None, tz: str = "UTC"
    ) -> list[tuple[str, UsageTotals]]:
        """Usage grouped ``by`` binding, user (``platform:user``), model or day (local dates
        in ``tz``), the largest token count first (days: oldest first). Calls made outside a
        channel have the key ``""`` for binding and user."""
        where = UsageFilter(since_ms=since_ms).where()
        await self._store.flush_later()
        if by == "day":
            query = select(_U.c.at, _U.c.input_tokens, _U.c.output_tokens, _U.c.cost_usd).where(
                *where)
            rows = await self._store.run_read(lambda conn: conn.execute(query).all())
            zone = ZoneInfo(tz)
            days: dict[str, UsageTotals] = {}
            for at, inp, out, cost in rows:
                day = datetime.fromtimestamp(at / 1000, zone).date().isoformat()
                one = UsageTotals(calls=1, input_tokens=int(inp), output_tokens=int(out),
                                  cost_usd=None if cost is None else float(cost))
                days[day] = days.get(day, UsageTotals()).plus(one)
            return sorted(days.items())
        # a user id is unique within its platform only: users are keyed "platform:user"
        columns = [_U.c.platform, _U.c.platform_user] if by == "user" else [_GROUP_COLUMNS[by]]
        grouped = select(*columns, *_SUMS).where(*where).group_by(*columns)
        groups = await self._store.run_read(lambda conn: list(conn.execute(grouped)))
        n = len(columns)
        out = [(":".join(str(v) for v in r[:n] if v), _totals(r[n:])) for r in groups]
        return sorted(out, key=lambda kv: (-kv[1].tokens, kv[0]))
