"""Approval requests in ``channel_approvals``: a binding's ``approve`` tools wait for one of
its approvers to say yes in the thread.

The row is written *before* the request message is posted (:meth:`ApprovalRequests.open`),
so a restart while it waits finds it and resumes the wait; asking again for the same
proposed call (same session and call id, e.g. a resumed turn) returns the same row. Every
state change is one conditional ``UPDATE ... WHERE status = 'pending'``: a double click, a
redelivered interaction or two replicas racing decide once, and a decision after the expiry
loses to it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from bots.store._tables import approvals_table
from geode.secret_redaction import redact

if TYPE_CHECKING:
    from geode.store.database import Database

__all__ = ["ApprovalRecord", "ApprovalRequests", "ApprovalStatus", "Decision"]

_A = approvals_table
_CANCEL_TURN = (
    update(_A)
    .where(_A.c.session_id == bindparam("b_session"), _A.c.turn_id == bindparam("b_turn"),
           _A.c.status == "pending")
    .values(status="cancelled", decided_at=bindparam("b_now"))
)
_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: typed by hand
_SHORT_LEN = 6

ApprovalStatus = Literal["pending", "approved", "denied", "expired", "cancelled"]


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, kw_only=True)
class ApprovalRecord:
    id: int
    short_id: str
    session_id: str
    turn_id: str
    call_id: str
    thread_key: str
    platform: str
    workspace: str
    channel: str
    thread_root: str
    tool: str
    args: Mapping[str, Any]
    summary: str
    requested_by: str
    requested_by_name: str
    approvers: tuple[str, ...]
    status: ApprovalStatus
    message_id: str | None
    decided_by: str
    decided_by_name: str
    requested_at: int
    expires_at: int
    decided_at: int | None

    @property
    def pending(self) -> bool:
        return self.status == "pending"


@dataclass(frozen=True, kw_only=True)
class Decision:
    """The outcome of a decision attempt: the row as it is now, and whether this attempt is
    the one that changed it (False: decided before, expired, or not an approver)."""

    record: ApprovalRecord
    applied: bool


def _record(r: Any) -> ApprovalRecord:
    return ApprovalRecord(
        id=r.id, short_id=r.short_id, session_id=r.session_id, turn_id=r.turn_id,
        call_id=r.call_id, thread_key=r.thread_key, platform=r.platform,
        workspace=r.workspace, channel=r.channel, thread_root=r.thread_root, tool=r.tool,
        args=dict(r.args or {}), summary=r.summary, requested_by=r.requested_by,
        requested_by_name=r.requested_by_name,
        approvers=tuple(str(a) for a in (r.approvers or ())), status=r.status,
        message_id=r.message_id, decided_by=r.decided_by, decided_by_name=r.decided_by_name,
        requested_at=r.requested_at, expires_at=r.expires_at, decided_at=r.decided_at,
    )


class ApprovalRequests:
    """The approval requests of the channel layer."""

    def __init__(self, *, store: Database) -> None:
        self._store = store
        #: (session, turn) of the turns that opened (or found) a request in this process:
        #: the only non-resumed turns :meth:`end_turn` has anything to cancel for
        self._asked: set[tuple[str, str]] = set()

    async def open(
        self, *, session_id: str, turn_id: str, call_id: str, thread_key: str, platform: str,
        workspace: str, channel: str, thread_root: str, tool: str, args: Mapping[str, Any],
        summary: str, requested_by: str, requested_by_name: str, approvers: Sequence[str],
        timeout_s: float, now_ms: int | None = None,
    ) -> ApprovalRecord:
        """The request for this proposed call: a new pending row, or the existing one (in
        whatever state it is now) when the call was asked about before."""
        self._asked.add((session_id, turn_id))  # before the row: an error after its insert
        existing = await self.for_call(session_id, call_id)
        if existing is not None:
            return existing
        now = _now_ms() if now_ms is None else now_ms
        for _ in range(8):  # a short id collision is rare; another draw fixes it
            short = "".join(secrets.choice(_ALPHABET) for _ in range(_SHORT_LEN))
            try:
                async with self._store.write() as conn:
                    await conn.execute(insert(_A).values(
                        short_id=short, session_id=session_id, turn_id=turn_id,
                        call_id=call_id, thread_key=thread_key, platform=platform,
                        workspace=workspace, channel=channel, thread_root=thread_root,
                        tool=tool, args=redact(dict(args)), summary=summary,  # at rest: masked
                        requested_by=requested_by, requested_by_name=requested_by_name,
                        approvers=[str(a) for a in approvers], status="pending",
                        message_id=None, decided_by="", decided_by_name="",
                        requested_at=now, expires_at=now + int(timeout_s * 1000),
                        decided_at=None,
                    ))
            except IntegrityError:
                existing = await self.for_call(session_id, call_id)
                if existing is not None:  # another replica opened it first
                    return existing
                continue
            record = await self.for_call(session_id, call_id)
            assert record is not None
            return record
        raise RuntimeError("could not draw a unique approval short id")

    async def _one(self, *where: Any) -> ApprovalRecord | None:
        async with self._store.read() as conn:
            row = (await conn.execute(select(_A).where(*where).limit(1))).first()
        return None if row is None else _record(row)

    async def get(self, request_id: int) -> ApprovalRecord | None:
        return await self._one(_A.c.id == request_id)

    async def for_call(self, session_id: str, call_id: str) -> ApprovalRecord | None:
        return await self._one(_A.c.session_id == session_id, _A.c.call_id == call_id)

    async def by_short_id(self, short_id: str) -> ApprovalRecord | None:
        return await self._one(_A.c.short_id == short_id.strip().upper())

    async def by_message(
        self, platform: str, workspace: str, channel: str, message_id: str
    ) -> ApprovalRecord | None:
        """The request posted as this message (a reply to it, a click on its buttons)."""
        return await self._one(
            _A.c.platform == platform, _A.c.workspace == workspace, _A.c.channel == channel,
            _A.c.message_id == message_id,
        )

    async def set_message(self, request_id: int, message_id: str) -> None:
        """Remember the posted request message (replies and clicks find the request by it)."""
        async with self._store.write() as conn:
            await conn.execute(
                update(_A).where(_A.c.id == request_id).values(message_id=message_id)
            )

    async def pending(self, *, platform: str | None = None) -> list[ApprovalRecord]:
        """Requests still waiting (oldest first): what a restarted replica resumes."""
        q = select(_A).where(_A.c.status == "pending")
        if platform is not None:
            q = q.where(_A.c.platform == platform)
        async with self._store.read() as conn:
            rows = (await conn.execute(q.order_by(_A.c.id))).all()
        return [_record(r) for r in rows]

    async def for_session(self, session_id: str) -> list[ApprovalRecord]:
        """A session's requests, oldest first (``geode sessions show``)."""
        async with self._store.read() as conn:
            rows = (await conn.execute(
                select(_A).where(_A.c.session_id == session_id).order_by(_A.c.id)
            )).all()
        return [_record(r) for r in rows]

    async def decide(
        self, request_id: int, *, approve: bool, by: str, by_name: str = "",
        now_ms: int | None = None,
    ) -> Decision:
        """Approve or deny as ``by``. Applied only when the request is pending, unexpired and
        ``by`` is one of its approvers; otherwise nothing changes (``applied`` False)."""
        now = _now_ms() if now_ms is None else now_ms
        current = await self.get(request_id)
        if current is None:
            raise KeyError(request_id)
        if str(by) not in current.approvers:
            return Decision(record=current, applied=False)
        return await self._transition(
            request_id, "approved" if approve else "denied", by=str(by), by_name=by_name,
            now=now, unexpired=True,
        )

    async def expire(self, request_id: int, *, now_ms: int | None = None) -> Decision:
        """Mark a pending request whose time is up as expired (a denial)."""
        now = _now_ms() if now_ms is None else now_ms
        async with self._store.write() as conn:
            result = await conn.execute(
                update(_A).where(_A.c.id == request_id, _A.c.status == "pending",
                                 _A.c.expires_at <= now)
                .values(status="expired", decided_at=now)
            )
        return await self._decision(request_id, bool(result.rowcount))

    async def cancel(self, request_id: int, *, now_ms: int | None = None) -> Decision:
        """The turn stopped (``/stop``) while the request waited."""
        now = _now_ms() if now_ms is None else now_ms
        return await self._transition(request_id, "cancelled", by="", by_name="", now=now,
                                      unexpired=False)

    async def end_turn(self, session_id: str, turn_id: str, *, resumed: bool) -> int:
        """The turn ended: cancel its requests still pending (nobody waits on them any more).

        Only a turn that may own one runs the statement: one resumed after a restart (its
        requests were opened by the process before) or one that opened a request in this
        process. Any other turn asked nothing (every request goes through :meth:`open`,
        which notes its turn before writing the row), and nearly every turn is one: the
        statement was a write transaction on every reply. Returns how many were cancelled.
        """
        key = (session_id, turn_id)
        if not resumed and key not in self._asked:
            return 0
        cancelled = await self.cancel_turn(session_id, turn_id)
        self._asked.discard(key)
        return cancelled

    async def cancel_turn(self, session_id: str, turn_id: str, *,
                          now_ms: int | None = None) -> int:
        """Cancel the pending requests of a turn (ended, or recovered: its process died
        while they waited; nobody waits on them any more). Returns how many."""
        now = _now_ms() if now_ms is None else now_ms
        params = {"b_session": session_id, "b_turn": turn_id, "b_now": now}
        # One statement built once, group-committed with the other writers (an
        # async-engine transaction of its own held the writer lock alone).
        return await self._store.run_write(
            lambda conn: int(conn.execute(_CANCEL_TURN, params).rowcount or 0))

    async def _transition(
        self, request_id: int, status: ApprovalStatus, *, by: str, by_name: str, now: int,
        unexpired: bool,
    ) -> Decision:
        where = [_A.c.id == request_id, _A.c.status == "pending"]
        if unexpired:
            where.append(_A.c.expires_at > now)
        async with self._store.write() as conn:
            result = await conn.execute(
                update(_A).where(*where).values(
                    status=status, decided_by=by, decided_by_name=by_name, decided_at=now,
                )
            )
        return await self._decision(request_id, bool(result.rowcount))

    async def _decision(self, request_id: int, applied: bool) -> Decision:
        record = await self.get(request_id)
        if record is None:
            raise KeyError(request_id)
        return Decision(record=record, applied=applied)
