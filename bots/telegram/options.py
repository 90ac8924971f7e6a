"""``[channels.telegram]``: the Telegram connector's typed options and its platform spec.

Unknown keys are refused (:class:`bots.options.LayerOptions` forbids extras), so a misspelt
``base_ur`` is an error naming ``base_url``, never a silently ignored line.
"""

from __future__ import annotations

from typing import Literal

from bots.options import LayerOptions, PlatformSpec, TokenSpec

#: PTB's HTTP transport (``bots.telegram._request``; spelt out here: this module imports no
#: SDK, the harness reads the spec in every process)
HttpBackend = Literal["aiohttp", "httpx"]

__all__ = ["SPEC", "TelegramOptions"]


class TelegramOptions(LayerOptions):
    """``[channels.telegram]`` (CONTRACT.md): secrets are named by ``*_env`` keys."""

    token_env: str = "TELEGRAM_BOT_TOKEN"
    base_url: str = "https://api.telegram.org/bot"
    base_file_url: str = "https://api.telegram.org/file/bot"
    mode: Literal["polling", "webhook"] = "polling"
    poll_timeout_s: float = 25.0
    poll_limit: int = 100
    webhook_url: str | None = None
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = 8443
    webhook_path: str = "/telegram"
    webhook_secret_env: str = "TELEGRAM_WEBHOOK_SECRET"
    rate_overall_per_s: float = 30.0
    rate_group_per_min: float = 20.0
    max_retry_after_s: float = 30.0
    connection_pool_size: int = 128
    #: "httpx" is PTB's default transport; needed for a proxy (aiohttp here ignores proxies)
    http_backend: HttpBackend = "aiohttp"


SPEC = PlatformSpec(
    name="telegram", options=TelegramOptions, connector="bots.telegram:build_connector",
    tokens=(TokenSpec(option="token_env", what="the token from @BotFather"),),
    # a bot token (also inside a Bot API URL: .../bot<token>/getMe)
    secret_shapes=(r"(?<!\d)\d{5,}:[A-Za-z0-9_\-]{30,}",),
    extra="telegram", sdk_modules=("telegram",),
    env_lines=("# TELEGRAM_BOT_TOKEN=...",), team="bot id",
)
