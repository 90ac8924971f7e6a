"""The Telegram connector (python-telegram-bot): long polling with a store lease, or webhook."""

from geode._imports import import_without

# Before any module here imports it: PTB without cryptography (Telegram Passport only) and
# tornado (PTB's own webhook server; GEODE's webhook is an aiohttp endpoint), its httpx
# without the command-line extras (rich, pygments); see geode._imports.
import_without("telegram.ext", "cryptography", "tornado", "rich", "pygments")

from bots.telegram._ratelimit import PerChatRateLimiter  # noqa: E402
from bots.telegram.connector import TelegramConnector, TelegramOptions  # noqa: E402

__all__ = ["PerChatRateLimiter", "TelegramConnector", "TelegramOptions"]
