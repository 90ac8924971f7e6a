"""Register the slash commands (``geode bindings sync-commands --platform discord``).

Done on request, per guild, never on every boot: guild commands update at once, and a
restart loop must not hammer Discord's command endpoints (the peers' 429 lockouts on
``setMyCommands``). The guilds default to those of the bound channels.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import discord
import discord.http
import structlog

from geode.errors import ConfigError
from geode.settings import Secrets, Settings

__all__ = ["SLASH_COMMANDS", "sync_commands"]

log = structlog.get_logger(__name__)
# GEODE never joins voice: discord.py's "PyNaCl/davey not installed" warnings are noise.
discord.VoiceClient.warn_nacl = False
discord.VoiceClient.warn_dave = False

SLASH_COMMANDS: list[dict[str, Any]] = [
    {"name": "new", "description": "Start a new GEODE session in this thread", "type": 1},
    {"name": "reset", "description": "Same as /new", "type": 1},
    {"name": "status", "description": "Session, model and running turn of this thread",
     "type": 1},
    {"name": "stop", "description": "Stop the running turn of this thread", "type": 1},
    {"name": "help", "description": "What GEODE does here", "type": 1},
]


async def sync_commands(
    settings: Settings, secrets: Secrets, guild_ids: Sequence[str] = (), *,
    extra_channels: Sequence[str] = (),
) -> list[str]:
    """Overwrite the guild commands with :data:`SLASH_COMMANDS`; one line per guild.

    Args:
        settings: for ``[channels.discord]`` (token name, ``api_base``) and the bindings.
        secrets: where the token is read.
        guild_ids: guilds to register in; empty = the guilds of the bound Discord channels.
        extra_channels: more bound channel ids (``geode bindings add`` ones, from the store).

    Raises:
        ConfigError: no token, a rejected token, or no guild to register in.
    """
    from bots.discord.connector import DiscordOptions

    try:
        opts = DiscordOptions.model_validate(settings.channels.get("discord") or {})
    except ValueError as exc:
        raise ConfigError(f"invalid [channels.discord]: {exc}") from exc
    token = secrets.get(opts.token_env)
    if not token:
        raise ConfigError(f"${opts.token_env} is not set: put the bot token in the environment "
                          "or $GEODE_HOME/.env.")
    route = discord.http.Route
    saved = route.BASE
    route.BASE = opts.api_base.rstrip("/")
    client = discord.Client(intents=discord.Intents(guilds=True))
    try:
        try:
            await client.login(token)
        except discord.LoginFailure as exc:
            raise ConfigError(f"Discord rejected the token in ${opts.token_env}.") from exc
        app_id = client.application_id
        assert app_id is not None
        guilds = [g for g in guild_ids if g]
        if not guilds:
            guilds = await _bound_guilds(client, settings, extra_channels)
        if not guilds:
            raise ConfigError("no guild to register commands in: bind a Discord channel "
                              "first, or pass --guild ID.")
        out = []
        for gid in guilds:
            done = await client.http.bulk_upsert_guild_commands(app_id, int(gid),
                                                                SLASH_COMMANDS)
            names = ", ".join(f"/{c['name']}" for c in done)
            log.info("discord.commands_synced", guild=gid, count=len(done))
            out.append(f"guild {gid}: {names}")
        return out
    finally:
        with contextlib.suppress(Exception):
            await client.close()
        route.BASE = saved


async def _bound_guilds(
    client: discord.Client, settings: Settings, extra: Sequence[str]
) -> list[str]:
    guilds: list[str] = []
    channels = [b.channel for b in settings.bindings if b.platform == "discord"]
    for channel in dict.fromkeys([*channels, *extra]):
        if not channel.isdigit():
            continue
        try:
            raw: dict[str, Any] = dict(await client.http.get_channel(int(channel)))
        except discord.HTTPException as exc:
            log.warning("discord.bound_channel_unavailable", channel=channel, error=str(exc))
            continue
        gid = str(raw.get("guild_id") or "")
        if gid and gid not in guilds:
            guilds.append(gid)
    return guilds
