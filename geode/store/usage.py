"""The usage ledger: one row per model call, what the spend caps are checked against.

Rows are written after each call (tokens as the provider reported them, the cost when the
model has a configured price, else NULL) and summed before the next one
(:meth:`UsageLedger.totals`: every cap of a check in one read transaction). The table is
the store's, so every replica on a PostgreSQL store and every restart sees the same sums.

Calls in flight count too: before a call, :meth:`UsageLedger.reserve` checks the caps
against the settled rows plus every live reservation and, in the same transaction
(serialised: SQLite's ``BEGIN IMMEDIATE``, a PostgreSQL advisory lock), holds the most the
call can spend (``spend_reservations``). After the call, :meth:`UsageLedger.record`
deletes the reservation and inserts the real row in one transaction (the row only if the
reservation was still there, so a retry never writes it twice). A reservation whose
holder died (same host, its pid gone) or that expired is settled at its reserved size by
the next :meth:`reserve`: the ledger may count more than a crashed call spent, never less.

A usage row the store refuses (a connection error, a full disk) is not dropped: it is
written again with backoff until the store takes it, and its reservation keeps counting
until then.
"""

from __future__ import annotations

import asyncio
import uuid
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo

import structlog
from sqlalchemy import Table, delete, func, insert, select
from sqlalchemy.sql.elements import ColumnElement

from geode.store.models import reservations_table, usage_table

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = [
    "GROUPINGS",
    "CapLimit",
    "CapReached",
    "Grouping",
    "InFlight",
    "ReserveOutcome",
    "Reserved",
    "UsageFilter",
    "UsageLedger",
    "UsageRecord",
    "UsageTotals",
]

log = structlog.get_logger(__name__)

_U = usage_table
_R = reservations_table
_INSERT = insert(_U)
_RESERVE = insert(_R)
# Any 64-bit key: serialises reservations of all replicas on one PostgreSQL database.
_PG_SPEND_LOCK = zlib.crc32(b"geode.store.usage.reserve")
#: a usage row the store refused is written again after this long, doubling up to the max
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0

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

    def where(self, table: Table = _U) -> list[ColumnElement[bool]]:
        """The conditions on ``table`` (the ledger, or the reservations: same columns)."""
        c = table.c
        out: list[ColumnElement[bool]] = []
        if self.since_ms is not None:
            out.append(c.at >= self.since_ms)
        if self.until_ms is not None:
            out.append(c.at < self.until_ms)
        for value, column in ((self.binding, c.binding), (self.platform, c.platform),
                              (self.user, c.platform_user), (self.thread, c.thread),
                              (self.session_id, c.session_id), (self.turn_id, c.turn_id)):
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
_RESERVED_SUMS = (func.count(), func.coalesce(func.sum(_R.c.input_tokens), 0),
                  func.coalesce(func.sum(_R.c.output_tokens), 0), func.sum(_R.c.cost_usd))


@dataclass(frozen=True, kw_only=True)
class CapLimit:
    """One spend cap a reservation is checked against: the rows it sums and its limit."""

    counts: UsageFilter
    limit: float
    #: the cap is in USD (else tokens)
    usd: bool = False


@dataclass(frozen=True)
class Reserved:
    """The call may start; ``id`` is its reservation (settled by :meth:`UsageLedger.record`)."""

    id: str


@dataclass(frozen=True)
class CapReached:
    """``caps[index]`` is reached by settled calls: ``used`` >= its limit."""

    index: int
    used: float


@dataclass(frozen=True)
class InFlight:
    """``caps[index]`` could be crossed by the calls in flight (``reserved``) plus this one:
    wait for them to settle, then ask again."""

    index: int
    used: float
    reserved: float


ReserveOutcome = Reserved | CapReached | InFlight


def _row_params(rec: UsageRecord, at_ms: int) -> dict[str, Any]:
    return {
        "at": at_ms, "session_id": rec.session_id, "turn_id": rec.turn_id,
        "binding": rec.binding, "platform": rec.platform, "platform_user": rec.user,
        "thread": rec.thread, "model": rec.model, "input_tokens": rec.input_tokens,
        "output_tokens": rec.output_tokens, "cost_usd": rec.cost_usd,
    }


