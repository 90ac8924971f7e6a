"""The bounded retry policy, against real adapters and a fake that counts requests."""

from __future__ import annotations

import pytest
import structlog
from prov_helpers import Harness, make_request

from geode.errors import ModelError
from geode.messages import Message, ModelResponse
from geode.providers.retry import RetryPolicy, backoff_delay, call_with_retry


class FakeSleep:
    """Records requested delays instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


async def run(harness: Harness, policy: RetryPolicy, sleep: FakeSleep) -> ModelResponse:
    return await call_with_retry(
        lambda: harness.provider.complete(make_request()), policy=policy, sleep=sleep
    )


async def test_429_retry_honours_retry_after(harness: Harness) -> None:
    harness.server.enqueue_error(429, headers={"retry-after": "3"})
    harness.server.enqueue_error(429, headers={"retry-after-ms": "1200"})
    harness.server.enqueue_text("finally")
    sleep = FakeSleep()

    response = await run(harness, RetryPolicy(max_attempts=4), sleep)

    assert response.message.text == "finally"
    assert sleep.delays == [3.0, 1.2]
    assert len(harness.server.generate_requests) == 3


async def test_retry_after_is_capped_by_max_delay(harness: Harness) -> None:
    harness.server.enqueue_error(429, headers={"retry-after": "3600"})
    harness.server.enqueue_text("ok")
    sleep = FakeSleep()

    await run(harness, RetryPolicy(max_delay=5.0), sleep)

    assert sleep.delays == [5.0]


async def test_retries_stop_at_the_bound_and_reraise_the_last_error(harness: Harness) -> None:
    for status in (500, 503, 529, 502, 500):
        harness.server.enqueue_error(status)
    sleep = FakeSleep()

    with pytest.raises(ModelError) as info:
        await run(harness, RetryPolicy(max_attempts=4, base_delay=0.5, max_delay=30), sleep)

    assert len(harness.server.generate_requests) == 4
    assert harness.server.pending == 1
    assert (info.value.kind, info.value.status_code) == ("transient", 502)
    assert len(sleep.delays) == 3
    # full jitter: each wait lies within its exponential ceiling 0.5, 1, 2
    assert all(0 <= d <= c for d, c in zip(sleep.delays, (0.5, 1.0, 2.0), strict=True))


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (401, "bad key", "auth"),
        (400, "bad field", "bad_request"),
        (400, "prompt is too long: 300000 tokens > 200000 maximum", "context_overflow"),
        (409, "conflict", "fatal"),
    ],
)
async def test_non_retryable_kinds_fail_fast(
    harness: Harness, status: int, message: str, kind: str
) -> None:
    harness.server.enqueue_error(status, message=message)
    harness.server.enqueue_text("must not be requested")
    sleep = FakeSleep()

    with pytest.raises(ModelError) as info:
        await run(harness, RetryPolicy(max_attempts=4), sleep)

    assert info.value.kind == kind
    assert len(harness.server.generate_requests) == 1
    assert sleep.delays == []


async def test_dropped_connection_is_retried(harness: Harness) -> None:
    harness.server.enqueue_drop()
    harness.server.enqueue_malformed()
    harness.server.enqueue_text("recovered")
    sleep = FakeSleep()

    response = await run(harness, RetryPolicy(), sleep)

    assert response.message.text == "recovered"
    assert len(harness.server.generate_requests) == 3


async def test_on_retry_and_log_carry_kind_attempt_delay_but_no_payload(
    harness: Harness,
) -> None:
    harness.server.enqueue_error(429, headers={"retry-after": "2"})
    harness.server.enqueue_text("ok")
    seen: list[tuple[str, int, float]] = []
    secret_prompt = "my-private-prompt-text"

    with structlog.testing.capture_logs() as logs:
        await call_with_retry(
            lambda: harness.provider.complete(make_request(Message.user(secret_prompt))),
            policy=RetryPolicy(),
            sleep=FakeSleep(),
            on_retry=lambda err, attempt, delay: seen.append((err.kind, attempt, delay)),
        )

    assert seen == [("rate_limit", 1, 2.0)]
    retries = [e for e in logs if e["event"] == "provider_retry"]
    assert len(retries) == 1
    assert (retries[0]["kind"], retries[0]["attempt"], retries[0]["delay"]) == (
        "rate_limit",
        1,
        2.0,
    )
    assert secret_prompt not in repr(logs)


def test_backoff_is_exponential_capped_and_jittered() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0)
    err = ModelError("x", kind="transient")
    top = [backoff_delay(err, n, policy, rand=lambda: 1.0) for n in range(1, 6)]
    assert top == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff_delay(err, 3, policy, rand=lambda: 0.25) == 0.5
    assert backoff_delay(err, 1, policy, rand=lambda: 0.0) == 0.0


async def test_single_attempt_policy_never_retries() -> None:
    calls = 0

    async def fn() -> str:
        nonlocal calls
        calls += 1
        raise ModelError("busy", kind="overloaded")

    with pytest.raises(ModelError):
        await call_with_retry(fn, policy=RetryPolicy(max_attempts=1), sleep=FakeSleep())
    assert calls == 1


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="delays"):
        RetryPolicy(base_delay=-1)
