"""A streamed model call's text deltas reach the driver merged: the first at once, later ones
together at most every ``DELTA_MERGE_S`` (a model writes ~40 tokens a second; every event
costs the timeline, the observers and the chat's sink a call), the text whole and in order,
and what arrived before a pause shown without waiting for the next token."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from geode.loop import LoopEvent, TextDelta
from geode.loop.events import ModelResponded, ModelRetrying
from geode.loop.phase_model import DELTA_MERGE_S
from geode.messages import StreamEvent
from geode.providers.base import ModelRequest
from geode.providers.retry import RetryPolicy
from geode.providers.scripted import ScriptedProvider
from tests.loop.test_loop import make_loop


class _Paced(ScriptedProvider):
    """The scripted answer streamed as ``pieces``, ``gaps[i]`` seconds before piece i."""

    def __init__(self, pieces: list[str], gaps: list[float]) -> None:
        super().__init__(["".join(pieces)], repeat_last=True)
        self.pieces, self.gaps = pieces, gaps

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        response = await self.complete(request)
        for piece, gap in zip(self.pieces, self.gaps, strict=True):
            await asyncio.sleep(gap)
            yield StreamEvent(kind="text_delta", text=piece)
        yield StreamEvent(kind="done", response=response)


async def _run(provider: ScriptedProvider, **kw: object) -> list[tuple[float, LoopEvent]]:
    seen: list[tuple[float, LoopEvent]] = []

    async def sink(ev: LoopEvent) -> None:
        seen.append((time.monotonic(), ev))

    loop = make_loop([], provider=provider, on_event=sink, stream=True, **kw)
    await loop.run("go")
    return seen


async def test_many_quick_deltas_arrive_as_few_events_whole_and_in_order() -> None:
    pieces = [f"w{i} " for i in range(60)]
    seen = await _run(_Paced(pieces, [0.005] * 60))  # ~0.3 s of tokens
    deltas = [ev.text for _, ev in seen if isinstance(ev, TextDelta)]
    assert "".join(deltas) == "".join(pieces)
    assert deltas[0] == "w0 "  # the first words at once
    assert len(deltas) <= 0.3 / DELTA_MERGE_S + 4 < len(pieces)
    # every delta before the call's answer
    kinds = [type(ev) for _, ev in seen]
    assert kinds.index(ModelResponded) > max(
        i for i, k in enumerate(kinds) if k is TextDelta)


async def test_text_before_a_pause_is_shown_without_the_next_token() -> None:
    start = time.monotonic()
    seen = await _run(_Paced(["a", "b", "c"], [0.0, 0.01, 1.0]))
    texts = [(at - start, ev.text) for at, ev in seen if isinstance(ev, TextDelta)]
    assert [t for _, t in texts] == ["a", "b", "c"]
    # "b" came 10 ms after "a" (merged with what followed), shown within the window, long
    # before "c" one second later
    assert texts[1][0] < 0.01 + DELTA_MERGE_S + 0.5 < texts[2][0]


async def test_a_retried_stream_still_brings_its_text_once_after_the_retry() -> None:
    class _CutOnce(_Paced):
        tries = 0

        async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
            self.tries += 1
            if self.tries == 1:
                yield StreamEvent(kind="text_delta", text="partial ")
                yield StreamEvent(kind="text_delta", text="more")
                from geode.errors import ModelError

                raise ModelError("cut", kind="transient")
            async for ev in super().stream(request):
                yield ev

    seen = await _run(_CutOnce(["whole ", "answer"], [0.0, 0.0]),
                      retry=RetryPolicy(max_attempts=2, base_delay=0.01))
    events = [ev for _, ev in seen if isinstance(ev, (TextDelta, ModelRetrying))]
    retry = next(i for i, ev in enumerate(events) if isinstance(ev, ModelRetrying))
    after = "".join(ev.text for ev in events[retry:] if isinstance(ev, TextDelta))
    assert after == "whole answer"
    before = "".join(ev.text for ev in events[:retry] if isinstance(ev, TextDelta))
    assert "more" not in after and before in ("partial ", "partial more")
