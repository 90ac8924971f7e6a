"""GEODE's chat-ops channel layer and its platform connectors.

The platform-neutral layer (events, bindings, senders, sessions, durable inbound/outbound,
progress, formatting, commands, dispatcher) is shared; each platform plugs in as a
:class:`BaseConnector` subclass (``bots.telegram``; Slack and Discord follow the same shape).
:func:`build_connectors` turns ``[channels.*]`` into connectors for ``geode serve``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bots.connector import BaseConnector, DeliveryError, TurnHost
from bots.events import Attachment, InboundEvent, ReplyTarget, thread_key
from bots.format import Chunk, chunk_markdown, markdown_to_telegram_html
from bots.layer import ChannelLayer, LayerOptions

if TYPE_CHECKING:
    from geode.settings import Secrets, Settings

__all__ = [
    "Attachment",
    "BaseConnector",
    "ChannelLayer",
    "Chunk",
    "DeliveryError",
    "InboundEvent",
    "LayerOptions",
    "ReplyTarget",
    "TurnHost",
    "build_connectors",
    "chunk_markdown",
    "markdown_to_telegram_html",
    "thread_key",
]


def build_connectors(
    host: TurnHost, settings: Settings, secrets: Secrets
) -> list[BaseConnector]:
    """The connectors ``[channels.*]`` enables (``geode serve`` adds each to the daemon).

    Raises:
        ConfigError: a configured channel lacks its token or has an invalid option.
    """
    from pydantic import ValidationError

    from geode.errors import ConfigError

    out: list[BaseConnector] = []
    raw = settings.channels.get("telegram")
    if raw is not None and raw.get("enabled", True):
        from bots.telegram import TelegramConnector, TelegramOptions

        try:
            opts = TelegramOptions.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(f"invalid [channels.telegram]: {exc}") from exc
        token = secrets.get(opts.token_env)
        if not token:
            raise ConfigError(
                f"[channels.telegram] is configured but ${opts.token_env} is not set: put the "
                "token from @BotFather in the environment or $GEODE_HOME/.env."
            )
        out.append(TelegramConnector(
            host=host, token=token, bindings=settings.bindings, options=opts,
            webhook_secret=secrets.get(opts.webhook_secret_env),
        ))
    raw = settings.channels.get("slack")
    if raw is not None and raw.get("enabled", True):
        out.append(_slack_connector(host, settings, secrets, raw))
    raw = settings.channels.get("discord")
    if raw is not None and raw.get("enabled", True):
        out.append(_discord_connector(host, settings, secrets, raw))
    return out


def _slack_connector(
    host: TurnHost, settings: Settings, secrets: Secrets, raw: dict[str, object]
) -> BaseConnector:
    from pydantic import ValidationError

    from bots.slack import SlackConnector, SlackOptions
    from geode.errors import ConfigError

    try:
        opts = SlackOptions.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"invalid [channels.slack]: {exc}") from exc
    token = secrets.get(opts.bot_token_env)
    if not token:
        raise ConfigError(
            f"[channels.slack] is configured but ${opts.bot_token_env} is not set: put the Bot "
            "User OAuth Token (xoxb-…) in the environment or $GEODE_HOME/.env."
        )
    return SlackConnector(
        host=host, bot_token=token, app_token=secrets.get(opts.app_token_env),
        signing_secret=secrets.get(opts.signing_secret_env), bindings=settings.bindings,
        options=opts,
    )


def _discord_connector(
    host: TurnHost, settings: Settings, secrets: Secrets, raw: dict[str, object]
) -> BaseConnector:
    from pydantic import ValidationError

    from bots.discord import DiscordConnector, DiscordOptions
    from geode.errors import ConfigError

    try:
        opts = DiscordOptions.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"invalid [channels.discord]: {exc}") from exc
    token = secrets.get(opts.token_env)
    if not token:
        raise ConfigError(
            f"[channels.discord] is configured but ${opts.token_env} is not set: put the bot "
            "token (Developer Portal -> Bot -> Reset Token) in the environment or "
            "$GEODE_HOME/.env."
        )
    return DiscordConnector(host=host, token=token, bindings=settings.bindings, options=opts)
