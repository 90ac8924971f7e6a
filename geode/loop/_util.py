from __future__ import annotations

import secrets
from typing import Any

import structlog

from geode.loop.protocols import TurnInfo
from geode.loop.state import RunDeps, RunState
from geode.messages import ToolResultBlock

log = structlog.get_logger(__name__)

DENIAL_PREFIX = "denied by "


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


def turn_info(deps: RunDeps, state: RunState, correlation_id: str = "") -> TurnInfo:
    return TurnInfo(
        session_id=deps.session_id,
        turn_id=state.turn_id,
        round=state.round,
        correlation_id=correlation_id or f"{state.turn_id}:r{state.round}",
        mode=deps.mode,
    )


def result_status(result: ToolResultBlock) -> str:
    if not result.is_error:
        return "ok"
    return "denied" if result.text_content.startswith(DENIAL_PREFIX) else "error"


def observe(deps: RunDeps, kind: str, **data: Any) -> None:
    """Tell the observers only (metrics, traces, ledger), not the driver's event stream:
    for facts no terminal or channel shows, e.g. a model call's start and its usage."""
    if deps.observer is not None:
        try:
            deps.observer.emit(kind, session_id=deps.session_id, **data)
        except Exception:
            pass


async def emit(deps: RunDeps, kind: Any, **data: Any) -> None:
    """Send a loop event to the driver and the observers; neither can break the turn."""
    from geode.loop.events import LoopEvent

    if deps.observer is not None:
        try:
            deps.observer.emit(kind, session_id=deps.session_id, **data)
        except Exception:
            pass
    if deps.on_event is not None:
        try:
            await deps.on_event(LoopEvent(kind, data))
        except Exception:
            log.debug("event sink failed", kind=kind, exc_info=True)
