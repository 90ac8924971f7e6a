"""The values that cross the harness port (:mod:`geode.daemon.port`): what a caller gives a
session (neutral :class:`SessionOverrides`, the :data:`WriteFence` claim, an
:class:`OpeningNote`) and what it is told about turns and sessions (:class:`TurnOutcome`,
:class:`SessionStatus`).

A leaf module: the session and its builders use these values, and the port, which names the
session, re-exports them, so nothing here imports the session back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from geode.store.claim import Claim

if TYPE_CHECKING:
    from geode.settings import SpendCaps

__all__ = [
    "Claim",
    "OpeningNote",
    "SessionOverrides",
    "SessionStatus",
    "TurnOutcome",
    "TurnState",
    "WriteFence",
]

#: The claim checked first inside each of a session's checkpoint transactions; raising
#: aborts the write (a channel turn's: this replica still holds the thread). A neutral
#: value: its holder never sees the store's transaction.
WriteFence = Claim



@dataclass(frozen=True, kw_only=True)
class SessionOverrides:
    """Neutral per-caller adjustments of a session (a channel binding maps onto these).

    Attributes:
        model: model id instead of the configured default (``SessionContext.model`` wins).
        prompt_addition: appended to the system prompt's rules.
        tools: an allow-list narrowing the mode's tools (None: the mode's own set).
        computer_use: the DAEMON computer-use switch (off unless the operator set it).
        approve: tools offered that run only after an approver says yes for each call
            (the session's ``Approver`` asks; without one every such call is denied).
        time_budget_s: the turn's time budget instead of the configured one.
        spend_caps: caps of this caller's own (a channel binding's), checked with
            ``[budgets]`` before every model call.
        spend_scope: the key its usage and caps count under (a binding's
            ``platform:channel``); empty: none.
        display: the X display its ``computer`` tool drives (None: ``$DISPLAY``).
        approve_actions: for a tool in ``approve``, the values of its ``action`` argument
            that ask; its other actions run without asking (a binding's
            ``approve_computer_actions``). A tool not named here asks on every call.
        skills: the skills offered, by name (None: every installed skill; a binding's
            ``skills``).
        memory: what its turns remember (a binding's ``memory``): "user" shows and writes
            the memory of the session's ``user`` on its ``source`` platform, "channel" that
            and the memory of ``spend_scope`` (the binding); "off": none.
    """

    model: str | None = None
    prompt_addition: str = ""
    tools: Sequence[str] | None = None
    computer_use: bool = False
    approve: Sequence[str] = ()
    time_budget_s: float | None = None
    spend_caps: SpendCaps | None = None
    spend_scope: str = ""
    display: str | None = None
    approve_actions: Mapping[str, frozenset[str]] = field(default_factory=dict)
    skills: Sequence[str] | None = None
    memory: Literal["off", "user", "channel"] = "off"


@dataclass(frozen=True, kw_only=True)
class OpeningNote:
    """A timeline row written in the same transaction as the turn's first checkpoint (the
    one holding the user's message): who said it, on which platform message."""

    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    turn_id: str = ""


TurnState = Literal["not_started", "started", "finished"]


@dataclass(frozen=True, kw_only=True)
class TurnOutcome:
    """What the checkpoint chain says about one turn of a session.

    ``not_started``: no checkpoint of the turn (it never ran, or crashed before its first
    save). ``started``: the user's message is in the chain, the turn did not finish.
    ``finished``: it ended with ``termination``; ``text`` is its last assistant text.
    """

    state: TurnState
    termination: str = ""
    text: str = ""

    @property
    def reply(self) -> str:
        """What a finished turn says: its last answer, or (none) the harness's note on how
        it ended (a host shows it as is, never builds or parses it)."""
        return self.text or f"[turn ended: {self.termination}]"


@dataclass(frozen=True, kw_only=True)
class SessionStatus:
    """A session as a host shows it (``/status``)."""

    session_id: str
    exists: bool
    model: str = ""
    parent_session_id: str | None = None
    status: str = ""
    #: the termination of the latest finished turn, if any
    last_termination: str | None = None
