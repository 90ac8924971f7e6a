"""What a record keeps: secrets masked, size bounded, canonical JSON for content hashes.

The masking itself is :mod:`geode.secret_redaction` (the one used at every output boundary:
registered literal secrets, credential-named keys, known key shapes, each chat platform's from
its spec, a bot token inside an API URL included). This module adds what only the records
need: a size bound, and canonical JSON for content hashes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from geode.secret_redaction import MASK
from geode.secret_redaction import redact as _redact_base
from geode.secret_redaction import redact_text as _redact_text_base

__all__ = ["MASK", "bound", "canonical_json", "redact", "redact_text"]


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Mask registered and given literal secrets and known key shapes in one string."""
    return _redact_text_base(text, secrets)


def redact(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of a JSON-like value with secrets masked (:func:`geode.secret_redaction.redact`)."""
    return _redact_base(obj, secrets)


def bound(
    obj: Any,
    *,
    max_depth: int = 12,
    max_items: int = 256,
    max_string: int = 16_000,
) -> Any:
    """Bound a JSON-like value in depth, collection length and string length.

    Non-JSON scalars become ``str(value)`` so the result always serialises.
    """
    return _bound(obj, 0, max_depth, max_items, max_string)


def _bound(obj: Any, depth: int, max_depth: int, max_items: int, max_string: int) -> Any:
    if obj is None or isinstance(obj, bool | int | float):
        return obj
    if isinstance(obj, str):
        if len(obj) > max_string:
            return obj[:max_string] + f"...[truncated {len(obj) - max_string} chars]"
        return obj
    if depth >= max_depth:
        return "[depth limit]"
    if isinstance(obj, Mapping):
        items = list(obj.items())
        out = {
            str(k): _bound(v, depth + 1, max_depth, max_items, max_string)
            for k, v in items[:max_items]
        }
        if len(items) > max_items:
            out["..."] = f"[{len(items) - max_items} more keys]"
        return out
    if isinstance(obj, list | tuple | set | frozenset):
        seq = list(obj)
        bounded = [_bound(v, depth + 1, max_depth, max_items, max_string) for v in seq[:max_items]]
        if len(seq) > max_items:
            bounded.append(f"[{len(seq) - max_items} more items]")
        return bounded
    return _bound(str(obj), depth, max_depth, max_items, max_string)


def canonical_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces) used for content hashes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
