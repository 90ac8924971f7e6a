"""The AgenticLoop: one user turn as six phases, driven by a ``match`` over typed steps."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from geode.loop._util import emit, new_id
from geode.loop.events import TurnFinished
from geode.loop.phase_call import prepare_call
from geode.loop.phase_finish import verify
from geode.loop.phase_input import prepare_input, resume_input
from geode.loop.phase_model import call_provider
from geode.loop.phase_observe import observe
from geode.loop.phase_tools import process_tools
from geode.loop.protocols import TurnInfo
from geode.loop.state import RunDeps, RunState
from geode.loop.steps import CallModel, Finish, Observe, PrepareCall, RunTools, Step, Verify
from geode.loop.termination import SUCCESS_REASONS, TerminationReason
from geode.messages import ImageBlock, Message, Usage
from geode.secret_redaction import redact_text

__all__ = ["AgenticLoop", "OpenBatchCloser", "TurnResult"]

#: gives a resumed turn's open tool batch its results (running what may run again)
OpenBatchCloser = Callable[[list[Message], TurnInfo], Awaitable[list[Message]]]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class TurnResult:
    session_id: str
    turn_id: str
    termination: TerminationReason
    #: what the turn says: its ``answer``, or (none) the loop's note on why it ended
    text: str
    rounds: int
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    detail: str = ""
    #: ``text`` is no answer of the model but the loop's note on why the turn ended (which
    #: a terminal already shows from ``termination`` and ``detail``)
    text_is_note: bool = False
    #: the model's own answer (may be partial on a failed turn; empty: it gave none) —
    #: a host shows it beside ``termination`` and never parses ``text`` for the note
    answer: str = ""
    #: it ended naturally (``termination`` is a success): a fact of the value, set as it is
    #: made, so a host reads it without calling back into the loop
    ok: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ok", self.termination in SUCCESS_REASONS)

    def to_json(self) -> dict[str, object]:
        """The ``geode run --json`` object (CONTRACT.md)."""
        return {
            "session_id": self.session_id,
            "turn_id": self.turn_id,
            "termination": self.termination.value,
            "text": self.text,
            "rounds": self.rounds,
            "tool_calls": self.tool_calls,
            "usage": self.usage.model_dump(),
            "cost_usd": round(self.cost_usd, 6),
            "detail": self.detail,
        }


class AgenticLoop:
    """Runs turns of one session. ``messages`` carries the conversation across turns."""

    def __init__(self, *, deps: RunDeps, messages: list[Message] | None = None) -> None:
        self.deps = deps
        self.messages: list[Message] = list(messages or [])
        self._task: asyncio.Task[Finish] | None = None
        self.running_turn: str | None = None
        self.last_result: TurnResult | None = None

    def cancel(self) -> bool:
        """Cancel the running turn (``/stop``); it ends with reason ``cancelled``."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            return True
        return False

    async def run(self, prompt: str, *, turn_id: str | None = None,
                  images: Sequence[ImageBlock] = ()) -> TurnResult:
        """Run one turn. ``turn_id``: the caller's id for it (a channel records it before
        the turn starts, to find the turn in the checkpoint chain after a crash).
        ``images``: image content sent with the prompt (a channel's attached images)."""
        state = RunState(messages=list(self.messages), turn_id=turn_id or new_id("t"))
        return await self._run(state, prompt, tuple(images))

    async def resume(self, *, turn_id: str, saved: Mapping[str, Any],
                     open_batch: OpenBatchCloser | None = None) -> TurnResult:
        """Continue turn ``turn_id``, interrupted by a crash or restart, where its last
        checkpoint left it (resume in place): the conversation is ``messages`` as restored,
        ``saved`` the checkpoint's guard counters (rounds, time used, spend, repair budget,
        repeated errors), which keep counting. Each resume counts against
        ``limits.recovery_limit``. ``open_batch``: the conversation ends with a tool batch
        left open (a call waited for an approval); it is closed inside the turn (a resumed
        wait is part of it: ``/stop`` reaches it)."""
        state = RunState(messages=list(self.messages))
        state.apply_guard_state(dict(saved))
        state.turn_id = turn_id
        state.recoveries += 1
        return await self._run(state, None, open_batch=open_batch)

    async def _run(self, state: RunState, prompt: str | None,
                   images: tuple[ImageBlock, ...] = (), *,
                   open_batch: OpenBatchCloser | None = None) -> TurnResult:
        self.running_turn = state.turn_id
        structlog.contextvars.bind_contextvars(
            session_id=self.deps.session_id, turn_id=state.turn_id
        )
        self._task = asyncio.create_task(self._drive(state, prompt, images, open_batch))
        try:
            finish = await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if self._task.cancelled() and not _outer_cancelled():
                finish = Finish(
                    TerminationReason.CANCELLED, text=state.last_text, detail="the turn was stopped"
                )
            else:
                self._task.cancel()
                raise
        finally:
            self.running_turn = None
            structlog.contextvars.unbind_contextvars("session_id", "turn_id")
        return await self._finalize(state, finish)

    async def _drive(self, state: RunState, prompt: str | None,
                     images: tuple[ImageBlock, ...],
                     open_batch: OpenBatchCloser | None = None) -> Finish:
        step: Step = await (
            resume_input(self.deps, state, open_batch) if prompt is None
            else prepare_input(self.deps, state, prompt, images)
        )
        while True:
            match step:
                case PrepareCall():
                    step = await prepare_call(self.deps, state)
                case CallModel():
                    step = await call_provider(self.deps, state, step)
                case RunTools():
                    step = await process_tools(self.deps, state, step)
                case Observe():
                    step = await observe(self.deps, state, step)
                case Verify():
                    step = await verify(self.deps, state, step)
                case Finish():
                    return step

    async def _finalize(self, state: RunState, finish: Finish) -> TurnResult:
        # What the turn hands its host is masked here, once, for every host (the terminal,
        # the MCP server, the chat layer): a model repeating a key a tool read, or a detail
        # quoting a URL with a token, never leaves the harness in clear. The checkpoint
        # keeps the model's words as the transcript's redaction stores them.
        answer, detail = redact_text(finish.text), redact_text(finish.detail)
        text = answer
        text_is_note = finish.reason not in SUCCESS_REASONS and not text
        if text_is_note:
            text = _explain(finish.reason, detail)
        self.messages = state.messages
        if (
            self.deps.checkpointer is not None
            and finish.reason != TerminationReason.CHECKPOINT_FAILED
        ):
            try:
                await self.deps.checkpointer.save(
                    messages=state.messages,
                    state={**state.guard_state(), "last_termination": finish.reason.value},
                    status="paused" if finish.reason == TerminationReason.CANCELLED else "active",
                )
            except Exception as exc:
                log.error("final checkpoint save failed", error=str(exc))
        result = TurnResult(
            session_id=self.deps.session_id,
            turn_id=state.turn_id,
            termination=finish.reason,
            text=text,
            rounds=state.round + (1 if finish.reason in SUCCESS_REASONS else 0),
            tool_calls=state.tool_calls,
            usage=state.usage,
            cost_usd=state.cost_usd,
            detail=detail,
            text_is_note=text_is_note,
            answer=answer,
        )
        self.last_result = result
        await emit(self.deps, TurnFinished(
            turn_id=state.turn_id, termination=finish.reason.value, detail=detail,
            rounds=result.rounds, input_tokens=state.usage.input_tokens,
            output_tokens=state.usage.output_tokens, cost_usd=round(state.cost_usd, 6),
        ))
        if self.deps.timeline is not None:
            await self.deps.timeline.flush()
        # debug: `geode serve` logs each turn once at INFO (turn.done, geode.daemon.serve)
        log.debug("turn finished", termination=finish.reason.value, rounds=result.rounds)
        return result


def _outer_cancelled() -> bool:
    task = asyncio.current_task()
    return bool(task is not None and task.cancelling())


def _explain(reason: TerminationReason, detail: str) -> str:
    said = reason.value.replace("_", " ")
    return f"[turn ended: {said}] {detail}".strip()
