"""Every failure class, produced on the wire by the fakes and read through the real SDKs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import anthropic
import httpx2
import openai
import pytest
from prov_helpers import API_KEY, Harness, make_provider, make_request, make_server

from geode.errors import ModelError
from geode.providers._errors import (
    classify_status,
    map_anthropic_error,
    map_openai_error,
    parse_retry_after,
)
from geode.providers.openai_compat import OpenAICompatProvider
from geode.testing.fake_openai import FakeOpenAIServer

CONTEXT_MESSAGES = {
    "anthropic": "prompt is too long: 250000 tokens > 200000 maximum",
    "openai": "This model's maximum context length is 128000 tokens. However, your messages "
    "resulted in 200000 tokens.",
    "responses": "Your input exceeds the context window of this model. Please adjust your "
    "input and try again.",
}


async def fail(harness: Harness, *, stream: bool = False) -> ModelError:
    with pytest.raises(ModelError) as info:
        if stream:
            async for _ in harness.provider.stream(make_request()):
                pass
        else:
            await harness.provider.complete(make_request())
    assert info.value.__cause__ is not None  # raised `from` the SDK's exception
    return info.value


@pytest.mark.parametrize("stream", [False, True])
async def test_401_is_auth_and_names_the_env_var_not_the_key(
    harness: Harness, stream: bool
) -> None:
    harness.server.enqueue_error(401, message=f"invalid x-api-key {API_KEY}")

    err = await fail(harness, stream=stream)

    assert err.kind == "auth"
    assert err.status_code == 401
    assert not err.retryable
    env = "ANTHROPIC_API_KEY" if harness.vendor == "anthropic" else "OPENAI_API_KEY"
    assert f"Set {env}" in str(err)
    assert API_KEY not in str(err)
    assert "SECRET" not in repr(err)


async def test_403_is_auth(harness: Harness) -> None:
    harness.server.enqueue_error(403)
    assert (await fail(harness)).kind == "auth"


@pytest.mark.parametrize(
    ("provider", "env"), [("glm", "ZAI_API_KEY"), ("openrouter", "OPENROUTER_API_KEY")]
)
async def test_auth_message_names_the_compat_providers_variable(provider: str, env: str) -> None:
    async with FakeOpenAIServer() as srv:
        srv.enqueue_error(401)
        p = OpenAICompatProvider(provider_name=provider, api_key=API_KEY, base_url=srv.base_url)
        with pytest.raises(ModelError) as info:
            await p.complete(make_request())
        await p.aclose()
    assert info.value.kind == "auth"
    assert info.value.provider == provider
    assert f"Set {env}" in str(info.value)


@pytest.mark.parametrize("status", [400, 404, 422])
async def test_bad_request(harness: Harness, status: int) -> None:
    harness.server.enqueue_error(status, message="messages: field required")

    err = await fail(harness)

    assert (err.kind, err.status_code) == ("bad_request", status)
    assert "messages: field required" in str(err)
    assert not err.retryable


@pytest.mark.parametrize("stream", [False, True])
async def test_context_overflow(harness: Harness, stream: bool) -> None:
    harness.server.enqueue_error(400, message=CONTEXT_MESSAGES[harness.vendor])

    err = await fail(harness, stream=stream)

    assert (err.kind, err.status_code) == ("context_overflow", 400)
    assert not err.retryable


async def test_context_overflow_by_error_code_only(openai_harness: Harness) -> None:
    body = {
        "error": {
            "message": "Request rejected.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    openai_harness.server.enqueue_error(400, body=body)

    assert (await fail(openai_harness)).kind == "context_overflow"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # ms is the finer, preferred one
        ({}, None),
    ],
)
async def test_429_is_rate_limit_with_retry_after(
    harness: Harness, headers: dict[str, str], expected: float | None
) -> None:
    harness.server.enqueue_error(429, headers=headers)

    err = await fail(harness)

    assert (err.kind, err.status_code, err.retry_after) == ("rate_limit", 429, expected)
    assert err.retryable


async def test_429_retry_after_as_http_date(harness: Harness) -> None:
    when = datetime.now(UTC) + timedelta(seconds=120)
    harness.server.enqueue_error(429, headers={"retry-after": format_datetime(when, usegmt=True)})

    err = await fail(harness)

    assert err.retry_after is not None
    assert 100 < err.retry_after <= 120


@pytest.mark.parametrize("status", [529, 503])
async def test_overloaded(harness: Harness, status: int) -> None:
    harness.server.enqueue_error(status)

    err = await fail(harness)

    assert (err.kind, err.status_code) == ("overloaded", status)
    assert err.retryable


@pytest.mark.parametrize("status", [500, 502, 504])
async def test_server_errors_are_transient(harness: Harness, status: int) -> None:
    harness.server.enqueue_error(status)

    err = await fail(harness)

    assert (err.kind, err.status_code) == ("transient", status)
    assert err.retryable


async def test_unexpected_status_is_fatal(harness: Harness) -> None:
    harness.server.enqueue_error(409)

    err = await fail(harness)

    assert (err.kind, err.status_code) == ("fatal", 409)
    assert not err.retryable


@pytest.mark.parametrize("stream", [False, True])
async def test_dropped_connection_is_transient(harness: Harness, stream: bool) -> None:
    harness.server.enqueue_drop()

    err = await fail(harness, stream=stream)

    assert err.kind == "transient"
    assert "dropped" in str(err)


async def test_connection_dropped_mid_stream_is_transient(harness: Harness) -> None:
    harness.server.enqueue_drop(mid_stream=True)

    events = []
    with pytest.raises(ModelError) as info:
        async for event in harness.provider.stream(make_request()):
            events.append(event)

    assert info.value.kind == "transient"
    assert "done" not in [e.kind for e in events]  # a cut answer is never delivered as final


@pytest.mark.parametrize("stream", [False, True])
async def test_malformed_json_is_classified_not_a_crash(harness: Harness, stream: bool) -> None:
    harness.server.enqueue_malformed()

    err = await fail(harness, stream=stream)

    assert err.kind == "transient"
    assert "malformed" in str(err)


async def test_empty_script_answers_500_with_a_clear_message(harness: Harness) -> None:
    err = await fail(harness)

    assert (err.kind, err.status_code) == ("transient", 500)
    assert "script is empty" in str(err)


async def test_timeout_is_transient(harness: Harness) -> None:
    slow = make_provider(harness.vendor, harness.server, timeout=0.2, lean=harness.lean)
    harness.server.enqueue_text("too late", delay=5.0)
    try:
        with pytest.raises(ModelError) as info:
            await slow.complete(make_request())
    finally:
        await slow.aclose()
    assert info.value.kind == "transient"
    assert "timed out" in str(info.value)


async def test_unreachable_server_is_transient(harness: Harness) -> None:
    server = make_server(harness.vendor)
    await server.start()
    provider = make_provider(harness.vendor, server, lean=harness.lean)
    await server.stop()  # nothing listens on that port any more
    try:
        with pytest.raises(ModelError) as info:
            await provider.complete(make_request())
    finally:
        await provider.aclose()
    assert info.value.kind == "transient"


# --- the mapping functions on their own ----------------------------------------------------


def _response(status: int, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.Response(
        status, headers=headers, request=httpx2.Request("POST", "http://127.0.0.1/v1/messages")
    )


def test_anthropic_error_event_inside_a_200_stream_is_classified_by_type() -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    exc = anthropic.APIStatusError(str(body), response=_response(200), body=body)

    err = map_anthropic_error(exc)

    assert (err.kind, err.status_code) == ("overloaded", 529)


def test_openai_error_object_inside_a_stream_is_classified_by_code() -> None:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
    exc = openai.APIError(
        "Provider returned error", request, body={"message": "upstream", "code": 502}
    )

    err = map_openai_error(exc, provider="openrouter")

    assert (err.kind, err.status_code, err.provider) == ("transient", 502, "openrouter")


def test_unknown_exception_is_fatal_and_model_errors_pass_through() -> None:
    assert map_openai_error(RuntimeError("boom")).kind == "fatal"
    original = ModelError("x", kind="rate_limit")
    assert map_anthropic_error(original) is original


@pytest.mark.parametrize(
    ("status", "text", "kind"),
    [
        (401, "", "auth"),
        (403, "", "auth"),
        (400, "bad", "bad_request"),
        (400, "Prompt is too long", "context_overflow"),
        (400, "context_window_exceeded", "context_overflow"),
        (404, "context length", "bad_request"),  # only a 400/413 can be a context overflow
        (422, "", "bad_request"),
        (429, "", "rate_limit"),
        (529, "", "overloaded"),
        (503, "", "overloaded"),
        (500, "", "transient"),
        (502, "", "transient"),
        (504, "", "transient"),
        (418, "", "fatal"),
    ],
)
def test_classify_status(status: int, text: str, kind: str) -> None:
    assert classify_status(status, text) == kind


def test_parse_retry_after_forms() -> None:
    now = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    earlier = format_datetime(now - timedelta(seconds=30), usegmt=True)
    assert parse_retry_after({"Retry-After": "3"}, now=now) == 3.0
    assert parse_retry_after({"retry-after": "0.5"}, now=now) == 0.5
    assert parse_retry_after({"retry-after": later}, now=now) == 30.0
    assert parse_retry_after({"retry-after": earlier}, now=now) == 0.0
    assert parse_retry_after({"retry-after": "soon"}, now=now) is None
    assert parse_retry_after({"retry-after": "-4"}, now=now) is None
    assert parse_retry_after({"retry-after-ms": "nan", "retry-after": "2"}, now=now) == 2.0
    assert parse_retry_after(None) is None
