from __future__ import annotations

import os

import structlog

from geode.loop.events import LoopEvent, ObservedLoopEvent
from geode.loop.protocols import TurnInfo
from geode.loop.state import RunDeps, RunState

log = structlog.get_logger(__name__)


def new_id(prefix: str) -> str:
    # secrets.token_hex(6) is exactly this; the secrets module (with hmac) costs ~2 ms to import
    return f"{prefix}-{os.urandom(6).hex()}"


def turn_info(deps: RunDeps, state: RunState, correlation_id: str = "") -> TurnInfo:
    return TurnInfo(
        session_id=deps.session_id,
        turn_id=state.turn_id,
        round=state.round,
        correlation_id=correlation_id or f"{state.turn_id}:r{state.round}",
        mode=deps.mode,
    )


def observe(deps: RunDeps, event: ObservedLoopEvent) -> None:
    """Tell the observers only (metrics, traces), not the timeline or the driver's event
    stream: alone, for facts no terminal or channel shows (a model call's start and its
    outcome); :func:`emit` calls it for the others."""
    if deps.observer is not None:
        try:
            deps.observer.loop_event(deps.session_id, event)
        except Exception:
            pass


async def emit(deps: RunDeps, event: LoopEvent) -> None:
    """Record a loop event on the turn's timeline, send it to the observers and the
    driver; none of them can break the turn."""
    if deps.timeline is not None:
        try:
            deps.timeline.record(event)
        except Exception:
            log.warning("timeline row not built", kind=event.kind, exc_info=True)
    observe(deps, event)
    if deps.on_event is not None:
        try:
            await deps.on_event(event)
        except Exception:
            log.debug("event sink failed", kind=event.kind, exc_info=True)
