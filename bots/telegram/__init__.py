"""The Telegram connector (python-telegram-bot): long polling with a store lease, or webhook.

Its names are imported when first used (:mod:`bots.telegram.options`, the platform's spec,
imports no SDK: the harness reads it in every process).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geode._imports import import_without, lazy_attributes

if TYPE_CHECKING:
    from bots.port import TurnHost
    from bots.telegram.client import PerChatRateLimiter
    from bots.telegram.connector import TelegramConnector
    from bots.telegram.options import TelegramOptions
    from geode.settings import Secrets, Settings

__all__ = ["PerChatRateLimiter", "TelegramConnector", "TelegramOptions", "build_connector"]

_LAZY = {"PerChatRateLimiter": "bots.telegram.client",
         "TelegramConnector": "bots.telegram.connector",
         "TelegramOptions": "bots.telegram.options"}


def _load_sdk() -> None:
    # Before any module here imports it: PTB without cryptography (Telegram Passport only)
    # and tornado (PTB's own webhook server; GEODE's webhook is an aiohttp endpoint), its
    # httpx without the command-line extras (rich, pygments); see geode._imports.
    import_without("telegram.ext", "cryptography", "tornado", "rich", "pygments")


__getattr__ = lazy_attributes(__name__, _LAZY, before=_load_sdk)


def build_connector(*, host: TurnHost, settings: Settings, secrets: Secrets,
                    options: TelegramOptions) -> TelegramConnector:
    """The connector of ``[channels.telegram]`` (its spec's builder, ``geode serve``)."""
    from bots.platforms import required_secret
    from bots.telegram.options import SPEC

    _load_sdk()
    from bots.telegram.connector import TelegramConnector

    return TelegramConnector(
        host=host, token=required_secret(SPEC, options, secrets, SPEC.tokens[0]),
        bindings=settings.bindings, options=options,
        webhook_secret=secrets.get(options.webhook_secret_env),
    )
