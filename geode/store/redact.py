"""Redaction and size bounds for what the records keep for observation.

Redaction itself is :mod:`geode.redact` (the one used at every output boundary:
registered literal secrets, credential-named keys, known key shapes). This module adds
what only the records need: a size bound, canonical JSON for content hashes, and one
extra shape :mod:`geode.redact` misses so far (a Telegram bot token inside a Bot API
URL, ``.../bot123456:AA.../getMe``, where its ``\\b`` anchor does not match).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from geode.redact import MASK
from geode.redact import redact as _redact_base
from geode.redact import redact_text as _redact_text_base

__all__ = ["MASK", "bound", "canonical_json", "redact", "redact_text"]

_EXTRA_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?<!\d)\d{5,}:[A-Za-z0-9_\-]{30,}"),  # Telegram token, also after "/bot"
)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Mask registered and given literal secrets and known key shapes in one string."""
    text = _redact_text_base(text, secrets)
    for pattern in _EXTRA_PATTERNS:
        text = pattern.sub(MASK, text)
    return text


def redact(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of a JSON-like value with secrets masked (see :func:`geode.redact.redact`)."""
    return _extra(_redact_base(obj, tuple(secrets)))


def _extra(obj: Any) -> Any:
    if isinstance(obj, str):
        for pattern in _EXTRA_PATTERNS:
            obj = pattern.sub(MASK, obj)
        return obj
    if isinstance(obj, Mapping):
        return {k: _extra(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_extra(v) for v in obj]
    return obj


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
