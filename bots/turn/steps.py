"""The typed values of a chat turn: what its phases use, and the steps they hand each other.

Each phase returns the next step; the driver (:mod:`bots.turn.driver`) is a ``match`` over
them. A new turn walks ``Accept -> Prepared -> Answered -> Ready -> Done``; a turn a
previous process accepted starts at ``Recover`` and walks on from what its records say.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bots.approvals import ApprovalWaiters
    from bots.commands import ActiveTurn
    from bots.options import LayerOptions
    from bots.port import PlatformClient, TurnHost
    from bots.store import (
        ApprovalRequests,
        AttachmentRecords,
        ChannelQueue,
        InboundLog,
        MessageIndex,
        Outbox,
        OutboxRow,
        StoredEvent,
        ThreadLeases,
        ThreadSessions,
    )
    from bots.uploads import FileSender
    from geode.daemon.port import Claim, SessionOverrides
    from geode.messages import ImageBlock
    from geode.settings import BindingSettings
    from geode.tools.base import ToolDef

__all__ = [
    "Accept",
    "Answered",
    "Done",
    "Dropped",
    "LaneEntry",
    "Prepared",
    "Ready",
    "Recover",
    "RowDelivery",
    "Step",
    "Turn",
    "TurnDeps",
]


class RowDelivery(Protocol):
    """Delivers a ``ready`` outbox row (:class:`bots.turn.deliver.Deliverer`)."""

    async def deliver(self, row: OutboxRow) -> OutboxRow: ...


class LaneEntry(Protocol):
    """The order turns enter the lanes in (:class:`bots.turn.run.EntryOrder`)."""

    async def wait_turn(self, key: int) -> None: ...

    def entered(self, key: int) -> None: ...


@dataclass(frozen=True, kw_only=True, repr=False)
class TurnDeps:
    """What running a channel turn uses (given at construction, never looked up).

    No field-by-field repr: it would print the layer's whole object graph (every running
    turn's session) into each traceback that shows a phase's locals."""

    client: PlatformClient
    host: TurnHost
    inbound: InboundLog
    outbox: Outbox
    deliverer: RowDelivery
    threads: ThreadSessions
    index: MessageIndex
    thread_leases: ThreadLeases
    options: LayerOptions
    #: the turns running now, by thread key (``/stop`` and ``/status`` read it)
    active: dict[str, ActiveTurn]
    #: test seam: called at named points; a test raises there to simulate a crash (None:
    #: no test listens, and the turn calls nothing)
    fault: Callable[[str], None] | None
    #: approval requests of the binding's ``approve`` tools, and the waits to wake
    approvals: ApprovalRequests
    waiters: ApprovalWaiters
    #: the order turns enter the lanes in
    entry: LaneEntry
    #: the claim a turn takes as it gets its lanes (``geode queue drop`` may have won it)
    queue: ChannelQueue
    #: files into the thread, exactly once (``send_file``; approvals' full diffs)
    files: FileSender
    #: what was received of each event's attachments (a recovered turn goes by it)
    attachments: AttachmentRecords
    #: more channel-only tools for the turns' sessions (the ``schedule`` tool)
    chat_tools: tuple[ToolDef, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Turn:
    """One accepted turn's facts, fixed before it shows anything in the thread (the run and
    deliver phases read them here instead of asking the event, the bindings or the leases
    again)."""

    stored: StoredEvent
    row: OutboxRow
    binding: BindingSettings
    #: the event's thread key (``/stop`` and ``/status`` find the running turn by it)
    thread: str
    #: this replica's claim on the thread, checked inside each of the turn's writes
    fence: Claim
    #: the binding's own folder (its file tools and sandbox see nothing of other channels)
    workspace: Path
    #: the binding's session settings as the harness's overrides (the thread's ``/model``
    #: choice is put in by the run phase)
    overrides: SessionOverrides
    #: resumed in place from its checkpoint
    resume: bool = False
    #: a previous process accepted it (its placeholder is reused and says it resumed)
    recovered: bool = False

    def __repr__(self) -> str:
        # what names the turn, not its records (a traceback shows it in every phase's frame)
        return (f"Turn(thread={self.thread!r}, event={self.stored.id}, row={self.row.id}, "
                f"resume={self.resume}, recovered={self.recovered})")


# -- the steps ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Recover:
    """A turn a previous process accepted and did not finish (a restart, a takeover)."""

    stored: StoredEvent
    row: OutboxRow
    #: None: the channel is no longer bound
    binding: BindingSettings | None


@dataclass(frozen=True, kw_only=True)
class Accept:
    """A turn to run (``prompt``: given, not composed from the event)."""

    stored: StoredEvent
    row: OutboxRow
    binding: BindingSettings
    prompt: str | None = None
    resume: bool = False
    recovered: bool = False


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """The turn's input: its prompt, the images of its attachments and what the user is
    told about attachments that were not read."""

    turn: Turn
    prompt: str
    images: tuple[ImageBlock, ...] = ()
    notices: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Answered:
    """The text the thread gets for the turn, masked (the harness masks what it hands back,
    the layer what it adds), not yet rendered or recorded."""

    row: OutboxRow
    fence: Claim
    text: str


@dataclass(frozen=True, kw_only=True)
class Dropped:
    """``geode queue drop`` took the turn before it ran: its notice is the recorded answer."""

    row: OutboxRow


@dataclass(frozen=True, kw_only=True)
class Ready:
    """The answer is recorded (``ready``): deliver it (idempotent edits)."""

    row: OutboxRow
    #: recorded by this turn just now (not found ``ready`` by a recovery or a drop)
    fresh: bool = False


@dataclass(frozen=True)
class Done:
    """Nothing more to do for the turn (delivered, finished elsewhere, or failed)."""

    why: str = "delivered"


Step = Recover | Accept | Prepared | Answered | Dropped | Ready | Done
