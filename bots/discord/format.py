"""Model Markdown for Discord, which renders Markdown itself: the source is kept and split
by the shared renderer's Markdown splitter (:func:`bots.render.split_markdown_source`: by
lines, code fences balanced per chunk, UTF-16 lengths); the formatted text is its own
fallback."""

from __future__ import annotations

from collections.abc import Callable

import discord

from bots.format import Chunk
from bots.render import split_markdown_source, utf16_len

__all__ = ["DISCORD_LIMIT", "chunk_fenced_markdown", "render_progress"]

DISCORD_LIMIT = 2000


def chunk_fenced_markdown(
    markdown: str, *, limit: int = DISCORD_LIMIT, length: Callable[[str], int] = utf16_len
) -> list[Chunk]:
    """The answer's Markdown in chunks of at most ``limit`` UTF-16 units, each rendering on
    its own (see :func:`bots.render.split_markdown_source`)."""
    return split_markdown_source(markdown, limit=limit, length=length)


def render_progress(text: str) -> Chunk:
    """A progress message's plain lines, with Markdown characters escaped (a tool name
    such as ``__init__`` must not turn bold), and the raw text as the fallback."""
    return Chunk(formatted=discord.utils.escape_markdown(text), fallback=text)
