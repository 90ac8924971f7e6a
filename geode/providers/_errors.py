"""The one place where vendor SDK failures become :class:`geode.errors.ModelError`.

Classification (``ModelError.kind``):

====================  ==========================================================
auth                  401, 403 (the message names the env var to set)
bad_request           400, 404, 413, 422
context_overflow      400/413 whose message says the prompt exceeds the context
rate_limit            429, ``retry_after`` from ``retry-after-ms`` / ``retry-after``
overloaded            529, 503
transient             408, 500, 502, 504, connection errors, timeouts, dropped
                      connections, malformed JSON / undecodable responses
fatal                 anything else
====================  ==========================================================

Adapters call ``raise map_x_error(exc) from exc``; retry logic only ever sees ModelError.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from geode.errors import ModelError, ModelErrorKind
from geode.providers.catalog import PROVIDERS
from geode.secret_redaction import redact_text

__all__ = [
    "classify_status",
    "map_anthropic_error",
    "map_anthropic_status",
    "map_anthropic_stream_error",
    "map_openai_error",
    "map_openai_status",
    "map_openai_stream_error",
    "parse_retry_after",
]

_CONTEXT_MARKERS = (
    "context length",
    "context_length",
    "context window",
    "context_window_exceeded",
    "prompt is too long",
    "prompt too long",
    "maximum context",
    "too many tokens",
    "input is too long",
)
#: vendor messages are capped: they are for humans and must not flood logs
_MAX_DETAIL = 300


def _transport_errors() -> tuple[type[BaseException], ...]:
    # The SDKs moved from httpx to httpx2; both may leak raw transport errors from a
    # stream being iterated, so both are recognised when installed.
    errors: list[type[BaseException]] = [httpx.TransportError, httpx.DecodingError]
    try:
        import httpx2
    except ImportError:  # pragma: no cover - older SDKs ship on plain httpx
        pass
    else:
        errors += [httpx2.TransportError, httpx2.DecodingError]
    return tuple(errors)


_TRANSPORT_ERRORS = _transport_errors()


def parse_retry_after(
    headers: Mapping[str, str] | None, *, now: datetime | None = None
) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    raw_ms = lower.get("retry-after-ms")
    if raw_ms is not None:
        try:
            ms = float(raw_ms)
        except ValueError:
            ms = math.nan
        if math.isfinite(ms) and ms >= 0:
            return ms / 1000.0
    raw = lower.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:  # RFC 7231 dates are GMT
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def classify_status(status: int, text: str) -> ModelErrorKind:
    """The error kind of an HTTP status; ``text`` is the vendor's message (for 400/413)."""
    if status in (401, 403):
        return "auth"
    if status in (400, 413) and any(m in text.lower() for m in _CONTEXT_MARKERS):
        return "context_overflow"
    if status in (400, 404, 413, 422):
        return "bad_request"
    if status == 429:
        return "rate_limit"
    if status in (503, 529):
        return "overloaded"
    if status in (408, 500, 502, 504):
        return "transient"
    return "fatal"


def _detail(body: object, fallback: str) -> str:
    """The vendor's human message from an error body, else ``fallback``: masked before it
    is cut (a cut inside a secret no shape matches would keep its first characters)."""
    text = fallback
    if isinstance(body, dict):
        err: Any = body.get("error", body)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            text = str(err["message"])
        elif isinstance(err, str):
            text = err
    return redact_text(text)[:_MAX_DETAIL]


def _status_error(
    *, provider: str, status: int, body: object, message: str, headers: Mapping[str, str]
) -> ModelError:
    detail = _detail(body, message)
    # The code/type fields (e.g. "context_length_exceeded") are searched too: some
    # endpoints put the reason there and a generic sentence in the message.
    kind = classify_status(status, f"{message} {json.dumps(body, default=str)}")
    if kind == "auth":
        info = PROVIDERS.get(provider)
        env = info.key_env if info and info.key_env else "the provider's API key variable"
        # The vendor's text is left out on purpose: some echo a fragment of the key.
        text = (
            f"{provider} rejected the API key (HTTP {status}). Set {env} to a valid key "
            "with access to this model (in the environment or $GEODE_HOME/.env)."
        )
        return ModelError(text, kind=kind, provider=provider, status_code=status)
    retry_after = parse_retry_after(headers) if kind in ("rate_limit", "overloaded") else None
    text = f"{provider} HTTP {status} ({kind}): {detail}"
    return ModelError(
        text, kind=kind, provider=provider, status_code=status, retry_after=retry_after
    )


