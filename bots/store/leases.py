"""Leases in the store: one intake per bot token, one processor per thread, across replicas.

* :class:`Lease` — a named lease; the bot's intake lease (``telegram:<bot id>`` ...) is held
  by one replica. Telegram allows one ``getUpdates`` caller per token; a second one gets
  409 and the two knock each other out (the peers' supervisor-restart 409 storms). Here a
  second ``geode serve`` on the same token finds the lease held and waits as a standby for
  the intake; it takes over when the holder stops renewing (crash) or releases it.
* :class:`ThreadLeases` — per-thread leases (``channel_thread_leases``): every replica
  processes, and each thread is processed by one replica at a time. A replica takes a
  thread's lease in the same transaction that claims the thread's events, renews all of
  its leases in one statement per heartbeat, drops the leases of threads idle for a TTL
  with nothing unfinished, and takes over (then recovers) the threads of a replica that
  stopped renewing. A thread's events are therefore claimed, run and answered by the
  holder of its lease only, in order.

Both take a holder's leases over before they expire when it is one of ``predecessors``:
holders of the same ``$GEODE_HOME`` on this host whose process is known dead
(:mod:`bots.holders`: a lock the kernel released). A restart after a crash thus takes over
at once; a replica on another host (or a holder not known dead) keeps its lease until the
TTL.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    and_,
    bindparam,
    cast,
    delete,
    exists,
    extract,
    func,
    select,
    tuple_,
    update,
)

from bots.store._sql import dialect_insert, insert_ignore
from bots.store._tables import events_table, leases_table, outbox_table, thread_leases_table
from geode.errors import StoreError
from geode.store.models import utcnow

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = ["Lease", "RunningElsewhere", "StopRequest", "Thread", "ThreadClaim", "ThreadLeaseLost",
           "ThreadLeases", "ThreadStops", "held_by_another", "store_clock"]

_L = leases_table
_T = thread_leases_table
_E = events_table
_O = outbox_table

#: a thread of one bot: (channel, thread_root)
Thread = tuple[str, str]
#: event statuses that mean "claimed, not finished"; outbox statuses that mean "owed"
UNFINISHED_EVENTS = ("processing", "running")
OPEN_OUTBOX = ("pending", "ready", "sending")


class ThreadLeaseLost(StoreError):
    """This replica no longer holds the thread: another one took it over (this one stalled
    or froze past its lease), and that one's run of the thread is the one that counts."""


def _now_ms(store: Database) -> Any:
    """The database's clock in unix milliseconds, as SQL.

    Every replica reads lease times off the one store's clock, so a replica whose own clock
    runs ahead cannot see a live lease as expired (and one running behind cannot keep a
    dead one). Each statement evaluates it once (SQLite: ``'now'`` is fixed per statement;
    PostgreSQL: ``clock_timestamp()``, not the transaction's start).
    """
    return store_clock(store.is_postgres)


@functools.cache
def store_clock(postgres: bool) -> Any:
    """:func:`_now_ms` of a dialect, built once (a statement reading the clock along with
    its rows can hand it to :meth:`ThreadLeases.take_in`: one statement fewer)."""
    if postgres:
        return cast(func.floor(extract("epoch", func.clock_timestamp()) * 1000), BigInteger)
    return cast((func.julianday("now") - 2440587.5) * 86400000.0, BigInteger)


