"""The harness port: what a host of remote entry points (the channel layer) gets from the
harness, as typed values.

A caller runs a turn with :class:`~geode.daemon.session.SessionContext` (everything the
turn needs given at construction: neutral :class:`SessionOverrides`, a neutral
:class:`Claim` fencing its writes and an :class:`OpeningNote`), then asks what happened through
:meth:`HarnessPort.turn_outcome` and :meth:`HarnessPort.session_status`; it never reads the
loop's checkpoint dict or holds the session: what the turn does comes back as typed loop
events through the one ``on_event`` stream, ``/stop`` goes through :meth:`HarnessPort.stop_turn`.
Refusals are :class:`~geode.errors.LaneBusy` / :class:`~geode.errors.NotAdmitted` /
:class:`~geode.errors.ShuttingDown` (``GeodeError`` tree); approvals go through the
executor's ``Approver`` protocol.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from geode.daemon.port_values import (
    Claim,
    OpeningNote,
    SessionOverrides,
    SessionStatus,
    TurnOutcome,
    WriteFence,
)

if TYPE_CHECKING:
    from geode.daemon.display import ComputerDisplay
    from geode.daemon.lanes import LaneKind, QueueObserver
    from geode.daemon.session import SessionContext
    from geode.loop import TurnResult
    from geode.messages import ImageBlock
    from geode.settings import SpendCaps

__all__ = [
    "Admission",
    "Claim",
    "HarnessPort",
    "OpeningNote",
    "SessionOverrides",
    "SessionStatus",
    "TurnOutcome",
    "WriteFence",
]

#: Awaited once the turn holds its lanes, before its session opens: False and the turn does
#: not run (:class:`~geode.errors.NotAdmitted`). One durable decision of the caller's, e.g. a
#: queued channel message claimed, which ``geode queue drop`` may have taken meanwhile.
Admission = Callable[[], Awaitable[bool]]


class HarnessPort(Protocol):
    """What the channel layer needs from ``geode serve`` (:class:`geode.daemon.Daemon`)."""

    @property
    def workspace(self) -> Path: ...

    @property
    def home(self) -> Path:
        """``$GEODE_HOME``: channel bindings' own workspaces live under it."""
        ...

    @property
    def computer(self) -> ComputerDisplay | None:
        """The X display of computer-use bindings and its one-turn-at-a-time lock (None:
        no binding enables computer use)."""
        ...

    async def run_turn(
        self,
        ctx: SessionContext,
        prompt: str,
        *,
        kind: LaneKind,
        lane_key: str | None = None,
        admit: Admission | None = None,
        turn_id: str | None = None,
        resume: bool = False,
        images: Sequence[ImageBlock] = (),
        on_queued: QueueObserver | None = None,
        queue_order: int | None = None,
    ) -> TurnResult: ...

    def stop_turn(self, session_id: str) -> bool:
        """Stop the turn running in ``session_id`` (``/stop``): it ends ``cancelled``. False:
        none runs there now (not yet started, or already ended)."""
        ...

    async def turn_outcome(self, session_id: str, turn_id: str) -> TurnOutcome: ...

    async def session_status(self, session_id: str) -> SessionStatus: ...

    async def usage_status(self, *, scope: str, caps: SpendCaps, thread: str = "",
                           platform: str = "", user: str = "") -> list[str]:
        """Today's usage under ``scope`` against its per-day caps (``/status`` lines); with
        ``thread`` (a thread key) and ``user`` (on ``platform``), theirs too (``/usage``)."""
        ...
