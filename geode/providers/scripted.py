"""A scripted model: replays a given list of responses through the adapter interface.

Used by the tests and by the offline demo. Each script item is either a string (a text
answer, ``end_turn``), a :class:`ModelResponse`, a ``ToolCall``/list of them (a tool_use
turn), an exception instance (raised as the call's failure) or a callable taking the
:class:`ModelRequest` and returning any of those.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from geode.messages import Message, ModelResponse, StreamEvent, TextBlock, ToolUseBlock, Usage
from geode.providers.base import BaseProvider, ModelRequest

__all__ = ["ScriptItem", "ScriptedProvider", "ToolCall"]

_ids = itertools.count(1)


@dataclass(frozen=True)
class ToolCall:
    name: str
    input: dict[str, Any] = field(default_factory=dict)
    id: str = ""


ScriptItem = Union[  # noqa: UP007 - a runtime alias, kept readable
    str,
    ModelResponse,
    ToolCall,
    Sequence[ToolCall],
    BaseException,
    Callable[[ModelRequest], Any],
]


class ScriptExhaustedError(AssertionError):
    pass


class ScriptedProvider(BaseProvider):
    """Replays ``script`` one item per call; records every request in ``.calls``."""

    name = "scripted"

    def __init__(
        self,
        script: Sequence[ScriptItem] = (),
        *,
        latency: float = 0.0,
        repeat_last: bool = False,
        stream_piece: int = 0,
        stream_every_s: float = 0.0,
    ) -> None:
        """``stream_piece`` / ``stream_every_s``: :meth:`stream` gives a text answer in
        pieces of that many characters, one every that many seconds (a model writing);
        0: in one piece."""
        self.script = list(script)
        self.latency = latency
        self.stream_piece = stream_piece
        self.stream_every_s = stream_every_s
        self.repeat_last = repeat_last
        self.calls: list[ModelRequest] = []
        self._pos = 0

    def assert_complete(self) -> None:
        """Fail unless every scripted item was consumed."""
        if self._pos < len(self.script):
            raise AssertionError(
                f"scripted model: {len(self.script) - self._pos} response(s) never requested"
            )

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls.append(request)
        if self.latency:
            await asyncio.sleep(self.latency)
        if self._pos >= len(self.script):
            if self.repeat_last and self.script:
                item: Any = self.script[-1]
            else:
                raise ScriptExhaustedError(
                    f"scripted model: call {len(self.calls)} but only {len(self.script)} scripted"
                )
        else:
            item = self.script[self._pos]
            self._pos += 1
        if callable(item) and not isinstance(item, (ToolCall, BaseException)):
            item = item(request)
        return self._to_response(item, request.model)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        response = await self.complete(request)
        text = response.message.text
        step = self.stream_piece or len(text) or 1
        for i in range(0, len(text), step):
            if i and self.stream_every_s:
                await asyncio.sleep(self.stream_every_s)
            yield StreamEvent(kind="text_delta", text=text[i:i + step])
        yield StreamEvent(kind="done", response=response)

    @staticmethod
    def _to_response(item: Any, model: str) -> ModelResponse:
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, ModelResponse):
            return item
        if isinstance(item, str):
            msg = Message(role="assistant", content=[TextBlock(text=item)])
            usage = Usage(input_tokens=10, output_tokens=max(1, len(item) // 4))
            return ModelResponse(message=msg, stop_reason="end_turn", usage=usage, model=model)
        calls = [item] if isinstance(item, ToolCall) else list(item)
        blocks = [
            ToolUseBlock(id=c.id or f"toolu_scripted_{next(_ids)}", name=c.name, input=c.input)
            for c in calls
        ]
        return ModelResponse(
            message=Message(role="assistant", content=list(blocks)),
            stop_reason="tool_use",
            usage=Usage(input_tokens=10, output_tokens=5 * len(blocks)),
            model=model,
        )
