"""A PTB rate limiter that honours 429 ``retry_after`` per chat, without freezing the others.

PTB's ``AIORateLimiter`` pauses *every* request of the bot while it sleeps off one chat's
``retry_after`` (a global event): one flooded group then delays every other chat's replies,
the "429 freeze" peers' users report. This limiter keeps PTB's ``BaseRateLimiter``
interface (plugged in with ``ExtBot(rate_limiter=...)``) and the same throughput limits
(``aiolimiter``: overall per second, group ``sendMessage`` per minute), but a 429 only holds
back later requests *to that chat*. A ``retry_after`` longer than ``max_retry_after_s`` is
not slept on inside the request: it is raised, so the caller can keep the reply in the
outbox instead of blocking a worker for minutes.

Answers first: the overall budget (30 requests/s by default) is shared by every call, and a
reply is three of them (the 👀 reaction, the progress message, the answer as its edit) plus
"typing" every few seconds per running turn. When the budget is short, the cosmetic calls
(``sendChatAction``, ``setMessageReaction``) take only what the others leave: they wait
while any other request waits for the budget, and a "typing" that cannot go at once is
dropped (it lasts 5 s and the next one follows), so a burst of typing indicators never
delays an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

import structlog
from aiolimiter import AsyncLimiter
from telegram.error import RetryAfter
from telegram.ext import BaseRateLimiter

__all__ = ["PerChatRateLimiter", "retry_after_seconds"]

log = structlog.get_logger(__name__)

JSONDict = dict[str, Any]
#: calls that only decorate a reply: they get the overall budget the others leave
COSMETIC = frozenset({"sendChatAction", "setMessageReaction"})


def retry_after_seconds(exc: RetryAfter) -> float:
    """``retry_after`` as seconds, whichever representation this PTB version keeps."""
    raw = getattr(exc, "_retry_after", None)
    if isinstance(raw, timedelta):
        return raw.total_seconds()
    if isinstance(raw, int | float):
        return float(raw)
    return 1.0


class PerChatRateLimiter(BaseRateLimiter[int]):
    """Throughput limits plus per-chat 429 back-off (see the module docstring).

    Args:
        overall_max_rate: requests per ``overall_time_period`` for the whole bot (0 = off).
        group_max_rate: ``sendMessage`` calls per ``group_time_period`` per group (0 = off).
        max_retries: retries of one request after a 429.
        max_retry_after_s: longest ``retry_after`` slept on inside a request.
        on_retry: told of each 429 slept off and retried here (the daemon's metrics).
    """

    def __init__(
        self,
        *,
        overall_max_rate: float = 30,
        overall_time_period: float = 1,
        group_max_rate: float = 20,
        group_time_period: float = 60,
        max_retries: int = 3,
        max_retry_after_s: float = 30.0,
        on_retry: Callable[[], None] | None = None,
    ) -> None:
        self._overall = (AsyncLimiter(overall_max_rate, overall_time_period)
                         if overall_max_rate > 0 else None)
        #: how long one request's share of the overall budget takes to come back
        self._slot_s = overall_time_period / overall_max_rate if overall_max_rate > 0 else 0.0
        #: requests other than cosmetic ones now waiting for the overall budget
        self._waiting = 0
        self.dropped_typing = 0
        self._group_rate = group_max_rate
        self._group_period = group_time_period
        self._groups: dict[str, AsyncLimiter] = {}
        self.max_retries = max_retries
        self.max_retry_after_s = max_retry_after_s
        #: chat id -> monotonic time before which nothing is sent to it
        self._held_until: dict[str, float] = {}
        self.hits: list[tuple[str, float]] = []  # (chat, retry_after) for tests and metrics
        #: called for each 429 slept off here (one raised to the caller is the caller's to count)
        self._on_retry = on_retry or (lambda: None)

    async def initialize(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None

    def _group(self, chat: str) -> Any:
        if self._group_rate <= 0:
            return contextlib.nullcontext()
        limiter = self._groups.get(chat)
        if limiter is None:
            limiter = self._groups[chat] = AsyncLimiter(self._group_rate, self._group_period)
        return limiter

    async def _take_overall(self, endpoint: str) -> bool:
        """One unit of the overall budget; False: a "typing" dropped instead (see module)."""
        limiter = self._overall
        if limiter is None:
            return True
        if endpoint not in COSMETIC:
            self._waiting += 1
            try:
                await limiter.acquire()
            finally:
                self._waiting -= 1
            return True
        while self._waiting or not limiter.has_capacity():
            if endpoint == "sendChatAction":
                self.dropped_typing += 1
                return False
            await asyncio.sleep(self._slot_s)
        await limiter.acquire()
        return True

    async def _wait_for_chat(self, chat: str | None) -> None:
        while chat is not None:
            delay = self._held_until.get(chat, 0.0) - time.monotonic()
            if delay <= 0:
                return
            await asyncio.sleep(delay)

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, bool | JSONDict | list[JSONDict]]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> bool | JSONDict | list[JSONDict]:
        raw_chat = data.get("chat_id")
        chat = None if raw_chat is None else str(raw_chat)
        is_group = chat is not None and (chat.startswith("-") or chat.startswith("@"))
        retries = self.max_retries if rate_limit_args is None else rate_limit_args
        for attempt in range(retries + 1):
            await self._wait_for_chat(chat)
            try:
                group = self._group(chat) if is_group and endpoint == "sendMessage" and chat \
                    else contextlib.nullcontext()
                async with group:
                    if not await self._take_overall(endpoint):
                        return True  # the Bot API's answer to sendChatAction
                    return await callback(*args, **kwargs)
            except RetryAfter as exc:
                delay = retry_after_seconds(exc)
                self.hits.append((chat or "", delay))
                if chat is not None:
                    # Only this chat waits; other chats' requests go on.
                    until = time.monotonic() + delay + 0.05
                    self._held_until[chat] = max(self._held_until.get(chat, 0.0), until)
                if attempt == retries or delay > self.max_retry_after_s:
                    raise
                log.info("telegram.rate_limited", chat=chat, retry_after=delay,
                         endpoint=endpoint)
                self._on_retry()
                if chat is None:
                    await asyncio.sleep(delay)
        raise AssertionError("unreachable")
