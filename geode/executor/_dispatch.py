"""Check 9 — dispatch to the plan's bound handler, under the tool's deadline.

Outcomes: ``done`` (the handler returned), ``failed`` (it raised: a :class:`ToolFailure`
message goes to the model as written; anything else becomes a classified, generic message,
never a traceback) and ``uncertain`` (the deadline passed: we stopped waiting, but whatever
the handler started outside this process may still be running).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Literal

import structlog

from geode.executor.decisions import ToolCall
from geode.messages import ImageBlock, TextBlock
from geode.tools.base import ToolContext, ToolDef, ToolOutput
from geode.tools.errors import ToolFailure

__all__ = ["DispatchOutcome", "dispatch", "to_blocks"]

log = structlog.get_logger(__name__)

Block = TextBlock | ImageBlock

# Most specific first: FileNotFoundError is an OSError, ConnectionError too.
_KINDS: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], str], ...] = (
    (PermissionError, "permission denied"),
    (FileNotFoundError, "not found"),
    (TimeoutError, "timed out"),
    (ConnectionError, "connection failed"),
    (OSError, "I/O error"),
    ((ValueError, TypeError, KeyError, LookupError), "invalid value"),
)


@dataclass(frozen=True)
class DispatchOutcome:
    status: Literal["done", "failed", "uncertain"]
    content: list[Block]
    detail: str = ""

    @property
    def is_error(self) -> bool:
        return self.status != "done"


def to_blocks(output: ToolOutput) -> list[Block]:
    """A handler's return value as content blocks; raises TypeError for anything else."""
    if output is None or output == "":
        return [TextBlock(text="(no output)")]
    if isinstance(output, str):
        return [TextBlock(text=output)]
    if isinstance(output, list) and output and all(
        isinstance(b, TextBlock | ImageBlock) for b in output
    ):
        return list(output)
    if isinstance(output, dict | list):
        return [TextBlock(text=json.dumps(output, ensure_ascii=False, default=str))]
    raise TypeError(f"unsupported tool output type {type(output).__name__}")


def _classify(exc: BaseException) -> str:
    for types, kind in _KINDS:
        if isinstance(exc, types):
            return kind
    return "internal error"


def _failed(message: str, detail: str) -> DispatchOutcome:
    return DispatchOutcome("failed", [TextBlock(text=message)], detail)


async def dispatch(tool: ToolDef, call: ToolCall, ctx: ToolContext) -> DispatchOutcome:
    """Run the handler; never raises except for cancellation of the caller."""
    deadline = asyncio.timeout(tool.deadline_s)
    try:
        async with deadline:
            output = await tool.handler(ctx, **call.args)
        content = to_blocks(output)
    except TimeoutError as exc:
        if deadline.expired():
            msg = (
                f"'{call.name}' exceeded its {tool.deadline_s:g} s deadline and the harness "
                "stopped waiting; the external work may still be running. Check its effect "
                "before trying again."
            )
            return DispatchOutcome("uncertain", [TextBlock(text=msg)], "deadline exceeded")
        return _handler_error(call, exc)
    except ToolFailure as exc:
        if getattr(exc, "outcome_uncertain", False):
            # e.g. an MCP server died mid-call: the effect may have happened.
            return DispatchOutcome("uncertain", [TextBlock(text=str(exc))], "outcome unknown")
        return _failed(str(exc) or f"'{call.name}' failed", f"ToolFailure: {exc}")
    except Exception as exc:  # a tool bug must reach the model as a result, not a crash
        return _handler_error(call, exc)
    return DispatchOutcome("done", content)


def _handler_error(call: ToolCall, exc: Exception) -> DispatchOutcome:
    kind = _classify(exc)
    log.warning("tool handler raised", tool=call.name, call_id=call.id, kind=kind, exc_info=exc)
    return _failed(
        f"'{call.name}' failed: {kind} ({type(exc).__name__}). The details are in the host log.",
        f"{type(exc).__name__}: {exc}",
    )
