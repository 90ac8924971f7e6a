"""A tool defined inside a function (a channel's ``send_file``, one per turn) gets its JSON
schema built once per distinct signature, not once per definition (issue 17: ~3 ms of CPU on
every channel turn); a signature that differs per definition still gets its own schema.

No ``from __future__ import annotations`` here: like ``bots/send_file.py``, the tools' annotations
are evaluated where they are defined (a closure's ``limit``, a local class).
"""

from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

import geode.tools.base as base
from geode.tools.base import ToolContext, ToolDef, tool


def _per_turn(target: str) -> ToolDef:
    # like bots/send_file.make_send_file: a new function object per call, same code
    @tool(safety="external")
    async def send_it(
        ctx: ToolContext,
        path: Annotated[str, Field(description="File path")],
        caption: Annotated[str | None, Field(description="Caption")] = None,
    ) -> str:
        """Send a file."""
        return f"{target}:{path}:{caption}"

    return send_it


def _with_limit(limit: int) -> ToolDef:
    # the annotation depends on the enclosing call: each limit is another schema
    @tool
    async def take(ctx: ToolContext, n: Annotated[int, Field(le=limit)]) -> str:
        """Take n."""
        return str(n)

    return take


def _with_local_model(title: str) -> ToolDef:
    class Item(BaseModel):  # a class made per call: told apart by identity, not by name
        name: str = Field(description=title)

    @tool
    async def put(ctx: ToolContext, item: Item) -> str:
        """Put an item."""
        return item.name

    return put


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``<function>_args`` for each schema built (plainly or through a pydantic model)."""
    seen: list[str] = []
    real = base._build_schema

    def counting(fn: Any) -> dict[str, Any]:
        seen.append(f"{fn.__name__}_args")
        return real(fn)

    monkeypatch.setattr(base, "_build_schema", counting)
    monkeypatch.setattr(base, "_SCHEMAS", {}, raising=False)
    return seen


def test_a_tool_defined_per_turn_builds_its_schema_once(builds: list[str]) -> None:
    first, second = _per_turn("thread-1"), _per_turn("thread-2")
    assert first.handler is not second.handler  # two tools, each bound to its own thread
    assert builds == ["send_it_args"]
    assert second.input_schema is first.input_schema
    assert first.input_schema["properties"]["path"]["description"] == "File path"
    assert first.input_schema["required"] == ["path"]


def test_a_signature_that_differs_per_definition_gets_its_own_schema(
    builds: list[str],
) -> None:
    low, high = _with_limit(3), _with_limit(10)
    assert low.input_schema["properties"]["n"]["maximum"] == 3
    assert high.input_schema["properties"]["n"]["maximum"] == 10
    assert _with_limit(3).input_schema is low.input_schema
    assert builds == ["take_args", "take_args"]
    a, b = _with_local_model("first"), _with_local_model("second")
    assert a.input_schema is not b.input_schema
    assert a.input_schema["$defs"]["Item"]["properties"]["name"]["description"] == "first"
    assert b.input_schema["$defs"]["Item"]["properties"]["name"]["description"] == "second"
