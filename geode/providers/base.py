"""The adapter contract every provider implements (and the scripted model too)."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from geode.messages import Message, ModelResponse, StreamEvent, ToolSpec

__all__ = ["INVALID_ARGUMENTS_KEY", "BaseProvider", "ModelRequest"]

#: key under which unparsable tool arguments are passed on, so schema validation rejects
#: the call and the model sees why, instead of the turn crashing
INVALID_ARGUMENTS_KEY = "__invalid_json_arguments__"


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """One provider call, provider-neutral. Built once per step from the StepSnapshot."""

    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 8192
    tool_choice: str = "auto"  # "auto" | "none"
    correlation_id: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


class BaseProvider(abc.ABC):
    """A model adapter. ``complete`` is the one abstract method; ``stream`` defaults to it.

    Implementations translate vendor SDK errors into :class:`geode.errors.ModelError`
    (one mapping place per vendor) and never retry on their own: retries are the
    loop's explicit, logged, bounded policy (``geode.providers.retry``).
    """

    #: short provider name, e.g. "anthropic", "openai", "scripted"
    name: str = "base"

    @abc.abstractmethod
    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Run one call and return the whole assistant message."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream a call; the last event is ``done`` with the full response."""
        response = await self.complete(request)
        if response.message.text:
            yield StreamEvent(kind="text_delta", text=response.message.text)
        yield StreamEvent(kind="done", response=response)

    async def aclose(self) -> None:  # noqa: B027 - optional hook, default no-op
        """Release HTTP clients."""
