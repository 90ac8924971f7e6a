"""``[channels.webchat]``: the web chat's typed options and its platform spec.

The web chat needs no account anywhere: its "platform" is the console's web server and the
store (``bots.webchat``), so the spec names no token, no SDK and no secret shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from bots.options import LayerOptions, PlatformSpec

__all__ = ["SPEC", "WORKSPACE", "WebChatOptions", "WebChatSpec"]

#: the web chat's one "team": session ids are ``webchat:web:<channel>:<thread root>``
WORKSPACE = "web"


class WebChatOptions(LayerOptions):
    """``[channels.webchat]`` (CONTRACT.md): limits of what a browser may post."""

    #: a message longer than this (characters) is refused
    max_message_chars: int = Field(default=8000, ge=1, le=100_000)
    #: a file larger than this (MB) is refused, in and out
    max_file_mb: float = Field(default=10.0, gt=0, le=100)
    #: how often an open thread page looks for new changes (seconds)
    poll_interval_s: float = Field(default=0.5, gt=0, le=10)
    #: the bot's name shown in the thread
    bot_name: str = Field(default="GEODE", min_length=1, max_length=50)


@dataclass(frozen=True, kw_only=True)
class WebChatSpec(PlatformSpec):
    """The web chat's spec: a platform spec that also adds the ``/chat`` pages to the
    console (``bots.console.routes.AddsConsolePages``)."""

    console_routes: str = "bots.webchat.routes:mount"


SPEC = WebChatSpec(
    name="webchat", options=WebChatOptions, connector="bots.webchat.connector:build_connector",
    team="site",
)