def _non_status_error(exc: BaseException, provider: str, sdk_errors: Any) -> ModelError:
    if isinstance(exc, ModelError):
        return exc
    if isinstance(exc, sdk_errors.APITimeoutError):
        return ModelError(f"{provider}: request timed out", kind="transient", provider=provider)
    if isinstance(exc, sdk_errors.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        why = f" ({type(cause).__name__}: {cause})" if cause else ""
        return ModelError(
            f"{provider}: connection failed or dropped{why}"[:_MAX_DETAIL],
            kind="transient",
            provider=provider,
        )
    if isinstance(exc, sdk_errors.APIResponseValidationError) or isinstance(
        exc, (json.JSONDecodeError, UnicodeDecodeError, *_TRANSPORT_ERRORS)
    ):
        return ModelError(
            f"{provider}: malformed or interrupted response ({type(exc).__name__}: {exc})"[
                :_MAX_DETAIL
            ],
            kind="transient",
            provider=provider,
        )
    return ModelError(
        f"{provider}: unexpected failure ({type(exc).__name__}: {exc})"[:_MAX_DETAIL],
        kind="fatal",
        provider=provider,
    )


def map_anthropic_error(exc: BaseException, *, provider: str = "anthropic") -> ModelError:
    """Classify an exception raised by the ``anthropic`` SDK (or its transport)."""
    # Each SDK is imported by its adapter only: a daemon on one vendor never loads the other
    # (the anthropic SDK alone is ~70 MB of RSS); here the module is already loaded.
    import anthropic

    if isinstance(exc, anthropic.APIStatusError):
        return _status_error(
            provider=provider,
            status=_effective_status(exc.status_code, exc.body),
            body=exc.body,
            message=exc.message,
            headers=exc.response.headers,
        )
    return _non_status_error(exc, provider, anthropic)


def map_anthropic_status(
    *, status: int, raw: bytes, headers: Mapping[str, str], provider: str = "anthropic"
) -> ModelError:
    """Classify a non-2xx answer of the Messages API read without the SDK (the adapter's
    lean stream), as :func:`map_anthropic_error` classifies the SDK's exception for it: the
    same body (the whole JSON, ``{"type": "error", "error": {...}}``) and message."""
    text = raw.decode("utf-8", errors="replace").strip()
    body: object = text
    try:
        body = json.loads(text)
    except ValueError:
        message = text or f"Error code: {status}"
    else:
        message = f"Error code: {status} - {body}"
    return _status_error(provider=provider, status=_effective_status(status, body), body=body,
                         message=message, headers=headers)


def map_anthropic_stream_error(
    data: str, *, headers: Mapping[str, str] | None = None, provider: str = "anthropic"
) -> ModelError:
    """Classify an ``error`` event inside a 200 Messages stream read without the SDK, as
    :func:`map_anthropic_error` classifies the status error the SDK raises for it: the
    error's ``type`` stands for the status (``overloaded_error``: 529, overloaded)."""
    body: object = data
    try:
        body = json.loads(data)
    except ValueError:
        message = data or "Error code: 200"
    else:
        message = f"{body}"
    return _status_error(provider=provider, status=_effective_status(200, body), body=body,
                         message=message, headers=headers or {})


def map_openai_error(exc: BaseException, *, provider: str = "openai") -> ModelError:
    """Classify an exception raised by the ``openai`` SDK (any OpenAI-compatible endpoint)."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return _status_error(
            provider=provider,
            status=_effective_status(exc.status_code, exc.body),
            body=exc.body,
            message=exc.message,
            headers=exc.response.headers,
        )
    if isinstance(exc, openai.APIError) and not isinstance(
        exc, (openai.APIConnectionError, openai.APIResponseValidationError)
    ):
        # An error object inside a 200 stream (the SDK raises a bare APIError for it).
        return _status_error(
            provider=provider,
            status=_effective_status(200, {"error": exc.body}),
            body=exc.body,
            message=exc.message,
            headers={},
        )
    return _non_status_error(exc, provider, openai)


def map_openai_stream_error(error: object, *, provider: str = "openai") -> ModelError:
    """Classify an error object inside a 200 Chat Completions stream read without the SDK
    (the adapter's lean path), as :func:`map_openai_error` classifies the ``APIError`` the
    SDK raises for it: its message, and its code or type standing for the status."""
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str) or not message:
        message = "An error occurred during streaming"
    return _status_error(provider=provider, status=_effective_status(200, {"error": error}),
                         body=error, message=message, headers={})


def map_openai_status(
    *, status: int, raw: bytes, headers: Mapping[str, str], provider: str = "openai"
) -> ModelError:
    """Classify a non-2xx answer of a Chat Completions endpoint read without the SDK (the
    adapter's lean path), as :func:`map_openai_error` classifies the SDK's exception for it:
    the same body (the ``error`` object) and message."""
    text = raw.decode("utf-8", errors="replace").strip()
    message = f"Error code: {status}"
    body: object = text
    try:
        body = json.loads(text)
    except ValueError:
        pass
    else:
        error = body.get("error", body) if isinstance(body, dict) else None
        detail = error.get("message") if isinstance(error, dict) else None
        if isinstance(detail, str) and detail:
            message += f" - {detail}"
    data = body.get("error", body) if isinstance(body, dict) else body
    return _status_error(provider=provider, status=_effective_status(status, data), body=data,
                         message=message, headers=headers)


#: error ``type``/``code`` values of both vendors, for errors that arrive inside a 200 stream
_ERROR_TYPE_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "api_error": 500,
    "server_error": 500,
    "overloaded_error": 529,
    "context_length_exceeded": 400,
}


def _effective_status(status: int, body: object) -> int:
    """The HTTP status, or for an error event inside a 200 stream the status it stands for."""
    if status >= 400:
        return status
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return 500  # an error with no usable description: treat like a server error
    code = err.get("code")
    if isinstance(code, int) and 400 <= code < 600:  # OpenRouter puts the HTTP status here
        return code
    if isinstance(code, str) and code.isdigit() and 400 <= int(code) < 600:
        return int(code)
    for key in ("type", "code"):
        mapped = _ERROR_TYPE_STATUS.get(str(err.get(key)))
        if mapped is not None:
            return mapped
    return 500
