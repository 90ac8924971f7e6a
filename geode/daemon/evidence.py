"""Feeds the EvidenceLedger from lifecycle events: observation only, never a decision.

Rows: ``tool_denied`` (which check, why), ``tool_finished`` (status), ``final_result``
(termination, rounds). Payloads are redacted and hashed by the ledger; the argument
values themselves are not written, only their names, so a row can be correlated with
the timeline without copying what a tool was given.
"""

from __future__ import annotations

from typing import Any

import structlog

from geode.store.ledger import EvidenceLedger

__all__ = ["LedgerObserver"]

log = structlog.get_logger(__name__)

_EVENTS = r"^(tool\.denied|tool\.finished|turn_finished)$"


class LedgerObserver:
    def __init__(self, ledger: EvidenceLedger) -> None:
        self.ledger = ledger

    def attach(self, observers: Any) -> None:
        observers.subscribe(self, events=_EVENTS)

    async def __call__(self, event: str, data: Any) -> None:
        session_id = str(data.get("session_id") or "")
        if not session_id:
            return
        try:
            if event == "turn_finished":
                await self.ledger.append(
                    session_id=session_id,
                    turn_id=str(data.get("turn_id", "")),
                    kind="final_result",
                    summary=f"{data.get('termination')} after {data.get('rounds')} round(s)",
                    payload={k: data.get(k) for k in ("termination", "rounds", "detail")},
                )
            else:
                kind = event.replace(".", "_")
                payload = {k: data.get(k) for k in ("call_id", "tool", "status", "check", "reason")}
                await self.ledger.append(
                    session_id=session_id,
                    turn_id=str(data.get("turn_id", "")),
                    kind=kind,
                    summary=f"{data.get('tool')}: {data.get('status') or data.get('check')}",
                    payload={k: v for k, v in payload.items() if v is not None},
                )
        except Exception:
            log.warning("ledger append failed", event=event, exc_info=True)