_ROW_COLUMNS = ("at", "session_id", "turn_id", "binding", "platform", "platform_user",
                "thread", "model", "input_tokens", "output_tokens", "cost_usd")


def _settle_unseen(conn: Connection, now_ms: int, alive: Callable[[str], bool]) -> None:
    """Reservations nobody will settle (expired, or their holder is dead): each becomes its
    usage row at the reserved size (the most that call spent), in this transaction."""
    rows = [row._mapping for row in conn.execute(select(_R)).all()]
    for r in rows:
        if r["expires_at"] > now_ms and alive(r["holder"]):
            continue
        conn.execute(delete(_R).where(_R.c.id == r["id"]))
        conn.execute(_INSERT, {k: r[k] for k in _ROW_COLUMNS})
        log.warning("usage.reservation_settled_unseen", holder=r["holder"],
                    session_id=r["session_id"], tokens=r["input_tokens"] + r["output_tokens"],
                    expired=r["expires_at"] <= now_ms)


def _decide(caps: Sequence[CapLimit], settled: Sequence[UsageTotals],
            reserved: Sequence[UsageTotals], estimate: UsageRecord) -> CapReached | InFlight | None:
    """None when the call may start. Reached: a settled sum is at its limit. In flight: the
    calls in flight plus this one's maximum could cross it (a call alone in flight for a cap
    may start while that cap is below its limit: it is the one call the bound allows)."""
    def amount(t: UsageTotals, usd: bool) -> float:
        return (t.cost_usd or 0.0) if usd else float(t.tokens)

    own = UsageTotals(input_tokens=estimate.input_tokens, output_tokens=estimate.output_tokens,
                      cost_usd=estimate.cost_usd)
    for i, cap in enumerate(caps):
        used = amount(settled[i], cap.usd)
        if used >= cap.limit:
            return CapReached(i, used)
    for i, cap in enumerate(caps):
        used, held = amount(settled[i], cap.usd), amount(reserved[i], cap.usd)
        if reserved[i].calls and used + held + amount(own, cap.usd) > cap.limit:
            return InFlight(i, used, held)
    return None


def _totals(row: Any) -> UsageTotals:
    return UsageTotals(calls=int(row[0]), input_tokens=int(row[1]), output_tokens=int(row[2]),
                       cost_usd=None if row[3] is None else float(row[3]))


