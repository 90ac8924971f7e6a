"""What the executor needs from the durable records and from a human, as Protocols.

The store implements :class:`ReceiptStore` and :class:`TimelineSink` durably; the REPL and
the IPC bridge implement :class:`Approver`. The in-memory versions here serve tests and
runs without a store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from geode.executor.decisions import ApprovalAnswer, ApprovalRequest

__all__ = [
    "Approver",
    "MemoryReceiptStore",
    "MemoryResults",
    "MemoryTimeline",
    "PreImages",
    "ReceiptRecord",
    "ReceiptStore",
    "ResultKeeper",
    "TimelineEntry",
    "TimelineSink",
]

ReceiptStatus = Literal["intended", "done", "failed", "uncertain"]


@runtime_checkable
class ReceiptStore(Protocol):
    """Effect receipts: ``intend`` before an effectful call is dispatched, ``finish`` after.

    A receipt left ``intended`` (crash) or ``uncertain`` (timeout) is never re-executed
    automatically; it is reconciled. ``approved_by`` / ``approved_by_name``: the channel
    approver who said yes to the call (platform id, display name), empty otherwise.
    """

    async def intend(
        self, *, session_id: str, turn_id: str, call_id: str, tool: str, args_hash: str,
        approved_by: str = "", approved_by_name: str = "",
    ) -> None: ...

    async def finish(
        self,
        *,
        session_id: str,
        call_id: str,
        status: Literal["done", "failed", "uncertain"],
        detail: str = "",
    ) -> None: ...


class PreImages(Protocol):
    """Keeps what an effectful call may change in its workspace before it runs, so a
    rewind can put it back (``geode.rewind.PreImageRecorder``). Neither method raises."""

    async def before(self, *, ctx: Any, tool: Any, keys: Sequence[str]) -> object | None: ...

    async def after(self, token: object | None) -> None: ...


@runtime_checkable
class TimelineSink(Protocol):
    """The append-only SessionTimeline (observation, never replayed)."""

    async def append(
        self,
        *,
        session_id: str,
        turn_id: str,
        kind: str,
        correlation_id: str = "",
        payload: dict[str, Any] | None = None,
    ) -> None: ...


@runtime_checkable
class Approver(Protocol):
    """Asks the human (REPL / IPC) or a channel's approvers; returns ``"allow"``,
    ``"deny"``, ``"always"``, or an :class:`ApprovalAnswer` naming who decided."""

    async def __call__(
        self, request: ApprovalRequest
    ) -> Literal["allow", "deny", "always"] | ApprovalAnswer: ...


@dataclass(kw_only=True)
class ReceiptRecord:
    session_id: str
    turn_id: str
    call_id: str
    tool: str
    args_hash: str
    status: ReceiptStatus = "intended"
    detail: str = ""
    approved_by: str = ""
    approved_by_name: str = ""


class ResultKeeper(Protocol):
    """Keeps the whole (redacted) text of a tool result over the size limit, and reads it
    back for its own session only (``geode.store.results.KeptResultStore``)."""

    async def keep(
        self, *, result_id: str, session_id: str, turn_id: str, call_id: str, tool: str,
        text: str,
    ) -> None: ...

    async def read(self, *, session_id: str, result_id: str) -> str | None: ...


class MemoryResults:
    """A ``ResultKeeper`` in memory (sessions without a store, tests)."""

    def __init__(self) -> None:
        self.kept: dict[str, tuple[str, str]] = {}

    async def keep(
        self, *, result_id: str, session_id: str, turn_id: str, call_id: str, tool: str,
        text: str,
    ) -> None:
        self.kept[result_id] = (session_id, text)

    async def read(self, *, session_id: str, result_id: str) -> str | None:
        owner, text = self.kept.get(result_id, ("", ""))
        return text if owner == session_id and result_id in self.kept else None


class MemoryReceiptStore:
    """Receipts in a dict, for tests and store-less runs."""

    def __init__(self) -> None:
        self.records: dict[str, ReceiptRecord] = {}

    async def intend(
        self, *, session_id: str, turn_id: str, call_id: str, tool: str, args_hash: str,
        approved_by: str = "", approved_by_name: str = "",
    ) -> None:
        if call_id in self.records:
            # The same call id twice would mean an effect replay: refuse loudly.
            raise ValueError(f"receipt for call {call_id!r} already exists")
        self.records[call_id] = ReceiptRecord(
            session_id=session_id, turn_id=turn_id, call_id=call_id, tool=tool,
            args_hash=args_hash, approved_by=approved_by, approved_by_name=approved_by_name,
        )

    async def finish(
        self,
        *,
        session_id: str,
        call_id: str,
        status: Literal["done", "failed", "uncertain"],
        detail: str = "",
    ) -> None:
        rec = self.records[call_id]
        rec.status = status
        rec.detail = detail

    def unresolved(self) -> list[ReceiptRecord]:
        """Receipts needing reconciliation: intended but never finished, or uncertain."""
        return [r for r in self.records.values() if r.status in ("intended", "uncertain")]


@dataclass(frozen=True, kw_only=True)
class TimelineEntry:
    session_id: str
    turn_id: str
    kind: str
    correlation_id: str = ""
    payload: dict[str, Any] = field(default_factory=dict)


class MemoryTimeline:
    """A SessionTimeline in a list, for tests and store-less runs."""

    def __init__(self) -> None:
        self.entries: list[TimelineEntry] = []

    async def append(
        self,
        *,
        session_id: str,
        turn_id: str,
        kind: str,
        correlation_id: str = "",
        payload: dict[str, Any] | None = None,
    ) -> None:
        self.entries.append(
            TimelineEntry(
                session_id=session_id, turn_id=turn_id, kind=kind,
                correlation_id=correlation_id, payload=dict(payload or {}),
            )
        )

    async def append_many(
        self, *, session_id: str, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        for r in rows:
            await self.append(session_id=session_id, turn_id=str(r.get("turn_id", "")),
                              kind=str(r["kind"]),
                              correlation_id=str(r.get("correlation_id", "")),
                              payload=dict(r.get("payload") or {}))

    def kinds(self, call_id: str | None = None) -> list[str]:
        """Entry kinds in order, optionally only those about one call."""
        return [
            e.kind for e in self.entries
            if call_id is None or e.payload.get("call_id") == call_id
        ]
