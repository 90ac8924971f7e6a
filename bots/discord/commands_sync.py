"""Register the slash commands: at connector start, and on request
(``geode bindings sync-commands --platform discord``).

Per guild (guild commands update at once), and only where they differ: the guild's commands
are read first and written (one bulk overwrite) only when they are not the menu already, so a
restart loop or a second replica reads and writes nothing more (the peers' 429 lockouts came
from writing on every boot). The guilds default to those of the bound channels.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import discord
import discord.http
import structlog

from bots.command_menu import menu
from geode.errors import ConfigError
from geode.settings import Secrets, Settings

__all__ = ["SLASH_COMMANDS", "bound_guilds", "register", "sync_commands"]

log = structlog.get_logger(__name__)
# GEODE never joins voice: discord.py's "PyNaCl/davey not installed" warnings are noise.
discord.VoiceClient.warn_nacl = False
discord.VoiceClient.warn_dave = False

#: the thread commands as guild slash commands (``bots.command_menu``; the private-only ones
#: aside: a guild has no direct messages); their options are strings
SLASH_COMMANDS: list[dict[str, Any]] = [
    {"name": c.name, "description": c.description[:100], "type": 1,
     **({"options": [{"type": 3, "name": n, "description": d[:100], "required": r}
                     for n, d, r in c.options]} if c.options else {})}
    for c in menu(private=False)
]


def _shape(commands: Sequence[Any]) -> list[tuple[Any, ...]]:
    """What a command list declares, as Discord answers it (it leaves ``required`` out
    when false, and options out when none)."""
    return [(c.get("name"), c.get("description"), int(c.get("type") or 1),
             tuple((o.get("name"), o.get("description"), int(o.get("type") or 0),
                    bool(o.get("required"))) for o in c.get("options") or ()))
            for c in commands]


async def register(http: Any, app_id: int, guild_ids: Sequence[str]) -> list[str]:
    """Make each guild's commands :data:`SLASH_COMMANDS`, writing only where they differ;
    one line per guild. ``http`` is discord.py's ``HTTPClient`` (logged in)."""
    out = []
    for gid in guild_ids:
        held = await http.get_guild_commands(app_id, int(gid))
        if _shape(held) == _shape(SLASH_COMMANDS):
            out.append(f"guild {gid}: unchanged")
            continue
        done = await http.bulk_upsert_guild_commands(app_id, int(gid), SLASH_COMMANDS)
        names = ", ".join(f"/{c['name']}" for c in done)
        log.info("discord.commands_synced", guild=gid, count=len(done))
        out.append(f"guild {gid}: {names}")
    return out


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
    from bots.discord.options import DiscordOptions

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
            channels = [b.channel for b in settings.bindings if b.platform == "discord"]
            guilds = await bound_guilds(client.http, [*channels, *extra_channels])
        if not guilds:
            raise ConfigError("no guild to register commands in: bind a Discord channel "
                              "first, or pass --guild ID.")
        return await register(client.http, app_id, guilds)
    finally:
        with contextlib.suppress(Exception):
            await client.close()
        route.BASE = saved


async def bound_guilds(http: Any, channels: Sequence[str]) -> list[str]:
    """The guilds of the bound ``channels`` (one channel read each)."""
    guilds: list[str] = []
    for channel in dict.fromkeys(channels):
        if not channel.isdigit():
            continue
        try:
            raw: dict[str, Any] = dict(await http.get_channel(int(channel)))
        except discord.HTTPException as exc:
            log.warning("discord.bound_channel_unavailable", channel=channel, error=str(exc))
            continue
        gid = str(raw.get("guild_id") or "")
        if gid and gid not in guilds:
            guilds.append(gid)
    return guilds