class Lease:
    """A named lease held by ``owner`` for ``ttl_s`` at a time; renew well before expiry."""

    def __init__(self, *, store: Database, name: str, owner: str, ttl_s: float = 30.0,
                 predecessors: Collection[str] = ()) -> None:
        """``predecessors``: holders known dead (:mod:`bots.holders`), whose hold on the
        lease is taken over at once instead of after its TTL."""
        self._store = store
        self.name = name
        self.owner = owner
        self.ttl_ms = int(ttl_s * 1000)
        self.held = False
        self.predecessors = frozenset(predecessors) - {owner}

    async def try_acquire(self) -> bool:
        """Take or renew the lease; False while another live owner holds it."""
        now = _now_ms(self._store)
        seed = insert_ignore(self._store, _L, ["name"]).values(
            name=self.name, owner="", expires_at=0, updated_at=utcnow()
        )
        # Compare-and-set: ours already, expired, or a dead predecessor's. Integer ms
        # compare exactly.
        free = (_L.c.owner == self.owner) | (_L.c.expires_at < now)
        if self.predecessors:
            free = free | _L.c.owner.in_(sorted(self.predecessors))
        take = update(_L).where(
            _L.c.name == self.name, free,
        ).values(owner=self.owner, expires_at=now + self.ttl_ms, updated_at=utcnow())

        def tx(conn: Connection) -> bool:
            conn.execute(seed)
            return bool(conn.execute(take).rowcount)

        self.held = await self._store.run_write(tx)
        return self.held

    async def release(self) -> None:
        stmt = (update(_L).where(_L.c.name == self.name, _L.c.owner == self.owner)
                .values(expires_at=0, updated_at=utcnow()))
        await self._store.run_write(lambda conn: conn.execute(stmt))
        self.held = False

    async def holder(self) -> tuple[str, int] | None:
        query = select(_L).where(_L.c.name == self.name)
        row = await self._store.run_read(lambda conn: conn.execute(query).first())
        return None if row is None else (str(row.owner), int(row.expires_at))


def _threads(conn: Connection, stmt: Any, params: list[dict[str, Any]] | None = None
             ) -> set[Thread]:
    """Run a lease statement (once per row of ``params`` if given, as one executemany); the
    threads of the rows it wrote. ``stmt`` ends in ``RETURNING channel, thread_root``."""
    rows = conn.execute(stmt, params) if params is not None else conn.execute(stmt)
    return {(str(r.channel), str(r.thread_root)) for r in rows}


_BACK = (_T.c.channel, _T.c.thread_root)


def _same_thread(table: Any) -> Any:
    return and_(table.c.platform == _T.c.platform, table.c.workspace == _T.c.workspace,
                table.c.channel == _T.c.channel, table.c.thread_root == _T.c.thread_root)


def held_by_another(table: Any) -> Any:
    """SQL: the row of ``table`` (events) is in a thread held by an owner other than the
    one bound as ``b_owner`` (a replica's name): a constant statement can carry it."""
    return exists().where(_same_thread(table), _T.c.owner != bindparam("b_owner"))


