"""Check 4's fast path (geode/executor/_schema.py) only ever accepts what Draft 2020-12 accepts.

Arguments it accepts are allowed without jsonschema; everything else goes to jsonschema as
before. So the check denies exactly what it denied before if, and only if, the fast path
never accepts an argument set jsonschema rejects: these tests compare the two on attacker
arguments for every built-in tool (extra properties, wrong types, missing required, huge and
non-finite numbers, nested objects) and on seeded random values against varied schemas.
"""

from __future__ import annotations

import math
import random
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from geode.executor import _schema
from geode.executor._schema import check_schema
from geode.executor.decisions import Allow, Deny
from geode.tools.base import ToolDef, tool
from geode.tools.builtin import BUILTIN_TOOLS, computer, run_bash

TOOLS: list[ToolDef] = list({t.name: t for t in (*BUILTIN_TOOLS, computer, run_bash)}.values())

#: values an attacker (or a confused model) may put in any field
NASTY: list[Any] = [
    None, True, False, 0, 1, -1, 3, 5.0, 5.5, -0.0, 10**100, -(10**100), 2**63, 1e308,
    math.inf, -math.inf, math.nan, "", "x", "5", "left", "click", "screenshot", " left",
    "LEFT", "a" * 5000, [], ["x"], [1, 2], {}, {"a": 1}, {"path": "x"}, {"$ref": "#"},
    [{"nested": {"deep": [1]}}],
]


def _valid_base(t: ToolDef) -> dict[str, Any]:
    """Arguments the tool accepts: its required fields with a string (all are strings)."""
    required: list[str] = t.input_schema.get("required", [])
    args = dict.fromkeys(required, "ab")
    if t.name == "computer":
        args["action"] = "screenshot"
    return args


def _reference(t: ToolDef, args: Any) -> Allow | Deny:
    """Check 4 as it was: jsonschema alone."""
    saved = _schema._fast_accepts
    _schema._fast_accepts = lambda schema, args: False  # type: ignore[assignment]
    try:
        return check_schema(t, args)
    finally:
        _schema._fast_accepts = saved  # type: ignore[assignment]


def _cases(t: ToolDef) -> list[Any]:
    base = _valid_base(t)
    props: dict[str, Any] = t.input_schema["properties"]
    cases: list[Any] = [base, {}, None, [], "args", {**base, "extra": 1},
                        {**base, "__proto__": {}}, {**base, "": None}]
    for name in base:
        cases.append({k: v for k, v in base.items() if k != name})  # a required one missing
    for name in props:
        for value in NASTY:
            cases.append({**base, name: value})
        cases.append({**base, name: {"type": "object", "properties": {}}})
    return cases


def _same(got: Allow | Deny, want: Allow | Deny) -> bool:
    if isinstance(want, Allow):
        return isinstance(got, Allow)
    return isinstance(got, Deny) and (got.check, got.reason) == (want.check, want.reason)


@pytest.mark.parametrize("t", TOOLS, ids=lambda t: t.name)
def test_builtin_schemas_take_the_fast_path_and_are_valid(t: ToolDef) -> None:
    Draft202012Validator.check_schema(t.input_schema)
    assert _schema._simple(t.input_schema)
    assert _schema._fast_accepts(t.input_schema, _valid_base(t))


@pytest.mark.parametrize("t", TOOLS, ids=lambda t: t.name)
def test_attacker_arguments_are_decided_as_jsonschema_decides(t: ToolDef) -> None:
    validator = Draft202012Validator(t.input_schema)
    for args in _cases(t):
        valid = validator.is_valid(args)
        if _schema._fast_accepts(t.input_schema, args):
            assert valid, args  # the one property the deny set rests on
        # and the check's whole answer, message included, is what jsonschema alone gave
        got, want = check_schema(t, args), _reference(t, args)
        assert _same(got, want), (args, got, want)
        assert isinstance(want, Allow) == valid, args


def test_the_denials_the_model_sees_are_unchanged() -> None:
    read_file = next(t for t in TOOLS if t.name == "read_file")
    base = {"path": "a.txt"}
    for args, fragment in [
        ({**base, "extra": 1}, "Additional properties are not allowed ('extra' was unexpected)"),
        ({**base, "offset": "1"}, "at 'offset': '1' is not of type 'integer'"),
        ({**base, "offset": True}, "at 'offset': True is not of type 'integer'"),
        ({**base, "limit": 10**100}, f"{10**100} is greater than the maximum of 20000"),
        ({**base, "offset": 0}, "0 is less than the minimum of 1"),
        ({}, "'path' is a required property"),
        ({"path": {"nested": "x"}}, "is not of type 'string'"),
    ]:
        res = check_schema(read_file, args)
        assert isinstance(res, Deny) and res.check == "schema", args
        assert fragment in res.reason, (args, res.reason)


