"""The Discord connector (discord.py gateway): threads as sessions, durable intake + catch-up.

Its names are imported when first used (:mod:`bots.discord.options`, the platform's spec,
imports no SDK: the harness reads it in every process).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geode._imports import lazy_attributes

if TYPE_CHECKING:
    from bots.discord.commands_sync import SLASH_COMMANDS, sync_commands
    from bots.discord.connector import DiscordConnector, DiscordOptions
    from bots.port import TurnHost
    from geode.settings import Secrets, Settings

__all__ = ["SLASH_COMMANDS", "DiscordConnector", "DiscordOptions", "build_connector",
           "sync_commands"]

_LAZY = {"SLASH_COMMANDS": "bots.discord.commands_sync",
         "sync_commands": "bots.discord.commands_sync",
         "DiscordConnector": "bots.discord.connector", "DiscordOptions": "bots.discord.connector"}


__getattr__ = lazy_attributes(__name__, _LAZY)


def build_connector(*, host: TurnHost, settings: Settings, secrets: Secrets,
                    options: DiscordOptions) -> DiscordConnector:
    """The connector of ``[channels.discord]`` (its spec's builder, ``geode serve``)."""
    from bots.discord.connector import DiscordConnector
    from bots.discord.options import SPEC
    from bots.platforms import required_secret

    return DiscordConnector(
        host=host, token=required_secret(SPEC, options, secrets, SPEC.tokens[0]),
        bindings=settings.bindings, options=options,
    )
