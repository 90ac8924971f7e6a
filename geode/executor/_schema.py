"""Check 4 — the arguments validate against the tool's JSON schema (Draft 2020-12)."""

from __future__ import annotations

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


def check_schema(tool: ToolDef, args: dict[str, Any]) -> Allow | Deny:
    """Deny invalid arguments with the failing field's path, so the model can fix the call."""
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
