"""Check 4 — the arguments validate against the tool's JSON schema (Draft 2020-12).

jsonschema decides, except that arguments a small exact validator accepts are allowed without
it: importing jsonschema and building a validator was ~40 ms of a one-shot ``geode run``.
That validator covers only the keywords the built-in tools' schemas use (``type``,
``properties``, ``required``, ``additionalProperties: false``, ``enum``, the numeric bounds,
``minLength``/``maxLength``, ``anyOf``, annotations), on schemas whose every keyword and value
it checked is well formed. It only ever *accepts*: whatever it does not accept — an invalid
call, a value it is not sure of, a schema with any other keyword — goes to jsonschema, which
denies or allows exactly as before, with its own messages. So the check denies what it
denied before as long as the fast path never accepts what Draft 2020-12 rejects
(tests/executor/test_schema_fast_path.py compares the two on attacker arguments).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from geode.executor.decisions import Allow, Deny
from geode.tools.base import ToolDef

if TYPE_CHECKING:  # jsonschema is imported by the first tool call (~2 MB, ~30 ms at start-up)
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

__all__ = ["check_schema"]

_MAX_MESSAGE = 300


def _where(err: ValidationError) -> str:
    path = "/".join(str(p) for p in err.absolute_path)
    return f"'{path}'" if path else "the arguments"


# Validators by schema identity; the entry holds the schema itself so its id is not reused.
_VALIDATORS: dict[int, tuple[dict[str, Any], Draft202012Validator | None]] = {}
_MAX_CACHED = 1024


def _validator(schema: dict[str, Any]) -> Draft202012Validator | None:
    hit = _VALIDATORS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
        validator: Draft202012Validator | None = Draft202012Validator(
            schema, format_checker=Draft202012Validator.FORMAT_CHECKER
        )
    except SchemaError:
        validator = None
    if len(_VALIDATORS) >= _MAX_CACHED:
        _VALIDATORS.clear()
    _VALIDATORS[id(schema)] = (schema, validator)
    return validator


# -- the fast path: accepts only, on a checked subset of Draft 2020-12 ---------------------

#: JSON Schema's types as Draft 2020-12's default type checker tells them (jsonschema._types);
#: a number that is neither int nor float (Decimal, complex) is not decided here
_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_LENGTHS = ("minLength", "maxLength")
_ANNOTATIONS = ("title", "description")


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _simple(schema: Any) -> bool:
    """Whether ``schema`` uses only keywords :func:`_accepts` knows, each well formed.

    Stricter than the meta-schema (whatever is not listed makes the schema not simple), so a
    simple schema is also a valid one: jsonschema's ``check_schema`` would pass it.
    """
    if not isinstance(schema, dict):
        return False
    for key, value in schema.items():
        if key == "type":
            ok = isinstance(value, str) and value in _TYPES
        elif key == "properties":
            ok = isinstance(value, dict) and all(
                isinstance(k, str) and _simple(v) for k, v in value.items())
        elif key == "required":
            ok = (isinstance(value, list) and all(isinstance(k, str) for k in value)
                  and len(set(value)) == len(value))
        elif key == "additionalProperties":
            ok = value is False
        elif key == "enum":
            ok = isinstance(value, list) and all(isinstance(e, str) for e in value)
        elif key in _BOUNDS:
            ok = _is_real(value) and not (isinstance(value, float) and math.isnan(value))
        elif key in _LENGTHS:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        elif key == "anyOf":
            ok = isinstance(value, list) and bool(value) and all(_simple(v) for v in value)
        elif key in _ANNOTATIONS:
            ok = isinstance(value, str)
        else:
            ok = key == "default"  # an annotation: any value
        if not ok:
            return False
    return True


def _accepts_bounds(schema: dict[str, Any], value: Any) -> bool:
    """The length and numeric bounds, which Draft 2020-12 applies to strings and numbers only."""
    if isinstance(value, str):
        return not (("minLength" in schema and len(value) < schema["minLength"])
                    or ("maxLength" in schema and len(value) > schema["maxLength"]))
    if _is_real(value):
        if isinstance(value, float) and math.isnan(value):
            return False  # compares false with every bound: left to jsonschema
        return not (("minimum" in schema and value < schema["minimum"])
                    or ("maximum" in schema and value > schema["maximum"])
                    or ("exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"])
                    or ("exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]))
    # not a string nor a number: no bound applies; another kind of number is not decided here
    return isinstance(value, bool | dict | list) or value is None


def _accepts_object(schema: dict[str, Any], value: dict[str, Any]) -> bool:
    properties: dict[str, Any] = schema.get("properties", {})
    if schema.get("additionalProperties") is False and any(k not in properties for k in value):
        return False
    if any(k not in value for k in schema.get("required", ())):
        return False
    return all(_accepts(sub, value[key]) for key, sub in properties.items() if key in value)


def _accepts(schema: dict[str, Any], value: Any) -> bool:
    """True only if ``value`` is valid against ``schema`` (a :func:`_simple` one) under Draft
    2020-12; False means "not shown valid here", never "invalid"."""
    kind = schema.get("type")
    if kind is not None and not _TYPES[kind](value):
        return False
    if "enum" in schema and not (isinstance(value, str) and value in schema["enum"]):
        return False
    if not _accepts_bounds(schema, value):
        return False
    if isinstance(value, dict) and not _accepts_object(schema, value):
        return False
    return "anyOf" not in schema or any(_accepts(sub, value) for sub in schema["anyOf"])


def _fast_accepts(schema: dict[str, Any], args: dict[str, Any]) -> bool:
    # not cached by schema identity: a schema dict changed in place (jsonschema reads it at each
    # validation) must not keep an earlier answer; checking it is ~10 us
    return _simple(schema) and _accepts(schema, args)


def check_schema(tool: ToolDef, args: dict[str, Any]) -> Allow | Deny:
    """Deny invalid arguments with the failing field's path, so the model can fix the call."""
    if _fast_accepts(tool.input_schema, args):
        return Allow()
    validator = _validator(tool.input_schema)
    if validator is None:
        return Deny("schema", f"'{tool.name}' has an invalid input schema; it cannot be called")
    errors = list(validator.iter_errors(args))
    if not errors:
        return Allow()
    from jsonschema.exceptions import best_match

    err = best_match(errors)
    message = err.message
    if len(message) > _MAX_MESSAGE:
        message = message[:_MAX_MESSAGE] + "..."
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return Deny("schema", f"invalid arguments for '{tool.name}' at {_where(err)}: {message}{more}")
