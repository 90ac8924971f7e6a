"""Telegram-flavoured HTML, parsed the way the Bot API parses ``parse_mode=HTML``.

Used by :mod:`bots.testing.telegram` to reject what Telegram rejects ("can't parse
entities") and to report the plain text and entities Telegram would store.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

JSONDict = dict[str, Any]

__all__ = ["TelegramEntityError", "parse_telegram_html", "utf16_len"]

_ENTITY_TYPES = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "span": "spoiler",
    "tg-spoiler": "spoiler",
    "tg-emoji": "custom_emoji",
    "code": "code",
    "pre": "pre",
    "blockquote": "blockquote",
    "a": "text_link",
}
_HTML_TAGS = frozenset(_ENTITY_TYPES)  # the tags the Bot API supports
_HTML_ENTITY = re.compile(r"&(lt|gt|amp|quot|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});")
_HTML_ATTR = re.compile(r"""\s*([a-zA-Z_-]+)\s*(?:=\s*("[^"]*"|'[^']*'|[^\s>"']+))?""")


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class TelegramEntityError(ValueError):
    """Raised by :func:`parse_telegram_html` with Telegram's own wording of the problem."""


def parse_telegram_html(text: str) -> tuple[str, list[JSONDict]]:
    """Parse Telegram-flavoured HTML the way the Bot API does.

    Follows TDLib's ``parse_html``: only the supported tags, only ``&lt; &gt; &amp; &quot;`` and
    numeric character references are decoded (any other ``&`` stays literal), tags must nest.

    Returns:
        The plain text and its entities (offsets and lengths in UTF-16 code units).

    Raises:
        TelegramEntityError: the text is malformed; the message is Telegram's description.
    """
    out: list[str] = []
    pos16 = 0
    stack: list[tuple[str, int, dict[str, str]]] = []
    entities: list[JSONDict] = []
    i, n = 0, len(text)

    def emit(chunk: str) -> None:
        nonlocal pos16
        out.append(chunk)
        pos16 += utf16_len(chunk)

    while i < n:
        c = text[i]
        if c == "&":
            m = _HTML_ENTITY.match(text, i)
            if m:
                emit(_decode_entity(m.group(1)))
                i = m.end()
                continue
        if c != "<":
            emit(c)
            i += 1
            continue
        offset = len(text[:i].encode())
        close = text.find(">", i)
        if i + 1 < n and text[i + 1] == "/":
            if close == -1:
                raise TelegramEntityError(f"Unclosed end tag at byte offset {offset}")
            name = text[i + 2 : close].strip().lower()
            if not stack:
                raise TelegramEntityError(f"Unexpected end tag at byte offset {offset}")
            top, start, attrs = stack.pop()
            if name != top:
                raise TelegramEntityError(
                    f'Unmatched end tag at byte offset {offset}, expected "</{top}>", '
                    f'found "</{name}>"'
                )
            if pos16 > start:
                entities.append(_entity(top, start, pos16 - start, attrs))
            i = close + 1
            continue
        if close == -1:
            raise TelegramEntityError(f"Unclosed start tag at byte offset {offset}")
        inner = text[i + 1 : close]
        name_match = re.match(r"[^\s/>]*", inner)
        name = (name_match.group(0) if name_match else "").lower()
        if name not in _HTML_TAGS:
            raise TelegramEntityError(f'Unsupported start tag "{name}" at byte offset {offset}')
        attrs = {k.lower(): v.strip("\"'") for k, v in _HTML_ATTR.findall(inner[len(name) :])}
        if name == "span" and attrs.get("class") != "tg-spoiler":
            raise TelegramEntityError(
                f'Tag "span" must have class "tg-spoiler" at byte offset {offset}'
            )
        stack.append((name, pos16, attrs))
        i = close + 1
    if stack:
        raise TelegramEntityError(
            f'Can\'t find end tag corresponding to start tag "{stack[-1][0]}"'
        )
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return "".join(out), entities


def _decode_entity(ref: str) -> str:
    named = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
    if ref in named:
        return named[ref]
    code = int(ref[2:], 16) if ref[1] in "xX" else int(ref[1:])
    return chr(code) if 0 < code <= 0x10FFFF else ""


def _entity(tag: str, offset: int, length: int, attrs: Mapping[str, str]) -> JSONDict:
    ent: JSONDict = {"type": _ENTITY_TYPES[tag], "offset": offset, "length": length}
    if tag == "a":
        ent["url"] = attrs.get("href", "")
    if tag == "pre" and "language" in attrs:
        ent["language"] = attrs["language"]
    if tag == "blockquote" and "expandable" in attrs:
        ent["type"] = "expandable_blockquote"
    if tag == "tg-emoji":
        ent["custom_emoji_id"] = attrs.get("emoji-id", "")
    return ent
