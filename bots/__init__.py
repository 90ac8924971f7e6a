"""GEODE's chat-ops channel layer and its platform connectors.

The platform-neutral layer (events, bindings, senders, durable inbound/outbound, progress,
formatting, commands, dispatcher) is shared; its records live in ``bots.store`` (the only
SQL of ``bots``); each platform plugs in as a :class:`BaseConnector` subclass (``bots.telegram``,
``bots.slack``, ``bots.discord``) through the channel port (``bots.port``).
:func:`build_connectors` turns ``[channels.*]`` into connectors for ``geode serve``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from bots.connector import BaseConnector
from bots.events import Attachment, InboundEvent, ReplyTarget, thread_key
from bots.format import Chunk
from bots.layer import ChannelLayer, LayerOptions
from bots.port import DeliveryError, Intake, PlatformClient, TurnHost

if TYPE_CHECKING:
    from geode.settings import Secrets, Settings

__all__ = [
    "Attachment",
    "BaseConnector",
    "ChannelLayer",
    "Chunk",
    "DeliveryError",
    "InboundEvent",
    "Intake",
    "LayerOptions",
    "PlatformClient",
    "ReplyTarget",
    "TurnHost",
    "build_connectors",
    "thread_key",
]


def build_connectors(
    host: TurnHost, settings: Settings, secrets: Secrets
) -> list[BaseConnector]:
    """The connectors ``[channels.*]`` enables (``geode serve`` adds each to the daemon).

    Raises:
        ConfigError: a configured channel lacks its token or has an invalid option.
    """
    builders = {"telegram": _telegram_connector, "slack": _slack_connector,
                "discord": _discord_connector}
    out: list[BaseConnector] = []
    for name, build in builders.items():
        raw = settings.channels.get(name)
        if raw is not None and raw.get("enabled", True):
            out.append(build(host, settings, secrets, raw))
    return out


_Options = TypeVar("_Options", bound="LayerOptions")


def _options(channel: str, cls: type[_Options], raw: dict[str, object]) -> _Options:
    """``[channels.<channel>]`` as ``cls``; an invalid one is a ConfigError naming the table."""
    from pydantic import ValidationError

    from geode.errors import ConfigError

    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"invalid [channels.{channel}]: {exc}") from exc


def _token(channel: str, secrets: Secrets, env: str, what: str) -> str:
    """The secret in ``$env``; unset is a ConfigError saying to put ``what`` there."""
    from geode.errors import ConfigError

    token = secrets.get(env)
    if not token:
        raise ConfigError(
            f"[channels.{channel}] is configured but ${env} is not set: put {what} in the "
            "environment or $GEODE_HOME/.env."
        )
    return token


def _telegram_connector(
    host: TurnHost, settings: Settings, secrets: Secrets, raw: dict[str, object]
) -> BaseConnector:
    from bots.telegram import TelegramConnector, TelegramOptions

    opts = _options("telegram", TelegramOptions, raw)
    token = _token("telegram", secrets, opts.token_env, "the token from @BotFather")
    return TelegramConnector(
        host=host, token=token, bindings=settings.bindings, options=opts,
        webhook_secret=secrets.get(opts.webhook_secret_env),
    )


def _slack_connector(
    host: TurnHost, settings: Settings, secrets: Secrets, raw: dict[str, object]
) -> BaseConnector:
    from bots.slack import SlackConnector, SlackOptions

    opts = _options("slack", SlackOptions, raw)
    token = _token("slack", secrets, opts.bot_token_env,
                   "the Bot User OAuth Token (xoxb-…)")
    return SlackConnector(
        host=host, bot_token=token, app_token=secrets.get(opts.app_token_env),
        signing_secret=secrets.get(opts.signing_secret_env), bindings=settings.bindings,
        options=opts,
    )


def _discord_connector(
    host: TurnHost, settings: Settings, secrets: Secrets, raw: dict[str, object]
) -> BaseConnector:
    from bots.discord import DiscordConnector, DiscordOptions

    opts = _options("discord", DiscordOptions, raw)
    token = _token("discord", secrets, opts.token_env,
                   "the bot token (Developer Portal -> Bot -> Reset Token)")
    return DiscordConnector(host=host, token=token, bindings=settings.bindings, options=opts)
