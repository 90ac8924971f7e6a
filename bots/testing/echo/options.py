"""``[channels.echo]``: the echo chat's options and its platform spec (imports no SDK)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bots.options import LayerOptions, PlatformSpec, TokenSpec

if TYPE_CHECKING:
    from geode.settings import Secrets

__all__ = ["SPEC", "EchoOptions"]


class EchoOptions(LayerOptions):
    """``[channels.echo]``: which in-process chat, and the variable naming the bot's token."""

    chat: str = "default"
    token_env: str = "ECHO_CHAT_TOKEN"


def _chat_open(options: EchoOptions, secrets: Secrets) -> str | None:
    from bots.testing.echo.chat import EchoChat

    if EchoChat.named(options.chat) is None:
        return f"[channels.echo] chat {options.chat!r} is not open"
    return None


SPEC = PlatformSpec(
    name="echo", options=EchoOptions, connector="bots.testing.echo.connector:build_connector",
    tokens=(TokenSpec(option="token_env", what="the echo bot's token (echo-tok-…)"),),
    secret_shapes=(r"echo-tok-[a-z0-9]{12,}",),
    checks=(_chat_open,), team="chat",
)