class ThreadLeases:
    """The per-thread leases of one replica (``owner``) on one bot (platform, workspace).

    Every method but :meth:`take_in` is one transaction; a lease lives ``ttl_s`` from its
    last renewal. A lease row exists while a replica holds the thread; no row = free.
    """

    def __init__(self, *, store: Database, owner: str, ttl_s: float,
                 predecessors: Collection[str] = ()) -> None:
        """``predecessors``: holders known dead (:mod:`bots.holders`), whose thread leases
        :meth:`take_over` takes at once instead of after their TTL."""
        self._store = store
        self.owner = owner
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.predecessors = frozenset(predecessors) - {owner}
        #: free threads the last :meth:`take_in` left for lack of room
        self.skipped = 0
        #: the stop requests on this owner's threads, as the last :meth:`renew` read them
        self.stop_requests: dict[Thread, StopRequest] = {}
        # One-row statements run as executemany: SQLAlchemy compiles each once and batches the
        # rows itself. A multi-row VALUES built per call was compiled afresh every time (with
        # the clock expression once per row): ~10 ms of CPU for a 50-thread claim.
        insert_ = dialect_insert(store)
        ins = insert_(_T)
        #: free threads taken, this owner's touched; another owner's row is left alone
        self._upsert = ins.on_conflict_do_update(
            index_elements=[_T.c.platform, _T.c.workspace, _T.c.channel, _T.c.thread_root],
            set_={"expires_at": ins.excluded.expires_at, "touched_at": ins.excluded.touched_at},
            where=_T.c.owner == owner,
        ).returning(*_BACK)
        #: free threads taken; a held one (by anybody) is left alone
        self._take_free = ins.on_conflict_do_nothing().returning(*_BACK)
        self._clock = select(_now_ms(store).label("now"))
        holder = select(_T.c.owner).where(
            _T.c.platform == bindparam("b_platform"), _T.c.workspace == bindparam("b_workspace"),
            _T.c.channel == bindparam("b_channel"), _T.c.thread_root == bindparam("b_root"),
        )
        #: who holds a thread (share-locked on PostgreSQL: see :meth:`check_held`)
        self._holder = holder.with_for_update(read=True) if store.is_postgres else holder

    def _mine(self, platform: str, workspace: str) -> Any:
        return and_(_T.c.platform == platform, _T.c.workspace == workspace,
                    _T.c.owner == self.owner)

    def take_in(
        self, conn: Connection, platform: str, workspace: str, threads: Sequence[Thread], *,
        new: int, now: int | None = None,
    ) -> set[Thread]:
        """Inside the caller's transaction: of ``threads``, those this owner holds now.

        The ones it holds are kept (touched); of the free ones, the first ``new`` are taken
        (:attr:`skipped` counts the free ones left for lack of room). A thread held by
        another replica is not taken, even if its lease expired: its unfinished work must
        be recovered first (:meth:`take_over`). ``now``: the store's clock
        (:func:`store_clock`) if the caller read it in this transaction already.
        """
        distinct = sorted(set(threads))  # one key order for every replica: no deadlock
        if not distinct:
            return set()
        if now is None:
            now = self._now(conn)
        self.skipped = 0
        if new >= len(distinct):
            # Room for all: one upsert takes the free threads and touches our own.
            return _threads(conn, self._upsert, self._rows(platform, workspace, distinct, now))
        held = _threads(conn, update(_T).where(
            self._mine(platform, workspace),
            tuple_(_T.c.channel, _T.c.thread_root).in_(distinct),
        ).values(expires_at=now + self.ttl_ms, touched_at=now).returning(*_BACK))
        # The free ones in the order of ``threads`` (oldest event first), up to ``new``; one
        # another replica takes meanwhile leaves its room to the next.
        others = [t for t in dict.fromkeys(threads) if t not in held]
        room, tried = max(0, new), 0
        while room and tried < len(others):
            fresh = others[tried:tried + room]
            tried += len(fresh)
            taken = _threads(conn, self._take_free,
                             self._rows(platform, workspace, sorted(fresh), now))
            held |= taken
            room -= len(taken)
        # What is left: free threads this replica had no room for.
        self.skipped = len(others) - tried
        return held

    def check_held(self, conn: Connection, platform: str, workspace: str, thread: Thread
                   ) -> None:
        """Inside the caller's write transaction: raise :class:`ThreadLeaseLost` unless this
        owner holds ``thread``'s lease.

        The fence of a turn's writes (its checkpoints, its final answer): a replica that froze
        past its lease and woke up in the middle of a turn must not add to a thread another
        replica took over, even before its heartbeat notices. On PostgreSQL the lease row is
        share-locked until commit, so a takeover cannot slip in between check and write;
        SQLite writers are serialised anyway.
        """
        channel, root = thread
        owner = conn.execute(self._holder, {"b_platform": platform, "b_workspace": workspace,
                                            "b_channel": channel, "b_root": root}
                             ).scalar_one_or_none()
        if owner != self.owner:
            raise ThreadLeaseLost(
                f"thread {channel}/{root} is held by {owner or 'nobody'}, not by this replica"
            )

    def _now(self, conn: Connection) -> int:
        """The store's clock (unix ms), read once for a transaction's lease rows."""
        return int(conn.execute(self._clock).scalar_one())

    def _rows(self, platform: str, workspace: str, threads: list[Thread], now: int
              ) -> list[dict[str, Any]]:
        """This owner's lease rows on ``threads``, for :attr:`_upsert` / :attr:`_take_free`."""
        expires = now + self.ttl_ms
        return [{"platform": platform, "workspace": workspace, "channel": channel,
                 "thread_root": root, "owner": self.owner, "expires_at": expires,
                 "touched_at": now}
                for channel, root in threads]

    async def renew(self, platform: str, workspace: str) -> set[Thread]:
        """Extend every lease of this owner; returns the threads it still holds.

        The same statement reads the stop requests on them (:class:`ThreadStops`), left in
        :attr:`stop_requests` for the heartbeat: no query of its own."""
        stmt = (update(_T).where(self._mine(platform, workspace))
                .values(expires_at=_now_ms(self._store) + self.ttl_ms)
                .returning(*_BACK, _T.c.stop_event, _T.c.stop_by))

        def tx(conn: Connection) -> set[Thread]:
            rows = conn.execute(stmt).all()
            self.stop_requests = {
                (str(r.channel), str(r.thread_root)): StopRequest(event_id=int(r.stop_event),
                                                                  by=str(r.stop_by or ""))
                for r in rows if r.stop_event is not None}
            return {(str(r.channel), str(r.thread_root)) for r in rows}

        return await self._store.run_write(tx)

    async def stop_handled(self, platform: str, workspace: str, thread: Thread,
                           request: StopRequest) -> None:
        """Clear ``thread``'s stop request (the turn was stopped, or it had ended), unless
        a newer one replaced it meanwhile."""
        channel, root = thread
        stmt = update(_T).where(
            self._mine(platform, workspace), _T.c.channel == channel, _T.c.thread_root == root,
            _T.c.stop_event == request.event_id,
        ).values(stop_event=None, stop_by=None)
        await self._store.run_write(lambda conn: conn.execute(stmt))

    async def release_idle(self, platform: str, workspace: str) -> int:
        """Drop the leases of threads untouched for a TTL with nothing unfinished or owed."""
        stmt = delete(_T).where(
            self._mine(platform, workspace),
            _T.c.touched_at < _now_ms(self._store) - self.ttl_ms,
            ~exists().where(_same_thread(_E), _E.c.status.in_(UNFINISHED_EVENTS)),
            ~exists().where(_same_thread(_O), _O.c.status.in_(OPEN_OUTBOX)),
        )
        return await self._store.run_write(lambda conn: int(conn.execute(stmt).rowcount))

    async def release_all(self, platform: str, workspace: str) -> None:
        """Give every lease up (a clean stop: another replica recovers what is unfinished)."""
        stmt = delete(_T).where(self._mine(platform, workspace))
        await self._store.run_write(lambda conn: conn.execute(stmt))

    async def take_over(self, platform: str, workspace: str) -> set[Thread]:
        """Take the threads nobody holds any more; returns them, for recovery.

        Those are the expired leases of other owners (a replica that died), the leases of
        :attr:`predecessors` expired or not (this home's dead process: a restart need not
        wait for their TTL), and threads with unfinished events or owed replies but no
        lease (released by a clean stop, or left by a version without thread leases).
        """
        now = _now_ms(self._store)
        gone = _T.c.expires_at < now
        if self.predecessors:
            gone = gone | _T.c.owner.in_(sorted(self.predecessors))
        expired = (update(_T).where(_T.c.platform == platform, _T.c.workspace == workspace,
                                    _T.c.owner != self.owner, gone)
                   .values(owner=self.owner, expires_at=now + self.ttl_ms, touched_at=now))
        unleased = [
            select(t.c.channel, t.c.thread_root).distinct().where(
                t.c.platform == platform, t.c.workspace == workspace, t.c.status.in_(statuses),
                ~exists().where(_same_thread(t)),
            )
            for t, statuses in ((_E, UNFINISHED_EVENTS), (_O, OPEN_OUTBOX))
        ]

        def tx(conn: Connection) -> set[Thread]:
            taken = _threads(conn, expired.returning(*_BACK))
            orphans = {(str(r.channel), str(r.thread_root))
                       for query in unleased for r in conn.execute(query)}
            if orphans - taken:
                rows = self._rows(platform, workspace, sorted(orphans - taken), self._now(conn))
                taken |= _threads(conn, self._take_free, rows)
            return taken

        return await self._store.run_write(tx)

    async def holders(self, platform: str, workspace: str) -> dict[Thread, str]:
        """Who holds which thread (status, tests)."""
        query = select(_T.c.channel, _T.c.thread_root, _T.c.owner).where(
            _T.c.platform == platform, _T.c.workspace == workspace)
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return {(str(r.channel), str(r.thread_root)): str(r.owner) for r in rows}


