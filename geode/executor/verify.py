"""HookVerifier: a stop proposal (a text-only answer) completes only when it passes.

Order: the configured checks (first failure wins), then the judge (``[verify] judge``; a
failed verdict fails it with the judge's reason), then PostVerify hooks (``revise`` fails
it with the instruction as the reason), then Stop hooks (``continue_with`` fails it the same
way, asking for another round). A check that raises fails verification: a broken verifier
never certifies completion (the loop's repair budget bounds the cost). A judge that cannot
decide is a verify error (``VerifyOutcome.error``, with the failure's class): never a pass.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import structlog

from geode.hooks.registry import HookEvent, HookRegistry
from geode.loop.protocols import TurnInfo, VerifyOutcome
from geode.messages import Message

if TYPE_CHECKING:
    from geode.providers.judge import Judge

__all__ = ["HookVerifier", "VerifyCheck", "non_empty_answer"]

log = structlog.get_logger(__name__)

VerifyCheck = Callable[[str, Sequence[Message]], Awaitable[VerifyOutcome]]


async def non_empty_answer(text: str, messages: Sequence[Message]) -> VerifyOutcome:
    """Built-in check: the answer says something."""
    if text.strip():
        return VerifyOutcome(passed=True)
    return VerifyOutcome(passed=False, reason="the answer is empty; reply with the result")


class HookVerifier:
    """Implements the loop's ``Verifier`` with checks and PostVerify / Stop hooks."""

    def __init__(
        self,
        *,
        hooks: HookRegistry | None = None,
        checks: Sequence[VerifyCheck] = (non_empty_answer,),
        judge: Judge | None = None,
    ) -> None:
        self._hooks = hooks
        self._checks = tuple(checks)
        self._judge = judge

    async def _run_judge(
        self, judge: Judge, text: str, messages: Sequence[Message]
    ) -> VerifyOutcome:
        from geode.providers.judge import JudgeError, turn_evidence

        request, evidence = turn_evidence(messages)
        try:
            verdict = await judge.judge(request=request, answer=text, evidence=evidence)
        except JudgeError as exc:
            log.warning("verify judge failed", judge=judge.name, kind=exc.kind)
            return VerifyOutcome(
                passed=False, error=f"verify error: judge {judge.name} failed ({exc.kind}): {exc}"
            )
        except Exception as exc:
            log.warning("verify judge raised", judge=judge.name, exc_info=True)
            return VerifyOutcome(
                passed=False,
                error=f"verify error: judge {judge.name} failed ({type(exc).__name__})",
            )
        if verdict.passed:
            return VerifyOutcome(passed=True)
        return VerifyOutcome(passed=False, reason=f"the judge found: {verdict.reason}")

    async def verify(
        self, *, text: str, messages: Sequence[Message], turn: TurnInfo
    ) -> VerifyOutcome:
        for check in self._checks:
            name = getattr(check, "__qualname__", repr(check))
            try:
                outcome = await check(text, messages)
            except Exception as exc:
                log.warning("verify check raised", check=name, exc_info=True)
                return VerifyOutcome(
                    passed=False, reason=f"verification check {name} failed ({type(exc).__name__})"
                )
            if not outcome.passed:
                return outcome
        if self._judge is not None:
            outcome = await self._run_judge(self._judge, text, messages)
            if not outcome.passed:
                return outcome
        if self._hooks is None:
            return VerifyOutcome(passed=True)
        event = HookEvent(
            point="PostVerify", session_id=turn.session_id, turn_id=turn.turn_id,
            mode=turn.mode, text=text,
        )
        revise = await self._hooks.post_verify(event)
        if revise is not None:
            return VerifyOutcome(passed=False, reason=revise)
        again = await self._hooks.stop(
            HookEvent(point="Stop", session_id=turn.session_id, turn_id=turn.turn_id,
                      mode=turn.mode, text=text)
        )
        if again is not None:
            return VerifyOutcome(passed=False, reason=again)
        return VerifyOutcome(passed=True)
