"""``[channels.discord]``: the Discord connector's typed options and its platform spec.

Unknown keys are refused (:class:`bots.options.LayerOptions` forbids extras), so a misspelt
``base_ur`` is an error naming ``base_url``, never a silently ignored line.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bots.options import LayerOptions, PlatformSpec, TokenSpec

__all__ = ["SPEC", "DiscordOptions"]


class DiscordOptions(LayerOptions):
    """``[channels.discord]`` (CONTRACT.md): the token is named by ``token_env``."""

    token_env: str = "DISCORD_BOT_TOKEN"
    api_base: str = "https://discord.com/api/v10"
    gateway_url: str = "wss://gateway.discord.gg/"
    #: "thread": a mention in a channel opens a thread on it; "inline": reply in place
    reply_mode: Literal["thread", "inline"] = "thread"
    thread_auto_archive_minutes: Literal[60, 1440, 4320, 10080] = 1440
    #: discord.py waits this long after the last GUILD_CREATE before READY is complete
    guild_ready_timeout_s: float = 2.0
    #: pause before a non-initial IDENTIFY (Discord's identify rate limit)
    identify_delay_s: float = 5.0
    #: a single 429 wait longer than this fails the request (retried by the outbox)
    max_ratelimit_timeout_s: float = 60.0
    #: REST requests a second for the whole bot (Discord allows 50; discord.py paces each
    #: route's bucket by itself but learns of this one only from a 429); 0 = no limit
    rate_global_per_s: float = Field(default=45.0, ge=0)
    #: catch-up re-reads this much history before each cursor (dedupe drops the overlap)
    catch_up_overlap_s: float = 60.0
    catch_up_max_pages: int = 20
    #: earlier messages of a thread fetched as context on the bot's first mention in it
    thread_history_max: int = 50
    #: the largest file the bot may attach (Discord's default is 10 MiB; boosted servers
    #: allow more)
    max_upload_mb: float = 10.0


SPEC = PlatformSpec(
    name="discord", options=DiscordOptions, connector="bots.discord:build_connector",
    tokens=(TokenSpec(option="token_env",
                      what="the bot token (Developer Portal -> Bot -> Reset Token)"),),
    # a bot token: base64 user id . timestamp . HMAC
    secret_shapes=(r"\b[MN][A-Za-z\d_\-]{23,25}\.[A-Za-z\d_\-]{6}\.[A-Za-z\d_\-]{27,}\b",),
    extra="discord", sdk_modules=("discord",),
    team="guild", sync_commands="bots.discord.commands_sync:sync_commands",
)
