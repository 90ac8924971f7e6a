"""The Telegram connector (python-telegram-bot): long polling with a store lease, or webhook."""

from bots.telegram._ratelimit import PerChatRateLimiter
from bots.telegram.connector import TelegramConnector, TelegramOptions

__all__ = ["PerChatRateLimiter", "TelegramConnector", "TelegramOptions"]
