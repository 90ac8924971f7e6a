"""One channel turn, from an accepted event to its recorded final reply, as phases.

``prepare -> run -> deliver`` (:mod:`bots.turn.prepare`, :mod:`bots.turn.run`,
:mod:`bots.turn.deliver`), each returning the next step as a value
(:mod:`bots.turn.steps`); :meth:`TurnRunner.drive` is the ``match`` over them:

- ``Recover`` (a row a previous process accepted) -> prepare decides: ``Ready``,
  ``Answered`` (from the checkpoint), ``Accept`` (resume in place, or re-run), or ``Done``;
- ``Accept`` -> prepare fixes the turn's facts, run shows it in the thread (👀, the
  progress message), prepare makes its input -> ``Prepared``;
- ``Prepared`` -> run enters the harness once -> ``Answered`` (or ``Dropped``);
- ``Answered`` -> run stops the indicators, deliver records the answer ``ready`` under the
  turn's claim -> ``Ready`` -> deliver edits the progress message into it -> ``Done``.

Points where a crash can happen, and what the restart does (``Recover``):

The outbox row carries the loop turn's id from the start (the turn runs under it).

- row ``pending``, the checkpoint chain has no checkpoint of that turn: the turn never
  started (or crashed before its first save) -> run it with the original prompt.
- the checkpoint shows the turn finished (``last_termination`` saved with that turn id):
  the answer is in the checkpoint -> deliver it, no model call.
- the checkpoint shows the turn started, unfinished: the user's message is in the chain
  -> resume the turn in place, under the same loop turn id, with its guard counters
  (rounds, time, spend) restored; tool calls left open get a result from the factory
  saying whether they ran (an effect of unknown outcome is never re-run). After
  ``[loop] recovery_limit`` resumes the turn is ended with a message instead.

A re-run from the start (no checkpoint of the turn) gets a new loop turn id, recorded
before it starts.
- row ``ready``: the answer is known -> deliver (idempotent edits).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bots.turn.deliver import DeliverPhase
from bots.turn.prepare import PreparePhase
from bots.turn.run import RunPhase, Shown
from bots.turn.steps import (
    Accept,
    Answered,
    Done,
    Dropped,
    Prepared,
    Ready,
    Recover,
    Step,
    TurnDeps,
)
from bots.voice_reply import wants_voice_reply
from geode.settings import BindingSettings

if TYPE_CHECKING:
    from bots.store import OutboxRow, StoredEvent

__all__ = ["TurnRunner"]


class TurnRunner:
    """Runs accepted turns of one layer (see the module docstring)."""

    def __init__(self, *, deps: TurnDeps) -> None:
        self.deps = deps
        self.prepare = PreparePhase(deps=deps)
        self.running = RunPhase(deps=deps)
        self.delivery = DeliverPhase(deps=deps)

    async def run(
        self, stored: StoredEvent, row: OutboxRow, binding: BindingSettings, *,
        prompt: str | None = None, resume: bool = False, recovered: bool = False,
    ) -> None:
        """Run an accepted turn (``resume``: in place, from its checkpoint; ``recovered``:
        a previous process accepted it, so its placeholder is reused and says it resumed)."""
        await self.drive(Accept(stored=stored, row=row, binding=binding, prompt=prompt,
                                resume=resume, recovered=recovered))

    async def finish(self, row: OutboxRow, text: str) -> None:
        """Record the final answer (redacted, chunked), then deliver it."""
        await self.drive(self.prepare.answered(row, text))

    async def recover(self, stored: StoredEvent, row: OutboxRow,
                      binding: BindingSettings | None) -> None:
        """Finish a turn a previous run accepted but did not finish (see module docstring)."""
        await self.drive(Recover(stored=stored, row=row, binding=binding))

    async def drive(self, step: Step) -> Done:
        """Walk ``step`` and the steps the phases return until one is ``Done``."""
        shown: Shown | None = None  # the turn in its thread, from Accept until it answered
        speak = False  # its answer is spoken too (bots.voice_reply): decided by its event
        try:
            while True:
                match step:
                    case Recover():
                        speak = _spoken(step.binding, step.stored)
                        step = await self.prepare.recover(step)
                    case Accept():
                        speak = _spoken(step.binding, step.stored)
                        turn = self.prepare.turn(step)
                        shown = await self.running.show(turn)
                        step = await self.prepare.prepare(turn, step.prompt)
                    case Prepared() if shown is not None:
                        step = await self.running.run(step, shown)
                    case Answered() | Dropped() if shown is not None:
                        # the final answer replaces the progress message: indicators stop
                        await self.running.hide(shown)
                        shown = None
                    case Answered():
                        step = await self.delivery.record(step)
                    case Dropped():
                        step = await self.delivery.dropped(step)
                    case Ready():
                        row = step.row
                        step = await self.delivery.deliver(step)
                        if speak:  # the answer landed: now spoken too, once
                            await self.delivery.speak(row)
                    case Done():
                        return step
                    case _:
                        raise AssertionError(f"no phase takes {type(step).__name__} here")
        finally:
            if shown is not None:  # a phase raised while the turn was shown
                await self.running.hide(shown)


def _spoken(binding: BindingSettings | None, stored: StoredEvent) -> bool:
    """Whether the turn's answer is spoken too; :mod:`bots.voice_reply` is asked only when
    the binding enables spoken replies (most do not: no call for their turns)."""
    return (isinstance(binding, BindingSettings) and binding.voice_replies
            and wants_voice_reply(binding, stored))
