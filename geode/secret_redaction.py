"""Secret redaction, used at every output boundary: logs, timeline, ledger, channel replies.

Two layers: literal secret values registered at start-up (every API key and bot token
loaded from the environment or ``.env``) and shape patterns for keys we did not load
(another provider's key pasted into a prompt, a tool's output echoing a token).

Invisible format characters (zero-width space / joiner, word joiner, BOM, soft hyphen, bidi
controls) are ignored while matching: a secret split by one is masked whole, with the
invisible characters inside it. Elsewhere the text keeps them (emoji sequences use ZWJ).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from geode.platforms import on_reset

__all__ = [
    "MASK",
    "held_from",
    "may_begin_secret",
    "redact",
    "redact_text",
    "redact_values",
    "register_secret",
    "registered_secrets",
]

MASK = "[REDACTED]"

_SECRET_KEY = re.compile(
    r"(api[_-]?key|authorization|token|secret|password|passwd|cookie|signing)", re.IGNORECASE
)
#: the harness's own shapes; each chat platform adds its secrets' shapes through its spec
#: (``secret_shapes``, read from the platform registry, :mod:`geode.platforms`)
_OWN_PATTERNS = (
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"sk-(?:proj-|or-v1-)?[A-Za-z0-9_\-]{16,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-]{12,}"),
)


@functools.cache
def _patterns() -> tuple[re.Pattern[str], ...]:
    """Every shape masked: the harness's and the registered platforms' (read once: a
    platform's spec module imports no SDK)."""
    from geode.platforms import secret_shapes

    return (*_OWN_PATTERNS, *secret_shapes())


def _has_shape(text: str) -> bool:
    """Whether some pattern of :func:`_patterns` matches somewhere in ``text``: only a test
    (the masking matches each pattern on its own). One search per pattern, not one search of
    their alternation: ``re`` skips ahead to a pattern's literal prefix (``sk-``, ``xox``)
    on its own, never inside an alternation, which tries every branch at every position
    (22 us against 15 for a 110-character message, 2.2 ms against 1.7 for 10 kB)."""
    for pattern in _patterns():
        if pattern.search(text) is not None:
            return True
    return False


@on_reset
def _forget_patterns() -> None:
    _patterns.cache_clear()


def __getattr__(name: str) -> object:
    # ``_PATTERNS``: the shapes as one tuple, for tests that check each of them
    if name == "_PATTERNS":
        return _patterns()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_lock = threading.Lock()
_secrets: set[str] = set()
#: bumped by every new registered secret: the literal lists cached for it are stale
_generation = 0
_MIN_SECRET_LEN = 6  # shorter values would mask ordinary words; no shape is this short


def register_secret(value: str | None) -> None:
    """Remember a literal secret so every later redaction masks it."""
    global _generation
    if value and len(value) >= _MIN_SECRET_LEN:
        with _lock:
            if value not in _secrets:
                _secrets.add(value)
                _generation += 1


def registered_secrets() -> frozenset[str]:
    with _lock:
        return frozenset(_secrets)


#: what a key's characters include besides letters (every shape has one; ordinary words rarely)
_KEYISH = frozenset("0123456789-_:=+")


def may_begin_secret(word: str) -> bool:
    """Whether ``word``, still being written (a streamed draft's last word), may grow into
    a secret no mask matches yet: it ends with the start of a registered secret (3+
    characters, or any of it from the word's start or after a punctuation mark), or it is
    4+ characters with a digit or one of ``-_:=+`` in it (the start of every shape).
    Invisible format characters are ignored, as the mask ignores them. A draft waits for
    the end of such a word (:mod:`bots.turn.stream`)."""
    if not word.isascii():
        word = _FORMAT.sub("", word)
    if len(word) >= 4 and not _KEYISH.isdisjoint(word):
        return True
    secrets = registered_secrets()
    if not secrets:
        return False
    tail = word[-64:]
    # where a secret may start: 3+ characters from the end, or at the word's start or after
    # a punctuation mark (a short word there is not held for any secret it ends like)
    starts = [i for i in range(len(tail))
              if i < len(tail) - 2 or i == 0 or not tail[i - 1].isalnum()]
    return any(secret.startswith(tail[i:]) for secret in secrets for i in starts)

#: a shape with white space inside (``Bearer <token>``): its first word, alone or followed by
#: what may be the start of the token, at the end of the text still being written
_SPACED_SHAPE_START = re.compile(r"(?i)\bbearer(?:\s+\S*)?\Z")


def held_from(text: str) -> int:
    """Where a streamed draft's text still being written must stop for now (``len(text)``:
    all of it may show): at the last word when it may begin a secret
    (:func:`may_begin_secret`), at a ``Bearer`` the token may follow, and at the start of
    what may begin a registered secret with white space inside (a passphrase), each
    measured from the end of the text, since the rest is still to come."""
    word = max(text.rfind(c) for c in " \n\t") + 1
    held = word if may_begin_secret(text[word:]) else len(text)
    tail = text[-256:]
    offset = len(text) - len(tail)
    spaced = _SPACED_SHAPE_START.search(tail)
    if spaced is not None:
        held = min(held, offset + spaced.start())
    for secret in registered_secrets():
        if not any(c.isspace() for c in secret):
            continue
        window = text[-2 * len(secret):]  # (invisible characters may lengthen it)
        base = len(text) - len(window)
        for i in range(len(window)):
            if i and window[i - 1].isalnum():
                continue  # a secret starts a word, or follows a punctuation mark
            part = _FORMAT.sub("", window[i:])
            if part.strip() and secret.startswith(part):
                held = min(held, base + i)
                break
    return held


#: Unicode format characters (category Cf) a secret can be split with and still look whole
_FORMAT = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f]"
)


