"""Secret redaction, used at every output boundary: logs, timeline, ledger, channel replies.

Two layers: literal secret values registered at start-up (every API key and bot token
loaded from the environment or ``.env``) and shape patterns for keys we did not load
(another provider's key pasted into a prompt, a tool's output echoing a token).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["MASK", "redact", "redact_text", "register_secret", "registered_secrets"]

MASK = "[REDACTED]"

_SECRET_KEY = re.compile(
    r"(api[_-]?key|authorization|token|secret|password|passwd|cookie|signing)", re.IGNORECASE
)
_PATTERNS = [
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"sk-(?:proj-|or-v1-)?[A-Za-z0-9_\-]{16,}"),
    re.compile(r"xox[abprs]-[A-Za-z0-9\-]{8,}"),
    re.compile(r"xapp-[A-Za-z0-9\-]{8,}"),
    re.compile(r"(?<!\d)\d{5,}:[A-Za-z0-9_\-]{30,}"),  # Telegram bot token (also inside URLs)
    re.compile(r"\b[MN][A-Za-z\d_\-]{23,25}\.[A-Za-z\d_\-]{6}\.[A-Za-z\d_\-]{27,}\b"),  # Discord
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-]{12,}"),
]

_lock = threading.Lock()
_secrets: set[str] = set()
_MIN_SECRET_LEN = 6  # shorter values would mask ordinary words


def register_secret(value: str | None) -> None:
    """Remember a literal secret so every later redaction masks it."""
    if value and len(value) >= _MIN_SECRET_LEN:
        with _lock:
            _secrets.add(value)


def registered_secrets() -> frozenset[str]:
    with _lock:
        return frozenset(_secrets)


def redact_text(text: str, extra: Iterable[str] = ()) -> str:
    """Mask registered secrets, ``extra`` literals and known key shapes in ``text``."""
    literals = sorted(
        {*registered_secrets(), *(s for s in extra if s and len(s) >= _MIN_SECRET_LEN)},
        key=len,
        reverse=True,
    )
    # Shapes first: a whole key is masked even when a registered literal is a fragment of it.
    for pat in _PATTERNS:
        text = pat.sub(MASK, text)
    for lit in literals:
        if lit in text:
            text = text.replace(lit, MASK)
    return text


def redact(obj: Any, secrets: Iterable[str] = (), *, _depth: int = 0) -> Any:
    """Return a copy of ``obj`` with secret-named keys masked and secret values removed."""
    extra = tuple(secrets)
    if _depth > 32:
        return "[depth limit]"
    if isinstance(obj, str):
        return redact_text(obj, extra)
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if isinstance(k, str) and _SECRET_KEY.search(k) and isinstance(v, (str, bytes)) and v:
                out[k] = MASK
            else:
                out[k] = redact(v, extra, _depth=_depth + 1)
        return out
    if isinstance(obj, (list, tuple)):
        return [redact(v, extra, _depth=_depth + 1) for v in obj]
    return obj
