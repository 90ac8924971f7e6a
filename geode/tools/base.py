"""Tool definitions: what a tool is, before any session decides whether it may run.

A :class:`ToolDef` carries everything the executor's checks need: the JSON schema the
arguments are validated against, the safety level, the personal-data category, which
resources a call touches (for locks), whether it is idempotent, and its deadline.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import types
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

from pydantic import BaseModel, TypeAdapter, create_model
from pydantic.fields import FieldInfo

from geode.messages import ImageBlock, TextBlock
from geode.tools.deps import ToolDeps

__all__ = [
    "PERSONAL_ORDER",
    "SAFETY_ORDER",
    "PersonalData",
    "Safety",
    "ToolContext",
    "ToolDef",
    "ToolDeps",
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
    """What a handler knows about the call it serves, and what its session gives it."""

    session_id: str
    turn_id: str
    call_id: str
    workspace: Path
    mode: str
    #: the tools' typed dependencies (:class:`~geode.tools.deps.ToolDeps`)
    deps: ToolDeps = field(default_factory=ToolDeps)


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
    schema = _plain_schema(fields)
    if schema is None:
        schema = _pydantic_schema(fn.__name__, fields)
    schema["additionalProperties"] = False
    return schema


def _pydantic_schema(name: str, fields: dict[str, Any]) -> dict[str, Any]:
    model: type[BaseModel] = create_model(f"{name}_args", **fields)
    schema = TypeAdapter(model).json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


# -- the schema pydantic would make, for plain signatures, without building a model ------------
#
# A pydantic model and its JSON schema cost ~1 ms per tool (~10 ms of a one-shot ``geode run``
# for the built-ins). Signatures made only of str / int / float / bool, ``X | None``, string
# ``Literal``s and ``Annotated[T, Field(description=..., ge=..., ...)]`` with a JSON default get
# the same schema, key order included, built directly; anything else goes to pydantic.
# tests/tools/test_plain_schema.py compares the two for every built-in and more.

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
#: annotated_types constraint attribute -> JSON Schema keyword, as pydantic maps them
_CONSTRAINTS = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum",
                "lt": "exclusiveMaximum", "min_length": "minLength", "max_length": "maxLength"}
_NUMERIC = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})


def _plain_type(ann: Any) -> dict[str, Any] | None:
    """The schema of a bare type: a scalar or a Literal of two or more strings."""
    if isinstance(ann, type) and ann in _SCALARS:
        return {"type": _SCALARS[ann]}
    if typing.get_origin(ann) is Literal:
        values = typing.get_args(ann)
        if len(values) >= 2 and all(type(v) is str for v in values):
            return {"enum": list(values), "type": "string"}
    return None


def _plain_field(ann: Any, default: Any) -> dict[str, Any] | None:
    description: str | None = None
    constraints: dict[str, Any] = {}
    if typing.get_origin(ann) is typing.Annotated:
        ann, *extras = typing.get_args(ann)
        if len(extras) != 1 or type(extras[0]) is not FieldInfo:
            return None
        info = extras[0]
        if set(info._attributes_set) - {"description"}:  # alias, title, examples, default ...
            return None
        description = info.description
        for item in info.metadata:
            names = [n for n in _CONSTRAINTS if hasattr(item, n)]
            if len(names) != 1 or type(item).__module__ != "annotated_types":
                return None
            constraints[_CONSTRAINTS[names[0]]] = getattr(item, names[0])
    optional = False
    args = typing.get_args(ann)
    if (typing.get_origin(ann) in (typing.Union, types.UnionType) and len(args) == 2
            and args[1] is type(None)):
        ann, optional = args[0], True
    base = _plain_type(ann)
    if base is None:
        return None
    kind = base.get("type")
    wanted = ("integer", "number") if set(constraints) & _NUMERIC else ("string",)
    if constraints and (kind not in wanted or "enum" in base
                        or (set(constraints) - _NUMERIC and set(constraints) & _NUMERIC)):
        return None
    base = _sorted({**base, **constraints})
    out: dict[str, Any] = {"anyOf": [base, {"type": "null"}]} if optional else base
    if default is not ...:
        if not (default is None or type(default) in (str, int, bool)
                or (type(default) is float and math.isfinite(default))):
            return None
        if default is None and not optional:
            return None
        out["default"] = default
    if description is not None:
        out["description"] = description
    return _sorted(out)


def _sorted(schema: dict[str, Any]) -> dict[str, Any]:
    """Keys in order, as pydantic's JSON schemas have them (values keep theirs)."""
    return {k: schema[k] for k in sorted(schema)}


def _plain_schema(fields: dict[str, Any]) -> dict[str, Any] | None:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, (ann, default) in fields.items():
        prop = _plain_field(ann, default)
        if prop is None:
            return None
        properties[pname] = prop
        if default is ...:
            required.append(pname)
    schema: dict[str, Any] = {"properties": properties}
    if required:
        schema["required"] = required
    schema["type"] = "object"
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
