"""Check 6 — approval by a human (REPL / IPC, or a channel's named approvers for the tools in
its binding's ``approve``); otherwise unattended modes have nobody to ask: a denial.

Prompts are serialised (one question at a time, even for a parallel batch). ``"always"`` is
remembered for the rest of the session per tool name, except for sensitive personal-data
tools and a channel's ``approve`` tools (asked every time) and for calls a hook explicitly
asked about.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import MappingProxyType

import structlog

from geode.executor._human_wait import waiting_for_a_person
from geode.executor.decisions import (
    Allow,
    ApprovalAnswer,
    ApprovalCancelled,
    ApprovalRequest,
    Deny,
    ToolCall,
)
from geode.executor.protocols import Approver
from geode.executor.summary import describe_call
from geode.loop.protocols import TurnInfo
from geode.policy import SessionScope
from geode.tools.base import ToolDef

__all__ = ["ApprovalGate", "Record"]

#: appends a timeline row of the call: ``record(turn, kind, call, **payload)``
Record = Callable[..., Awaitable[None]]

log = structlog.get_logger(__name__)


class ApprovalGate:
    """The session's approval state: its approver and the tools allowed "always"."""

    def __init__(
        self, *, scope: SessionScope, approver: Approver | None, workspace: Path | None = None,
        record: Record | None = None,
    ) -> None:
        self._scope = scope
        self._record = record
        #: seconds spent waiting for a channel's approvers since the last take
        self.human_wait_s = 0.0
        self._workspace = workspace
        self._approver = approver
        self._always: set[str] = set()
        self._lock = asyncio.Lock()

    @property
    def always_allowed(self) -> frozenset[str]:
        return frozenset(self._always)

    async def decide(
        self, call: ToolCall, tool: ToolDef, *, reason: str, forced: bool, turn: TurnInfo
    ) -> Allow | Deny:
        channel = call.name in self._scope.needs_approval
        if not self._scope.asks_human and not channel:
            return Deny(
                "approval",
                f"{reason}; approval is required, but a {self._scope.mode} session has nobody "
                "to ask. Do not retry this call.",
            )
        if self._approver is None:
            return Deny(
                "approval",
                f"{reason}; approval is required and no approver is connected. "
                "Do not retry this call.",
            )
        rememberable = tool.personal_data != "sensitive" and not channel
        if rememberable and not forced and call.name in self._always:
            return Allow()
        async with self._lock:
            if rememberable and not forced and call.name in self._always:
                return Allow()  # granted "always" while this call waited for the prompt
            summary = await asyncio.to_thread(describe_call, call.name, call.args,
                                              self._workspace)
            request = ApprovalRequest(
                session_id=turn.session_id,
                turn_id=turn.turn_id,
                call_id=call.id,
                tool=call.name,
                args=MappingProxyType(copy.deepcopy(call.args)),
                safety=tool.safety,
                reason=reason,
                always_allowed=rememberable,
                summary=summary,
            )
            # a resumed turn asks again for the call it proposed before the restart (the
            # channel's approver then resumes the same request): the row says so
            resumed = {"resumed": True} if turn.correlation_id.endswith(":resume") else {}
            await self._audit(turn, "approval.requested", call, reason=reason, **resumed)
            asked_at = time.monotonic()
            try:
                # a person may take minutes, whoever asks them (a thread's approvers, a
                # terminal, a thin CLI): other requests get this one's shared slots meanwhile
                async with waiting_for_a_person():
                    answer = await self._approver(request)
            except ApprovalCancelled:  # the turn was stopped while the request waited
                await asyncio.shield(self._audit(turn, "approval.cancelled", call,
                                                 decision="deny", outcome="cancelled"))
                raise
            except Exception as exc:  # a broken prompt is a "no", never a "yes"
                log.warning("approver failed", tool=call.name, exc_info=True)
                return Deny("approval", f"the approval request failed ({type(exc).__name__})")
            finally:
                if channel:  # a person in the thread: not the turn's working time
                    self.human_wait_s += time.monotonic() - asked_at
        if isinstance(answer, ApprovalAnswer):
            kind = "approval.expired" if answer.outcome == "expired" else "approval.decided"
            await self._audit(turn, kind, call, decision=answer.answer, outcome=answer.outcome,
                              by=answer.by, by_id=answer.by_id, by_name=answer.by_name,
                              note=answer.note)
        else:
            await self._audit(turn, "approval.decided", call, decision=str(answer))
        if isinstance(answer, ApprovalAnswer):
            if answer.answer == "allow":
                return Allow(approved_by=answer.by_id, approved_by_name=answer.by_name)
            return Deny(
                "approval",
                f"{answer.note or 'declined'}; '{call.name}' did not run. Do not retry it "
                "unless asked.",
            )
        if answer == "always" and rememberable:
            self._always.add(call.name)
            return Allow()
        if answer in ("allow", "always"):
            return Allow()
        if answer == "deny":
            return Deny(
                "approval",
                f"the user declined '{call.name}'. Do not retry it unless the user asks.",
            )
        return Deny("approval", f"the approver gave no valid answer ({answer!r})")

    async def _audit(self, turn: TurnInfo, kind: str, call: ToolCall, **payload: object) -> None:
        """Timeline rows of a channel's approval (named approvers: the audit trail of who
        allowed what); a terminal's own answers are the person's session, not audited."""
        if self._record is not None and call.name in self._scope.needs_approval:
            await self._record(turn, kind, call, **payload)