class UsageLedger:
    """The ``usage_ledger`` table of one :class:`~geode.store.Database`."""

    def __init__(self, *, store: Database) -> None:
        self._store = store
        #: writes the store refused, being retried (kept: a task nobody holds can vanish)
        self._retries: set[asyncio.Task[None]] = set()

    async def reserve(
        self, estimate: UsageRecord, caps: Sequence[CapLimit], *, holder: str, now_ms: int,
        ttl_ms: int, alive: Callable[[str], bool],
    ) -> ReserveOutcome:
        """Check ``caps`` against the settled rows plus the live reservations and, if the call
        may start, hold ``estimate`` (the most it can spend) for it, all in one serialised
        write transaction: two callers never both see the room only one of them can use.

        ``holder`` names this process (``alive(holder)`` tells whether a holder still runs);
        the reservation expires ``ttl_ms`` after ``now_ms``.
        """
        params = _row_params(estimate, now_ms)
        rid = uuid.uuid4().hex
        postgres = self._store.is_postgres
        settled_q = [select(*_SUMS).where(*c.counts.where()) for c in caps]
        reserved_q = [select(*_RESERVED_SUMS).where(*c.counts.where(_R)) for c in caps]

        def work(conn: Connection) -> ReserveOutcome:
            if postgres:
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_SPEND_LOCK})")
            if conn.execute(select(_R.c.id).where(_R.c.id == rid)).first() is not None:
                return Reserved(rid)  # a retry of a transaction that did commit
            _settle_unseen(conn, now_ms, alive)
            settled = [_totals(conn.execute(q).one()) for q in settled_q]
            reserved = [_totals(conn.execute(q).one()) for q in reserved_q]
            refused = _decide(caps, settled, reserved, estimate)
            if refused is not None:
                return refused
            conn.execute(_RESERVE, {**params, "id": rid, "holder": holder,
                                    "expires_at": now_ms + ttl_ms})
            return Reserved(rid)

        await self._store.flush_later()  # rows recorded without waiting: committed first
        return await self._store.run_write(work)

    async def release(self, reservation: str, *, at_ms: int, spent: bool) -> None:
        """A call that ended without a usage figure: its reservation is dropped (``spent``
        False: the provider refused it, nothing was billed) or settled at its reserved size
        (``spent`` True: it may have been billed, e.g. a timeout after the request went
        out). Retried until the store takes it, like :meth:`record`."""
        def write(conn: Connection) -> None:
            found = conn.execute(select(_R).where(_R.c.id == reservation)).first()
            if found is None:
                return  # settled already (by a retry that did commit, or as unseen)
            conn.execute(delete(_R).where(_R.c.id == reservation))
            if spent:
                row = found._mapping
                conn.execute(_INSERT, {**{k: row[k] for k in _ROW_COLUMNS}, "at": at_ms})

        await self._write_until_written(write, what="usage.release", model="")

    async def record(self, rec: UsageRecord, *, at_ms: int, reservation: str | None = None,
                     ) -> None:
        """Append one model call's row (and delete its ``reservation``, in the same
        transaction), without waiting for its commit (``Database.run_write_later``): on SQLite
        it rides in the store's next write, which for a turn's model call is the checkpoint
        that saves the call's answer (the row is committed with the answer it paid for, in
        one transaction), or in a transaction of its own within ``_GroupCommit.LATER_S``.
        The sums (:meth:`totals`, :meth:`report`, :meth:`reserve`) commit waiting rows
        first, so a spend check always sees every call made before it.

        A row the store refuses is never dropped: it is written again with backoff until
        the store takes it (``usage.write_retrying``), its reservation counting meanwhile.
        With a reservation the row is inserted only if the reservation is still there, so
        a retry of a commit that did land writes nothing twice."""
        params = _row_params(rec, at_ms)

        def write(conn: Connection) -> None:
            if reservation is not None:
                gone = conn.execute(delete(_R).where(_R.c.id == reservation)).rowcount
                if gone == 0:
                    return  # settled already: by an earlier try, or as unseen (its maximum)
            conn.execute(_INSERT, params)

        await self._write_until_written(write, what="usage.record", model=rec.model)

    async def _write_until_written(self, write: Callable[[Connection], None], *, what: str,
                                   model: str) -> None:
        """``write`` in the store's next write transaction (``run_write_later``); if the store
        refuses it, again in the background with backoff until it is written."""
        def failed(exc: Exception) -> None:
            log.warning("usage.write_retrying", write=what, model=model,
                        error=type(exc).__name__)
            task = asyncio.get_running_loop().create_task(self._retry(write, what, model))
            self._retries.add(task)
            task.add_done_callback(self._retries.discard)

        await self._store.run_write_later(write, on_error=failed)

    async def _retry(self, write: Callable[[Connection], None], what: str, model: str) -> None:
        delay = RETRY_FIRST_S
        tries = 1
        while True:
            await asyncio.sleep(delay)
            tries += 1
            try:
                await self._store.run_write(write)
            except Exception as exc:
                delay = min(delay * 2, RETRY_MAX_S)
                if tries % 10 == 0:  # one line now and then, not one per try
                    log.warning("usage.write_retrying", write=what, model=model,
                                error=type(exc).__name__, tries=tries)
                continue
            log.info("usage.write_landed", write=what, model=model, tries=tries)
            return

    async def settled(self) -> None:
        """Wait until every row being retried is written (tests; a clean shutdown)."""
        while self._retries:
            await asyncio.wait(set(self._retries))

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
