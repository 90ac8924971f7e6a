"""The one bounded, logged retry policy for provider calls.

Adapters never retry (the SDKs' own retries are off); the loop wraps each call in
:func:`call_with_retry`, so every retry is visible, bounded and testable.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog

from geode.errors import ModelError

__all__ = ["RetryPolicy", "backoff_delay", "call_with_retry"]

log = structlog.get_logger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry retryable :class:`ModelError` kinds.

    Attributes:
        max_attempts: total calls including the first (1 = never retry).
        base_delay: first backoff ceiling in seconds; doubles per attempt.
        max_delay: upper bound for any wait, including a server's ``retry-after``.
    """

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be >= 1")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("RetryPolicy delays must be >= 0")


def backoff_delay(
    err: ModelError,
    attempt: int,
    policy: RetryPolicy,
    *,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait after failed ``attempt`` (1-based).

    A server-given ``retry_after`` wins (capped at ``max_delay``); otherwise exponential
    backoff with full jitter, so concurrent sessions hitting one limit spread out.
    """
    if err.retry_after is not None:
        return max(0.0, min(err.retry_after, policy.max_delay))
    ceiling = min(policy.max_delay, policy.base_delay * 2.0 ** (attempt - 1))
    return rand() * ceiling


async def call_with_retry(
    fn: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    on_retry: Callable[[ModelError, int, float], None] | None = None,
) -> T:
    """Await ``fn()``; retry retryable ModelErrors within ``policy``.

    Only ``rate_limit``, ``overloaded`` and ``transient`` are retried; any other kind,
    and the last failure once ``max_attempts`` is reached, is re-raised unchanged.
    ``on_retry(err, attempt, delay)`` runs before each wait.
    """
    attempt = 1
    while True:
        try:
            return await fn()
        except ModelError as err:
            if not err.retryable or attempt >= policy.max_attempts:
                raise
            delay = backoff_delay(err, attempt, policy)
            # Payloads are never logged: kind, status and timing are enough to diagnose.
            log.warning(
                "provider_retry",
                kind=err.kind,
                provider=err.provider,
                status=err.status_code,
                attempt=attempt,
                max_attempts=policy.max_attempts,
                delay=round(delay, 3),
            )
            if on_retry is not None:
                on_retry(err, attempt, delay)
            await sleep(delay)
            attempt += 1