# -- random values against random simple schemas ---------------------------------------------

_KINDS = ["string", "integer", "number", "boolean", "null", "object", "array"]


def _random_schema(rnd: random.Random, depth: int = 0) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    if rnd.random() < 0.7:
        schema["type"] = rnd.choice(_KINDS)
    if rnd.random() < 0.2:
        schema["enum"] = rnd.sample(["a", "b", "", "1", "True", "null"], rnd.randint(0, 3))
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if rnd.random() < 0.15:
            schema[key] = rnd.choice([0, 1, -1, 2.5, 10**30, 0.0, 1e308])
    for key in ("minLength", "maxLength"):
        if rnd.random() < 0.15:
            schema[key] = rnd.randint(0, 3)
    if depth < 2 and rnd.random() < 0.4:
        names = rnd.sample(["a", "b", "c", ""], rnd.randint(0, 3))
        schema["properties"] = {n: _random_schema(rnd, depth + 1) for n in names}
        if rnd.random() < 0.5:
            schema["additionalProperties"] = False
    if rnd.random() < 0.3:
        schema["required"] = rnd.sample(["a", "b", "c"], rnd.randint(0, 2))
    if depth < 2 and rnd.random() < 0.2:
        schema["anyOf"] = [_random_schema(rnd, depth + 1) for _ in range(rnd.randint(1, 3))]
    if rnd.random() < 0.2:
        schema["description"] = "d"
        schema["default"] = rnd.choice([None, 1, "x", {}])
    return schema


def _random_value(rnd: random.Random, depth: int = 0) -> Any:
    pick = rnd.random()
    if depth < 3 and pick < 0.25:
        return {rnd.choice(["a", "b", "c", "d", ""]): _random_value(rnd, depth + 1)
                for _ in range(rnd.randint(0, 4))}
    if depth < 3 and pick < 0.3:
        return [_random_value(rnd, depth + 1) for _ in range(rnd.randint(0, 2))]
    return rnd.choice([*NASTY, 2, 2.5, 0.5, -2.5, 10**30, 10**30 + 1, "ab", "abcd", "a", "b",
                       Decimal("-1e9"), Fraction(-1, 2)])  # not from JSON: must not pass


def test_random_values_against_random_schemas() -> None:
    rnd = random.Random(17)
    accepted = 0
    for _ in range(400):
        schema = _random_schema(rnd)
        Draft202012Validator.check_schema(schema)  # the generator makes only valid schemas
        assert _schema._simple(schema), schema
        validator = Draft202012Validator(schema)
        for _ in range(25):
            value = _random_value(rnd)
            if _schema._accepts(schema, value):
                accepted += 1
                assert validator.is_valid(value), (schema, value)
    assert accepted > 1000  # the comparison is not vacuous


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"p": {"type": "string", "pattern": "^a"}}},
    {"type": "object", "properties": {"p": {"type": "string", "format": "email"}}},
    {"type": "object", "properties": {"p": {"type": "array", "items": {"type": "integer"}}}},
    {"type": "object", "additionalProperties": {"type": "integer"}},
    {"type": "object", "required": ["p", "p"]},  # invalid: required items must be unique
    {"type": "object", "properties": {"p": {"minimum": True}}},  # invalid: not a number
    {"type": ["object", "null"]},
    {"$defs": {}, "type": "object"},
])
def test_any_other_keyword_goes_to_jsonschema(schema: dict[str, Any]) -> None:
    assert not _schema._simple(schema)


async def _handler(ctx: Any, **kwargs: Any) -> str:
    return "ok"


def test_a_schema_outside_the_subset_is_still_enforced_by_jsonschema() -> None:
    t = tool(name="p", input_schema={"type": "object", "additionalProperties": False,
                                     "properties": {"p": {"type": "string", "pattern": "^a"}}})(
        _handler)
    assert isinstance(check_schema(t, {"p": "abc"}), Allow)
    res = check_schema(t, {"p": "xbc"})
    assert isinstance(res, Deny) and "does not match '^a'" in res.reason, res
    bad = tool(name="bad", input_schema={"type": "object", "required": ["p", "p"]})(_handler)
    res = check_schema(bad, {"p": 1})
    assert isinstance(res, Deny) and "invalid input schema" in res.reason, res


def test_a_schema_changed_in_place_is_checked_as_it_is_now() -> None:
    schema: dict[str, Any] = {"type": "object", "additionalProperties": False,
                              "properties": {"p": {"type": "string"}}}
    t = tool(name="m", input_schema=schema)(_handler)
    assert isinstance(check_schema(t, {"p": "xbc"}), Allow)
    schema["properties"]["p"]["pattern"] = "^a"  # e.g. a server's schema refreshed in place
    res = check_schema(t, {"p": "xbc"})
    assert isinstance(res, Deny) and "does not match '^a'" in res.reason, res
