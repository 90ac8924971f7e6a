"""Tool schemas built without pydantic (geode/tools/base.py ``_plain_schema``) are exactly the
ones pydantic builds, key order included: the model sees the same tool definitions and check 4
validates against the same schema. Signatures outside the plain subset still go to pydantic.

No ``from __future__ import annotations``: the annotations below are evaluated in place.
"""

import inspect
import json
import typing
from typing import Annotated, Any, Literal

import pytest
from pydantic import Field

import geode.tools.base as base
from geode.tools.base import ToolContext, ToolDef, tool
from geode.tools.builtin import BUILTIN_TOOLS, computer, run_bash

TOOLS: list[ToolDef] = list({t.name: t for t in (*BUILTIN_TOOLS, computer, run_bash)}.values())


def _fields(fn: Any) -> dict[str, Any]:
    hints = typing.get_type_hints(fn, include_extras=True)
    out: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        if name == "ctx":
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        out[name] = (hints.get(name, Any), default)
    return out


def _both(fields: dict[str, Any]) -> tuple[str | None, str]:
    plain = base._plain_schema(fields)
    return (None if plain is None else json.dumps(plain),
            json.dumps(base._pydantic_schema("f", fields)))


@pytest.mark.parametrize("t", TOOLS, ids=lambda t: t.name)
def test_builtin_schemas_are_built_plainly_and_equal_pydantics(t: ToolDef) -> None:
    plain, pyd = _both(_fields(t.handler))
    assert plain is not None, "a built-in fell back to pydantic"
    assert plain == pyd
    assert json.dumps({**json.loads(pyd), "additionalProperties": False}) == json.dumps(
        t.input_schema)


PLAIN: list[tuple[Any, Any]] = [
    (str, ...), (int, ...), (float, ...), (bool, ...), (str, "x"), (int, 5), (int, True),
    (float, 1), (float, 2.5), (bool, False), (int | None, None), (int | None, ...),
    (str | None, "d"), (Literal["a", "b"], ...), (Literal["a", "b"], "b"),
    (Literal["a", "b"] | None, None), (typing.Optional[int], None),  # noqa: UP045
    (Annotated[str, Field(description="d")], ...),
    (Annotated[str, Field(min_length=1, max_length=9)], ""),
    (Annotated[int, Field(ge=0, le=10, description="n")], 3),
    (Annotated[float, Field(gt=0, lt=1.5)], 0.5),
    (Annotated[int | None, Field(ge=1, description="o")], None),
    (Annotated[str | None, Field(max_length=3)], None),
    (Annotated[Literal["x", "y"], Field(description="l")], "x"),
    (Annotated[int, Field(ge=10**30)], ...),
]

#: what the plain builder leaves to pydantic (and pydantic still handles)
FALLBACK: list[tuple[Any, Any]] = [
    (Any, ...), (list[str], ...), (dict[str, int], ...),
    (None | int, None), (int | str, ...), (Literal["only"], ...), (Literal[1, 2], ...),
    (Literal["a", 1], ...), (int, None), (float, float("inf")), (str, b"x"), (str, ("t",)),
    (Annotated[str, Field(pattern="^a")], ...), (Annotated[str, Field(alias="x")], ...),
    (Annotated[str, Field(title="T")], ...), (Annotated[int, Field(multiple_of=2)], ...),
    (Annotated[int, Field(strict=True)], ...), (Annotated[bool, Field(ge=0)], ...),
    (Annotated[int, Field(min_length=1)], ...), (Annotated[str, Field(ge=1)], ...),
    (Annotated[Literal["a", "b"], Field(min_length=1)], ...),
    (Annotated[int, Field(description="a"), Field(ge=1)], ...),
    (Annotated[int, Field(examples=[1])], ...), (Annotated[int, Field(default=1)], ...),
    (Annotated[int, "not a field"], ...),
]


@pytest.mark.parametrize("field", PLAIN, ids=repr)
def test_plain_fields_equal_pydantics(field: tuple[Any, Any]) -> None:
    fields = {"a": field, "b": (str, ...)}
    plain, pyd = _both(fields)
    assert plain is not None
    assert plain == pyd


@pytest.mark.parametrize("field", FALLBACK, ids=repr)
def test_other_fields_go_to_pydantic(field: tuple[Any, Any]) -> None:
    assert base._plain_schema({"a": field}) is None


def test_a_tool_with_a_pydantic_only_signature_still_gets_pydantics_schema() -> None:
    @tool
    async def tagged(ctx: ToolContext, tags: list[str], n: Annotated[int, Field(ge=1)] = 1) -> str:
        """Tag."""
        return ""

    assert tagged.input_schema == {
        "properties": {"tags": {"items": {"type": "string"}, "type": "array"},
                       "n": {"default": 1, "minimum": 1, "type": "integer"}},
        "required": ["tags"], "type": "object", "additionalProperties": False}
