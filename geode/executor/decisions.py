"""The values the executor's checks pass around: the call being checked and each verdict.

A check returns :class:`Allow`, :class:`Deny` or :class:`Ask`; the executor ``match``es on
it. A denial becomes the model-visible text ``denied by <check>: <reason>``.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

__all__ = [
    "DENIAL_PREFIX",
    "Allow",
    "ApprovalAnswer",
    "ApprovalCancelled",
    "ApprovalRequest",
    "Ask",
    "CheckName",
    "Deny",
    "ToolCall",
    "Verdict",
]

CheckName = Literal["scope", "middleware", "policy", "schema", "hook", "approval"]
DENIAL_PREFIX = "denied by "


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """The effective request as it moves through the checks (rewrites make new ones).

    ``args`` is the executor's private copy: nothing outside can mutate what was checked.
    """

    id: str
    name: str
    args: dict[str, Any] = field(default_factory=dict)

    def rewritten(
        self, *, name: str | None = None, args: Mapping[str, Any] | None = None
    ) -> ToolCall:
        """A copy with a new name and/or arguments (always a fresh deep copy of the args)."""
        return replace(
            self,
            name=self.name if name is None else name,
            args=copy.deepcopy(dict(self.args if args is None else args)),
        )


@dataclass(frozen=True)
class Allow:
    """Go on to the next check. From the approval check of a channel's approvers: who said
    yes (platform id and display name), which the call's effect receipt records."""

    approved_by: str = ""
    approved_by_name: str = ""


@dataclass(frozen=True)
class Deny:
    """Stop here: no effect has begun."""

    check: CheckName
    reason: str

    @property
    def text(self) -> str:
        return f"{DENIAL_PREFIX}{self.check}: {self.reason}"


@dataclass(frozen=True)
class Ask:
    """A human must approve before the call runs (check 6)."""

    reason: str


Verdict = Allow | Deny | Ask


@dataclass(frozen=True, kw_only=True)
class ApprovalRequest:
    """What an :class:`~geode.executor.protocols.Approver` shows the human."""

    session_id: str
    turn_id: str
    call_id: str
    tool: str
    args: Mapping[str, Any]
    safety: str
    reason: str
    #: False for sensitive personal-data tools: "always" is not offered and not remembered
    always_allowed: bool = True
    #: what the call will do in plain words (diff / command / MCP arguments), for the prompt
    summary: str = ""


@dataclass(frozen=True, kw_only=True)
class ApprovalAnswer:
    """An approver's answer with who gave it (a channel's approvers are named people).

    ``note`` is what the model is told: ``"approved by ann (42)"``, ``"denied by ann (42)"``,
    ``"expired: nobody decided within 300s"``.
    """

    answer: Literal["allow", "deny"]
    note: str = ""
    by: str = ""
    #: who decided, apart: the platform user id and the display name (the audit's)
    by_id: str = ""
    by_name: str = ""
    #: approved | denied | expired | cancelled (the timeline row's kind follows it)
    outcome: str = ""


class ApprovalCancelled(asyncio.CancelledError):
    """Raised by an approver whose wait was cancelled because the turn was stopped
    (``/stop``), after it marked the request cancelled: still a cancellation (the turn
    stops), and the audit records the request as cancelled. A wait cancelled for another
    reason (the daemon stopping) raises the plain ``CancelledError``: the request stays
    open and the resumed turn waits for it again."""