@dataclass(frozen=True, kw_only=True)
class StopRequest:
    """Stop asked for the turn of inbound event ``event_id`` of a thread, by ``by`` (the
    console's signed-in identity)."""

    event_id: int
    by: str


@dataclass(frozen=True, kw_only=True)
class RunningElsewhere:
    """A thread's turn as the store sees it: its inbound event (claimed, not finished), the
    replica holding the thread, and the stop request on it, if any."""

    event_id: int
    owner: str
    stop: StopRequest | None


class ThreadStops:
    """Stop for a turn whichever replica runs it (the console's side).

    The request is a mark on the thread's lease row (the event whose turn is to stop, and
    who asked); the holder's heartbeat renews that row anyway, reads the mark in the same
    statement (:meth:`ThreadLeases.renew`) and stops the turn as ``/stop`` does. Asking
    again marks the same event: idempotent. A row exists while a replica holds the thread,
    so a thread nobody holds has nothing running to stop.
    """

    def __init__(self, *, store: Database) -> None:
        self._store = store

    @staticmethod
    def _where(table: Any, platform: str, workspace: str, channel: str, root: str) -> Any:
        return and_(table.c.platform == platform, table.c.workspace == workspace,
                    table.c.channel == channel, table.c.thread_root == root)

    def _running_q(self, platform: str, workspace: str, channel: str, root: str) -> Any:
        # the thread's oldest unfinished event: its turn runs (or waits for a lane) now,
        # the ones after it wait behind it (a thread's events run in order)
        first = (select(func.min(_E.c.id)).where(
            self._where(_E, platform, workspace, channel, root),
            _E.c.status.in_(UNFINISHED_EVENTS)).scalar_subquery())
        return select(first.label("event_id"), _T.c.owner, _T.c.stop_event, _T.c.stop_by
                      ).where(self._where(_T, platform, workspace, channel, root))

    @staticmethod
    def _found(row: Any) -> RunningElsewhere | None:
        if row is None or row.event_id is None:
            return None
        stop = (StopRequest(event_id=int(row.stop_event), by=str(row.stop_by or ""))
                if row.stop_event is not None else None)
        return RunningElsewhere(event_id=int(row.event_id), owner=str(row.owner), stop=stop)

    async def running(self, platform: str, workspace: str, channel: str, root: str
                      ) -> RunningElsewhere | None:
        """The thread's unfinished turn and its holder; None when nothing is unfinished."""
        q = self._running_q(platform, workspace, channel, root)
        return self._found(await self._store.run_read(lambda conn: conn.execute(q).first()))

    async def request(self, platform: str, workspace: str, channel: str, root: str, *,
                      by: str) -> RunningElsewhere | None:
        """Ask the holder to stop the thread's unfinished turn; what was asked (with its
        request), or None when nothing is unfinished."""
        q = self._running_q(platform, workspace, channel, root)

        def tx(conn: Connection) -> RunningElsewhere | None:
            found = self._found(conn.execute(q).first())
            if found is None:
                return None
            conn.execute(update(_T).where(self._where(_T, platform, workspace, channel, root))
                         .values(stop_event=found.event_id, stop_by=by))
            return RunningElsewhere(event_id=found.event_id, owner=found.owner,
                                    stop=StopRequest(event_id=found.event_id, by=by))

        return await self._store.run_write(tx)


@dataclass(frozen=True, kw_only=True)
class ThreadClaim:
    """A replica's claim on one thread (``geode.daemon.port.Claim``): checked first inside
    each of a turn's writes, in the write's own transaction (see
    :meth:`ThreadLeases.check_held`); the layer only hands it on. A value: the turn builds
    it with the facts of its row (``bots.turn.prepare``), nothing is asked of the table."""

    leases: ThreadLeases
    platform: str
    workspace: str
    thread: Thread

    def check(self, tx: Connection) -> None:
        self.leases.check_held(tx, self.platform, self.workspace, self.thread)
