"""Feeds the EvidenceLedger from lifecycle events: observation only, never a decision.

Rows: ``tool_denied`` (which check, why), ``tool_finished`` (status), ``final_result``
(termination, rounds). Payloads are redacted and hashed by the ledger; the argument
values themselves are not written, only their names, so a row can be correlated with
the timeline without copying what a tool was given.

The events arrive typed (the executor's :class:`~geode.hooks.events.ToolDenied` /
:class:`~geode.hooks.events.ToolFinished`, the loop's :class:`~geode.loop.events.TurnFinished`);
each row is appended in the executor; the :class:`~geode.hooks.HookSystem` tracks its
future (``drain`` waits, a failure is logged).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from geode.hooks.events import ObservedEvent, ToolDenied, ToolFinished
from geode.loop.events import ObservedLoopEvent, TurnFinished
from geode.store.ledger import EvidenceLedger

if TYPE_CHECKING:
    from geode.hooks.system import HookSystem

__all__ = ["LedgerObserver"]


class LedgerObserver:
    def __init__(self, ledger: EvidenceLedger) -> None:
        self.ledger = ledger

    def attach(self, observers: HookSystem) -> None:
        observers.subscribe_events(self.on_event, only=(ToolFinished, ToolDenied))
        observers.subscribe_loop(self.on_loop_event, only=(TurnFinished,))

    def on_event(self, event: ObservedEvent) -> Awaitable[object] | None:
        match event:
            case ToolFinished(status=status):
                outcome = status
                payload: dict[str, Any] = {"status": status}
            case ToolDenied(check=check, reason=reason):
                outcome = check
                payload = {"check": check, "reason": reason}
            case _:
                return None
        if not event.session_id:
            return None
        return self._append(
            event.kind, session_id=event.session_id, turn_id=event.turn_id,
            kind=event.kind.replace(".", "_"), summary=f"{event.tool}: {outcome}",
            payload={"call_id": event.call_id, "tool": event.tool, **payload},
        )

    def on_loop_event(self, session_id: str, event: ObservedLoopEvent
                      ) -> Awaitable[object] | None:
        if not isinstance(event, TurnFinished) or not session_id:
            return None
        return self._append(
            event.kind, session_id=session_id, turn_id=event.turn_id, kind="final_result",
            summary=f"{event.termination} after {event.rounds} round(s)",
            payload={"termination": event.termination, "rounds": event.rounds,
                     "detail": event.detail},
        )

    def _append(self, event: str, *, session_id: str, turn_id: str, kind: str,
                summary: str, payload: dict[str, Any]) -> Awaitable[Any]:
        # The executor's future itself (no task around it): HookSystem waits for it in
        # drain() and logs its failure as this observer's.
        return self.ledger.submit(session_id=session_id, turn_id=turn_id, kind=kind,
                                  summary=summary, payload=payload)
