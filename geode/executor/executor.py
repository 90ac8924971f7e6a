"""ToolExecutor: every proposed tool call passes the same checks, in the same order.

1 scope · 2 request middleware · 3 policy · 4 schema · 5 PreToolUse hooks (a rewrite runs
1-4 again) · 6 approval · 7 effect receipt · 8 resource locks · 9 dispatch under a deadline
· 10 PostToolUse hooks · 11 the result block. Each check lives in its own module.

A batch runs in three phases so that order-sensitive work stays in call order:

- *gate*: checks 1-6 for every call, concurrently (approval prompts are serialised);
- *intend*: the receipts of every cleared effectful call, before any of them is dispatched;
- *execute*: checks 8-11, one task per call created in call order, so calls whose
  resource keys collide queue on the FIFO locks in the order the model proposed them.

Invariant: a call denied by checks 1-6 never reaches its handler and has no receipt. No
tool problem raises out of :meth:`ToolExecutor.run_batch`; only cancellation does.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import structlog

from geode.executor._approval import ApprovalGate
from geode.executor._dispatch import DispatchOutcome, dispatch
from geode.executor._hooks import run_pre_tool_hooks
from geode.executor._locks import ResourceLocks
from geode.executor._middleware import RequestMiddleware, apply_middleware, lowered
from geode.executor._policy import check_policy
from geode.executor._post import build_result, run_post_tool_hooks
from geode.executor._receipts import args_hash, finish_receipt
from geode.executor._schema import check_schema
from geode.executor._scope import check_scope
from geode.executor.decisions import Allow, Ask, Deny, ToolCall
from geode.executor.protocols import (
    Approver,
    MemoryResults,
    PreImages,
    ReceiptStore,
    ResultKeeper,
    TimelineSink,
)
from geode.hooks.events import ToolDenied, ToolEvent, ToolFinished, ToolStarted
from geode.hooks.registry import HookRegistry
from geode.hooks.system import HookSystem
from geode.loop.protocols import TurnInfo
from geode.messages import ToolResultBlock, ToolUseBlock
from geode.policy import SessionScope
from geode.tools.base import ToolContext, ToolDef
from geode.tools.deps import ToolDeps
from geode.tools.plan import BoundToolPlan

__all__ = ["ToolExecutor"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class _Cleared:
    """A call that passed checks 1-6 and may run."""

    call: ToolCall
    tool: ToolDef
    ctx: ToolContext
    keys: list[str]
    #: who approved it (a channel's approver: platform id, display name), for its receipt
    approved: Allow | None = None


@dataclass(frozen=True)
class _Checked:
    call: ToolCall
    tool: ToolDef
    ask: str | None


class ToolExecutor:
    """The host's tool boundary for one session (implements ``ToolRunner``)."""

    def __init__(
        self,
        *,
        scope: SessionScope,
        workspace: Path,
        hooks: HookRegistry | None = None,
        observers: HookSystem | None = None,
        approver: Approver | None = None,
        receipts: ReceiptStore | None = None,
        timeline: TimelineSink | None = None,
        locks: ResourceLocks | None = None,
        middleware: Sequence[RequestMiddleware] = (),
        max_result_chars: int = 50_000,
        results: ResultKeeper | None = None,
        deps: ToolDeps | None = None,
        preimages: PreImages | None = None,
    ) -> None:
        self.scope = scope
        self._preimages = preimages
        self.workspace = workspace
        self._hooks = hooks
        self._observers = observers
        self._receipts = receipts
        self._timeline = timeline
        self._locks = locks if locks is not None else ResourceLocks()
        self._middleware = tuple(middleware)
        self._max_chars = max_result_chars
        self._results: ResultKeeper = results if results is not None else MemoryResults()
        # the tools' typed dependencies, with what read_result reads with (this session's
        # kept results, page size)
        self._deps = replace(deps or ToolDeps(), kept_results=self._results,
                             result_max_chars=max_result_chars)
        self._approval = ApprovalGate(scope=scope, approver=approver, workspace=workspace,
                                      record=self._record)

    @property
    def always_allowed(self) -> frozenset[str]:
        """Tools the human answered "always" for in this session."""
        return self._approval.always_allowed

    def take_human_wait(self) -> float:
        """Seconds the batches since the last call waited for a channel's approvers (the
        loop does not count them against the turn's time budget)."""
        waited, self._approval.human_wait_s = self._approval.human_wait_s, 0.0
        return waited

    async def run_batch(
        self, calls: Sequence[ToolUseBlock], *, turn: TurnInfo, plan: BoundToolPlan
    ) -> list[ToolResultBlock]:
        """Run one proposed batch; one result per call, in call order."""
        seen: set[str] = set()
        duplicate: list[bool] = []
        for c in calls:
            duplicate.append(c.id in seen)
            seen.add(c.id)
        gated = await asyncio.gather(
            *(self._gate(c, turn, plan, dup) for c, dup in zip(calls, duplicate, strict=True))
        )
        intended = await asyncio.gather(*(self._intend(g, turn) for g in gated))
        # Tasks are created in call order: colliding resource keys queue in that order.
        tasks = [
            asyncio.ensure_future(self._execute(g, turn)) if isinstance(g, _Cleared) else None
            for g in intended
        ]
        try:
            await asyncio.gather(*(t for t in tasks if t is not None), return_exceptions=True)
        finally:
            for t in tasks:  # cancelled from outside: do not leave orphans running
                if t is not None and not t.done():
                    t.cancel()
        return [
            cast(ToolResultBlock, outcome) if task is None else _task_result(task, outcome)
            for outcome, task in zip(intended, tasks, strict=True)
        ]

    # -- phase 1: checks 1-6 ------------------------------------------------------------

    async def _gate(
        self, block: ToolUseBlock, turn: TurnInfo, plan: BoundToolPlan, duplicate: bool
    ) -> _Cleared | ToolResultBlock:
        call = ToolCall(id=block.id, name=block.name, args=copy.deepcopy(dict(block.input)))
        await self._record(turn, "tool.proposed", call, args_hash=args_hash(call.name, call.args))
        try:
            if duplicate:
                return await self._deny(turn, call, Deny("scope", "duplicate tool call id"))
            checked = await self._checks(call, turn, plan)
            if isinstance(checked, Deny):
                return await self._deny(turn, call, checked)
            return await self._clear(checked, turn, plan)
        except Exception:  # a bug in the boundary must not take down the batch
            log.exception("tool boundary failed before dispatch", tool=call.name)
            return ToolResultBlock.text(
                call.id, f"'{call.name}' did not run: internal error in the tool boundary",
                is_error=True,
            )

    async def _checks(
        self,
        call: ToolCall,
        turn: TurnInfo,
        plan: BoundToolPlan,
        *,
        rewritten_from: ToolDef | None = None,
    ) -> _Checked | Deny:
        """Checks 1-4. ``rewritten_from`` is set when re-running them after a hook rewrite."""
        in_scope = check_scope(call.name, scope=self.scope, plan=plan)  # 1
        if isinstance(in_scope, Deny):
            return in_scope
        if rewritten_from is not None:
            why = lowered(rewritten_from, plan.tools[call.name])
            if why is not None:
                return Deny("hook", f"{why}; refused")
        if self._middleware:  # 2
            mw = await apply_middleware(
                call, middleware=self._middleware, turn=turn, scope=self.scope, plan=plan
            )
            if isinstance(mw, Deny):
                return mw
            call = mw
        tool = plan.tools[call.name]
        verdict = check_policy(tool, scope=self.scope, args=call.args)  # 3
        if isinstance(verdict, Deny):
            return verdict
        valid = check_schema(tool, call.args)  # 4
        if isinstance(valid, Deny):
            return valid
        return _Checked(call, tool, verdict.reason if isinstance(verdict, Ask) else None)

    async def _clear(
        self, checked: _Checked, turn: TurnInfo, plan: BoundToolPlan
    ) -> _Cleared | ToolResultBlock:
        hook_ask: str | None = None
        if self._hooks is not None:  # 5
            pre = await run_pre_tool_hooks(
                self._hooks, checked.call, turn=turn, mode=self.scope.mode
            )
            if isinstance(pre, Deny):
                return await self._deny(turn, checked.call, pre)
            hook_ask = pre.ask
            if pre.rewritten:
                again = await self._checks(pre.call, turn, plan, rewritten_from=checked.tool)
                if isinstance(again, Deny):
                    return await self._deny(turn, pre.call, again)
                checked = again
        call, tool = checked.call, checked.tool
        approval: Allow | None = None
        if hook_ask is not None or checked.ask is not None:  # 6
            approved = await self._approval.decide(
                call, tool, reason=hook_ask or checked.ask or "", forced=hook_ask is not None,
                turn=turn,
            )
            if isinstance(approved, Deny):
                return await self._deny(turn, call, approved)
            approval = approved
        ctx = ToolContext(
            session_id=turn.session_id,
            turn_id=turn.turn_id,
            call_id=call.id,
            workspace=self.workspace,
            mode=self.scope.mode,
            deps=self._deps,
        )
        try:
            keys = tool.keys_for(call.args, ctx)
        except Exception as exc:  # the tool's key function is part of the tool: its bug
            log.warning("resource_keys failed", tool=call.name, exc_info=True)
            return ToolResultBlock.text(
                call.id, f"'{call.name}' did not run: its resource keys could not be computed "
                f"({type(exc).__name__})", is_error=True,
            )
        return _Cleared(call, tool, ctx, keys, approval)

    # -- phase 2: check 7 ---------------------------------------------------------------

    async def _intend(
        self, gated: _Cleared | ToolResultBlock, turn: TurnInfo
    ) -> _Cleared | ToolResultBlock:
        if not isinstance(gated, _Cleared) or not gated.tool.effectful or self._receipts is None:
            return gated
        call = gated.call
        try:
            # Written before dispatch: a crash after this line leaves an "intended" receipt
            # for reconciliation, and the effect is never re-run blindly.
            approved = gated.approved
            await self._receipts.intend(
                session_id=turn.session_id, turn_id=turn.turn_id, call_id=call.id,
                tool=call.name, args_hash=args_hash(call.name, call.args),
                approved_by=approved.approved_by if approved is not None else "",
                approved_by_name=approved.approved_by_name if approved is not None else "",
            )
        except Exception as exc:
            log.exception("receipt intend failed; call not run", tool=call.name)
            await self._record(turn, "tool.finished", call, status="not_run")
            return ToolResultBlock.text(
                call.id, f"'{call.name}' did not run: its effect receipt could not be recorded "
                f"({type(exc).__name__})", is_error=True,
            )
        return gated

    # -- phase 3: checks 8-11 -----------------------------------------------------------

    async def _execute(self, cleared: _Cleared, turn: TurnInfo) -> ToolResultBlock:
        call, tool = cleared.call, cleared.tool
        receipt = self._receipts is not None and tool.effectful
        started = False
        outcome: DispatchOutcome | None = None
        try:
            async with self._locks.hold(cleared.keys):  # 8
                await self._record(turn, "tool.started", call, keys=cleared.keys)
                self._observe(ToolStarted(**_ids(turn, call)))
                # What the call may change is kept before it runs (a rewind puts it back);
                # after the checks allowed it, under its locks, like the "started" row.
                token = (await self._preimages.before(ctx=cleared.ctx, tool=tool,
                                                      keys=cleared.keys)
                         if self._preimages is not None and tool.effectful else None)
                started = True
                outcome = await dispatch(tool, call, cleared.ctx)  # 9
                if token is not None:
                    assert self._preimages is not None
                    await self._preimages.after(token)
        except asyncio.CancelledError:
            if receipt and outcome is None:
                assert self._receipts is not None
                # Cancelled mid-dispatch: the effect may or may not have happened.
                await finish_receipt(
                    self._receipts, session_id=turn.session_id, call_id=call.id,
                    status="uncertain" if started else "failed",
                    detail="cancelled while running" if started else "cancelled before dispatch",
                )
            raise
        if receipt:
            assert self._receipts is not None
            await finish_receipt(
                self._receipts, session_id=turn.session_id, call_id=call.id,
                status=outcome.status, detail=outcome.detail,
            )
        if outcome.status == "uncertain":
            await self._record(turn, "tool.timeout", call, deadline_s=tool.deadline_s)
        post = None
        if self._hooks is not None:  # 10
            post = await run_post_tool_hooks(self._hooks, call, outcome, turn=turn,
                                             mode=self.scope.mode)
        withheld = post is not None and post.withheld is not None
        await self._record(turn, "tool.finished", call, status=outcome.status, withheld=withheld)
        self._observe(ToolFinished(**_ids(turn, call), status=outcome.status))

        async def keep(result_id: str, text: str) -> None:
            await self._results.keep(result_id=result_id, session_id=turn.session_id,
                                     turn_id=turn.turn_id, call_id=call.id, tool=call.name,
                                     text=text)

        result = await build_result(call, outcome, post, max_chars=self._max_chars,
                                    keep=keep)  # 11
        kept = result.kept
        if kept is not None and kept.shown_chars < kept.total_chars:
            await self._record(turn, "tool.result_cut", call, result_id=kept.result_id,
                               total_chars=kept.total_chars, shown_chars=kept.shown_chars,
                               cut_chars=kept.total_chars - kept.shown_chars,
                               limit_chars=self._max_chars)
        return result

    # -- records ------------------------------------------------------------------------

    async def _deny(self, turn: TurnInfo, call: ToolCall, deny: Deny) -> ToolResultBlock:
        log.info("tool call denied", tool=call.name, check=deny.check, reason=deny.reason)
        await self._record(turn, "tool.denied", call, check=deny.check, reason=deny.reason)
        self._observe(ToolDenied(**_ids(turn, call), check=deny.check, reason=deny.reason))
        return ToolResultBlock.text(call.id, deny.text, is_error=True, status="denied",
                                    check=deny.check)

    async def _record(self, turn: TurnInfo, kind: str, call: ToolCall, **payload: Any) -> None:
        """Append to the SessionTimeline; it observes, so its failure never stops a call."""
        if self._timeline is None:
            return
        try:
            await self._timeline.append(
                session_id=turn.session_id,
                turn_id=turn.turn_id,
                kind=kind,
                correlation_id=turn.correlation_id,
                payload={"call_id": call.id, "tool": call.name, **payload},
            )
        except Exception:
            log.warning("timeline append failed", kind=kind, call_id=call.id, exc_info=True)

    def _observe(self, event: ToolEvent) -> None:
        if self._observers is not None:
            self._observers.publish(event)


def _ids(turn: TurnInfo, call: ToolCall) -> dict[str, str]:
    """The fields every tool event carries."""
    return {"session_id": turn.session_id, "turn_id": turn.turn_id, "call_id": call.id,
            "tool": call.name}


def _task_result(
    task: asyncio.Future[ToolResultBlock], cleared: _Cleared | ToolResultBlock
) -> ToolResultBlock:
    """The task's result; a bug after dispatch becomes an error result, never a raise."""
    exc = asyncio.CancelledError() if task.cancelled() else task.exception()
    if exc is None:
        return task.result()
    assert isinstance(cleared, _Cleared)
    log.error("tool boundary failed after dispatch", tool=cleared.call.name, exc_info=exc)
    return ToolResultBlock.text(
        cleared.call.id,
        f"'{cleared.call.name}' hit an internal error in the tool boundary while running; "
        "its effect is uncertain. Check before trying again.",
        is_error=True, status="uncertain",
    )
