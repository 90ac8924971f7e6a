"""The provider-neutral message model.

Every adapter translates to and from these types; the loop, the executor, the store and
the channels never see a vendor SDK object. Models are pydantic so a conversation
serialises losslessly into the checkpoint chain (``model_dump(mode="json")``) and back.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ContentBlock",
    "ImageBlock",
    "KeptResult",
    "Message",
    "ModelResponse",
    "ReasoningBlock",
    "Role",
    "StopReason",
    "StreamEvent",
    "TextBlock",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
    "Usage",
]

Role = Literal["user", "assistant"]
StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "error"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextBlock(_Frozen):
    type: Literal["text"] = "text"
    text: str


class ImageBlock(_Frozen):
    type: Literal["image"] = "image"
    media_type: str = "image/png"
    data: str  # base64


class ToolUseBlock(_Frozen):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


ToolStatus = Literal["ok", "error", "denied", "uncertain"]


class KeptResult(_Frozen):
    """A tool result over the size limit: its whole (redacted) text is kept as ``result_id``
    (the ``read_result`` tool pages it back in); the model got ``shown_chars`` of
    ``total_chars`` (head and tail)."""

    result_id: str
    total_chars: int
    shown_chars: int


class ToolResultBlock(_Frozen):
    """A tool call's result as the model sees it, with its status as data.

    ``status``: ``denied`` (a check refused it before any effect: ``check`` names it),
    ``uncertain`` (the effect may or may not have happened), ``error``, ``ok``. Results
    saved before the status existed have none: :attr:`outcome` derives it from ``is_error``.
    Providers send only ``content`` and ``is_error``.
    """

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: list[TextBlock | ImageBlock] = Field(default_factory=list)
    is_error: bool = False
    status: ToolStatus | None = None
    check: str | None = None
    #: set when the result was cut to the size limit (its whole is kept for read_result)
    kept: KeptResult | None = None

    @classmethod
    def text(
        cls, tool_use_id: str, text: str, *, is_error: bool = False,
        status: ToolStatus | None = None, check: str | None = None,
    ) -> ToolResultBlock:
        return cls(tool_use_id=tool_use_id, content=[TextBlock(text=text)], is_error=is_error,
                   status=status, check=check)

    @property
    def outcome(self) -> ToolStatus:
        """The status, derived from ``is_error`` for results saved without one."""
        if self.status is not None:
            return self.status
        return "error" if self.is_error else "ok"

    @property
    def text_content(self) -> str:
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))


class ReasoningBlock(_Frozen):
    """A model's opaque reasoning item (OpenAI Responses ``reasoning``, encrypted), kept in the
    assistant message so the next call can send it back: with ``store=false`` the server
    cannot look it up by id, and the model loses its chain of thought without it. Never
    shown to users; adapters other than ``provider``'s skip it."""

    type: Literal["reasoning"] = "reasoning"
    provider: str
    data: dict[str, Any] = Field(default_factory=dict)


ContentBlock = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ReasoningBlock,
    Field(discriminator="type"),
]


class Message(_Frozen):
    role: Role
    content: list[ContentBlock]

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", content=[TextBlock(text=text)])

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls(role="assistant", content=[TextBlock(text=text)])

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    @property
    def tool_results(self) -> list[ToolResultBlock]:
        return [b for b in self.content if isinstance(b, ToolResultBlock)]


class Usage(_Frozen):
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


class ToolSpec(_Frozen):
    """What the model is shown of one tool: name, description and JSON schema."""

    name: str
    description: str
    input_schema: dict[str, Any]


class ModelResponse(_Frozen):
    """One assistant message plus its metadata, as returned by every adapter."""

    message: Message
    stop_reason: StopReason
    usage: Usage = Usage()
    model: str = ""


class StreamEvent(_Frozen):
    """A streamed increment: text deltas as they arrive, then the final response."""

    kind: Literal["text_delta", "tool_use_start", "done"]
    text: str = ""
    tool_name: str = ""
    response: ModelResponse | None = None