def _spans(text: str, literals: Iterable[str]) -> list[tuple[int, int]]:
    found = [m.span() for pat in _patterns() for m in pat.finditer(text)]
    for lit in literals:
        start = text.find(lit)
        while start != -1:
            found.append((start, start + len(lit)))
            start = text.find(lit, start + 1)
    return found


def _mask(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """``text`` with the union of ``spans`` masked: overlapping stretches become one mask."""
    out: list[str] = []
    pos = 0
    for a, b in sorted(spans):
        if b <= pos:
            continue
        if a < pos:  # overlaps the stretch masked last: extend it
            pos = b
            continue
        out.append(text[pos:a])
        out.append(MASK)
        pos = b
    out.append(text[pos:])
    return "".join(out)


def _redact_split(text: str, literals: Iterable[str]) -> str:
    """Redaction of a text holding format characters: match on the text without them, then
    mask the matching stretches of the original (format characters inside them included)."""
    kept = [i for i, ch in enumerate(text) if not _FORMAT.match(ch)]
    stripped = "".join(text[i] for i in kept)
    return _mask(text, [(kept[a], kept[b - 1] + 1) for a, b in _spans(stripped, literals)
                        if b > a])


def _literals(extra: Iterable[str]) -> tuple[str, ...]:
    """The registered secrets and the long enough ``extra`` ones, longest first."""
    return _literals_of(_generation, tuple(extra))


@functools.lru_cache(maxsize=64)
def _literals_of(generation: int, extra: tuple[str, ...]) -> tuple[str, ...]:
    # ``generation`` only keys the cache: a secret registered meanwhile is in the set read
    # here, and the next call (a newer generation) computes the list again.
    del generation
    return tuple(sorted(
        {*registered_secrets(), *(s for s in extra if s and len(s) >= _MIN_SECRET_LEN)},
        key=len,
        reverse=True,
    ))


def redact_text(text: str, extra: Iterable[str] = ()) -> str:
    """Mask registered secrets, ``extra`` literals and known key shapes in ``text``."""
    return _redact_text(text, _literals(extra))


def _redact_text(text: str, literals: tuple[str, ...]) -> str:
    if len(text) < _MIN_SECRET_LEN:
        return text  # shorter than any literal secret and any shape
    # every format character is outside ASCII: an ASCII text (most are) is not scanned for
    # them (``isascii`` reads a flag; the scan cost ~3 us per 100 characters)
    if not text.isascii() and _FORMAT.search(text):
        text = _redact_split(text, literals)
    if not any(lit in text for lit in literals) and not _has_shape(text):
        return text
    # Every shape and literal is matched on the same text and the union of the matches is
    # masked: masking one after the other let a match end where an earlier mask began
    # (one platform's key shape followed by another's token: the first shape took the
    # token's digits, and the second, which needs them, no longer saw the key after them).
    return _mask(text, _spans(text, literals))


def redact(obj: Any, secrets: Iterable[str] = (), *, _depth: int = 0) -> Any:
    """Return a copy of ``obj`` with secret-named keys masked and secret values removed."""
    return _redact(obj, _literals(secrets), _depth)


#: JSON's scalars, told apart by ``type(...) is`` before any ``isinstance`` (an ABC check
#: such as ``Mapping`` costs several times a type test, on every value of every record)
_SCALARS = frozenset({int, float, bool, type(None)})


@functools.lru_cache(maxsize=1024)
def _secret_key(name: str) -> bool:
    """Whether a value under ``name`` is masked whatever it is (keys repeat: ``role``,
    ``text``, a log line's fields; the search runs once per name)."""
    return _SECRET_KEY.search(name) is not None


def _redact(obj: Any, literals: tuple[str, ...], depth: int) -> Any:
    if depth > 32:
        return "[depth limit]"
    cls = type(obj)
    if cls is str:
        return _redact_text(obj, literals)
    if cls in _SCALARS:
        return obj
    if cls is not dict and cls is not list:  # subclasses, tuples, other mappings
        if isinstance(obj, str):
            return _redact_text(obj, literals)
        if isinstance(obj, int | float):  # bool is an int
            return obj
        if not isinstance(obj, Mapping | list | tuple):
            return obj
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if (v and isinstance(v, (str, bytes)) and isinstance(k, str)
                    and _secret_key(k)):
                out[k] = MASK
            else:
                out[k] = _redact(v, literals, depth + 1)
        return out
    return [_redact(v, literals, depth + 1) for v in obj]


def redact_values(obj: Any) -> Any:
    """A copy of a JSON-like ``obj`` with every string masked as :func:`redact_text` does;
    unlike :func:`redact`, nothing is masked for its key's name (a record's routing data,
    such as an interaction token under ``token``, must come back as it went in)."""
    return _values(obj, _literals(()), 0)


def _values(obj: Any, literals: tuple[str, ...], depth: int) -> Any:
    cls = type(obj)
    if cls is str or (cls not in _SCALARS and isinstance(obj, str)):
        return _redact_text(obj, literals)
    if depth > 32 or cls in _SCALARS:
        return obj
    if cls is dict or isinstance(obj, Mapping):
        return {k: _values(v, literals, depth + 1) for k, v in obj.items()}
    if cls is list or isinstance(obj, list | tuple):
        return [_values(v, literals, depth + 1) for v in obj]
    return obj
