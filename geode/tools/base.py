"""Tool definitions: what a tool is, before any session decides whether it may run.

A :class:`ToolDef` carries everything the executor's checks need: the JSON schema the
arguments are validated against, the safety level, the personal-data category, which
resources a call touches (for locks), whether it is idempotent, and its deadline.
"""

from __future__ import annotations

import functools
import inspect
import json
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

from pydantic import BaseModel, TypeAdapter, create_model

from geode.messages import ImageBlock, TextBlock

__all__ = [
    "PERSONAL_ORDER",
    "SAFETY_ORDER",
    "PersonalData",
    "Safety",
    "ToolContext",
    "ToolDef",
    "ToolOutput",
    "tool",
]

Safety = Literal["read_only", "write", "external", "dangerous"]
#: order used to refuse rewrites that lower the level
SAFETY_ORDER: dict[Safety, int] = {"read_only": 0, "write": 1, "external": 2, "dangerous": 3}
PersonalData = Literal["none", "personal", "sensitive"]
PERSONAL_ORDER: dict[PersonalData, int] = {"none": 0, "personal": 1, "sensitive": 2}

#: what a handler may return: plain text, blocks (text / image), or a JSON-able value
ToolOutput = str | list[TextBlock | ImageBlock] | dict[str, Any] | list[Any] | None


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """What a handler knows about the call it serves."""

    session_id: str
    turn_id: str
    call_id: str
    workspace: Path
    mode: str
    extra: dict[str, Any] = field(default_factory=dict)


Handler = Callable[..., Awaitable[ToolOutput]]
ResourceKeys = Callable[[dict[str, Any], ToolContext], Sequence[str]]


@dataclass(frozen=True, kw_only=True)
class ToolDef:
    """One tool. ``handler(ctx, **args)`` is async; ``resource_keys(args, ctx)`` names what a
    call touches (``file:/abs/path``, ``host:example.com``, ``proc:bash``)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    safety: Safety = "read_only"
    personal_data: PersonalData = "none"
    resource_keys: ResourceKeys | None = None
    idempotent: bool = False
    deadline_s: float = 120.0
    source: str = "builtin"  # "builtin" | "mcp:<server>" | "user"

    @property
    def effectful(self) -> bool:
        return self.safety != "read_only"

    @functools.cached_property
    def fingerprint(self) -> str:
        """Canonical JSON of what the model sees and the policy reads (plan content hashes).

        Computed once per tool: a plan is projected every step, and re-serialising every
        schema each time was a visible share of a short turn. A tool is never changed after
        it is built (a changed tool is a new ``ToolDef``).
        """
        return json.dumps(
            [self.name, self.description, self.input_schema, self.safety, self.personal_data,
             self.source],
            sort_keys=True, default=str,
        )

    def keys_for(self, args: dict[str, Any], ctx: ToolContext) -> list[str]:
        if self.resource_keys is None:
            return []
        return sorted(set(self.resource_keys(args, ctx)))


#: schemas of tool functions by what they are built from (see _schema_key)
_SCHEMAS: dict[tuple[Any, ...], dict[str, Any]] = {}
_MAX_SCHEMAS = 256


def _schema_key(fn: Callable[..., Any]) -> tuple[Any, ...] | None:
    """What ``fn``'s schema is built from, or None when that cannot be told by value.

    A tool defined inside a function (a channel's ``send_file``, bound to one thread) is a
    new function object per call with the same code, defaults and annotations: its schema
    (a pydantic model and its JSON schema, ~3 ms of CPU) was built again for every turn.
    The key is the code object plus the reprs of the defaults and annotations, used only
    when those reprs describe them by value (``Annotated[str, FieldInfo(...)]`` does; a
    class made inside a function or an object shown by address does not).
    """
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    shown = repr((fn.__defaults__, fn.__kwdefaults__, fn.__annotations__))
    if "<locals>" in shown or " at 0x" in shown:
        return None
    return (code, shown)


def _schema_from_signature(fn: Callable[..., Any]) -> dict[str, Any]:
    """Build a JSON schema from ``fn(ctx, *, a: int, b: str = "x")`` via pydantic (once
    per distinct signature: see :func:`_schema_key`)."""
    key = _schema_key(fn)
    if key is not None and key in _SCHEMAS:
        return _SCHEMAS[key]
    schema = _build_schema(fn)
    if key is not None:
        if len(_SCHEMAS) >= _MAX_SCHEMAS:
            _SCHEMAS.clear()
        _SCHEMAS[key] = schema
    return schema


def _build_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if pname in ("ctx", "self") or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        ann = hints.get(pname, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (ann, default)
    model: type[BaseModel] = create_model(f"{fn.__name__}_args", **fields)
    schema = TypeAdapter(model).json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    schema["additionalProperties"] = False
    return schema


@overload
def tool(fn: Handler, /) -> ToolDef: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    safety: Safety = "read_only",
    personal_data: PersonalData = "none",
    resource_keys: ResourceKeys | None = None,
    idempotent: bool = False,
    deadline_s: float = 120.0,
    input_schema: dict[str, Any] | None = None,
) -> Callable[[Handler], ToolDef]: ...
def tool(
    fn: Handler | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    safety: Safety = "read_only",
    personal_data: PersonalData = "none",
    resource_keys: ResourceKeys | None = None,
    idempotent: bool = False,
    deadline_s: float = 120.0,
    input_schema: dict[str, Any] | None = None,
) -> ToolDef | Callable[[Handler], ToolDef]:
    """Declare a tool from an async function ``fn(ctx, **args)``; with or without arguments.

    The schema comes from the typed signature unless ``input_schema`` is given; the
    description from the docstring.
    """

    def build(f: Handler) -> ToolDef:
        return ToolDef(
            name=name or f.__name__,
            description=description or inspect.cleandoc(f.__doc__ or f.__name__),
            input_schema=input_schema or _schema_from_signature(f),
            handler=f,
            safety=safety,
            personal_data=personal_data,
            resource_keys=resource_keys,
            idempotent=idempotent or safety == "read_only",
            deadline_s=deadline_s,
        )

    if fn is not None:
        return build(fn)
    return build
