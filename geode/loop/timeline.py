"""The turn's own rows of the SessionTimeline, built from its typed events.

Rows: ``turn.started`` (source, sender where there is one), ``model.call`` (model,
tokens, latency, outcome), ``tool.proposed``, ``verify`` (the decision), ``loop.guard`` (a
stuck-loop guard's note or stop, with its count and limit), ``turn.finished`` (termination,
rounds, usage). The executor writes ``tool.denied`` (with the check), ``tool.result_cut``
(a result over the size limit: its sizes, the cut and its result id),
``tool.started`` and ``tool.finished`` itself, as the calls cross its checks.

Observation, never replayed: rows are buffered and appended at two points, just before a
tool batch is handed to the executor (so they come before its tool rows) and when the turn
ends; the append rides in the store's next write transaction (SQLite; in a savepoint of its
own, so it can fail nothing else) or is written at once (PostgreSQL). A crash loses the
rows of the unfinished step, never a checkpoint. A failed append is logged and dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import structlog

from geode.loop.events import (
    LoopEvent,
    LoopGuard,
    ModelFailed,
    ModelResponded,
    ToolProposed,
    TurnFinished,
    TurnStarted,
    VerifyFailed,
    VerifyPassed,
)

__all__ = ["TimelineWriter", "TurnTimeline", "timeline_row_for"]

log = structlog.get_logger(__name__)


class TimelineWriter(Protocol):
    """Appends prepared rows (``turn_id``, ``kind``, ``payload``) of one session at once."""

    async def append_many(self, *, session_id: str, rows: Sequence[Mapping[str, Any]]) -> None: ...


def timeline_row_for(
    event: LoopEvent, *, source: str, sender: str | None
) -> tuple[str, dict[str, Any]] | None:
    """The ``(kind, payload)`` of the row an event becomes, or None for events with none."""
    match event:
        case TurnStarted():
            payload: dict[str, Any] = {"source": source}
            if sender:
                payload["sender"] = sender
            if event.resumed:
                payload["resumed"] = True
                payload["recoveries"] = event.recoveries
            return "turn.started", payload
        case ModelResponded():
            return "model.call", {
                "model": event.model, "outcome": "ok", "stop_reason": event.stop_reason,
                "input_tokens": event.input_tokens, "output_tokens": event.output_tokens,
                "latency_ms": round(event.latency_s * 1000, 1),
            }
        case ModelFailed():
            return "model.call", {
                "model": event.model, "outcome": event.error_kind, "detail": event.detail,
                "latency_ms": round(event.latency_s * 1000, 1),
            }
        case ToolProposed():
            # argument names only: values may be large or sensitive (the transcript has them)
            return "tool.proposed", {"call_id": event.id, "tool": event.name,
                                     "arguments": sorted(event.input)}
        case LoopGuard():
            return "loop.guard", {"guard": event.guard, "action": event.action,
                                  "count": event.count, "limit": event.limit, "tool": event.tool}
        case VerifyPassed():
            return "verify", {"decision": "passed"}
        case VerifyFailed():
            return "verify", {"decision": "failed", "reason": event.reason,
                              "attempt": event.attempt}
        case TurnFinished():
            return "turn.finished", {
                "termination": event.termination, "rounds": event.rounds,
                "input_tokens": event.input_tokens, "output_tokens": event.output_tokens,
                "cost_usd": event.cost_usd, "detail": event.detail,
            }
        case _:
            return None


class TurnTimeline:
    """Buffers one session's turn rows from its events; :meth:`flush` appends them."""

    def __init__(
        self, *, writer: TimelineWriter, session_id: str, source: str, sender: str | None = None
    ) -> None:
        self._writer = writer
        self.session_id = session_id
        self.source = source
        self.sender = sender
        self._turn_id = ""
        self._rows: list[dict[str, Any]] = []

    def record(self, event: LoopEvent) -> None:
        if isinstance(event, TurnStarted):
            self._turn_id = event.turn_id
        row = timeline_row_for(event, source=self.source, sender=self.sender)
        if row is not None:
            kind, payload = row
            self._rows.append({"turn_id": self._turn_id, "kind": kind, "payload": payload})

    async def flush(self) -> None:
        """Append the buffered rows in one write; a failure is logged, never raised."""
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        try:
            await self._writer.append_many(session_id=self.session_id, rows=rows)
        except Exception:  # observation must never break a run
            log.warning("timeline.turn_rows_dropped", rows=len(rows), exc_info=True)
