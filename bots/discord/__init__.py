"""The Discord connector (discord.py gateway): threads as sessions, durable intake + catch-up."""

from bots.discord.commands_sync import SLASH_COMMANDS, sync_commands
from bots.discord.connector import DiscordConnector, DiscordOptions

__all__ = ["SLASH_COMMANDS", "DiscordConnector", "DiscordOptions", "sync_commands"]
