"""The Codex-subscription path's credentials: the official Codex CLI login.

``codex login`` leaves ``$CODEX_HOME/auth.json`` (default ``~/.codex/auth.json``)::

    {"OPENAI_API_KEY": null,
     "tokens": {"id_token": "<JWT>", "access_token": "<JWT>", "refresh_token": "...",
                "account_id": "..."},
     "last_refresh": "2026-01-01T00:00:00Z"}

GEODE reads it, sends the access token and the ChatGPT account id with each request, and
refreshes the tokens through the OAuth token endpoint when the access token has expired
(its JWT ``exp``, with a margin) or the backend answers 401. Refresh tokens are single-use
and rotate, so the new pair is written back at once: atomically (a temporary file in the
same directory, then a rename) and with the file's own mode. Concurrent refreshes in one
process are serialised per file, and a token another holder refreshed meanwhile is reused.

Tokens are registered with the redactor and never logged.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from geode.errors import ConfigError, ModelError, ModelErrorKind
from geode.secret_redaction import register_secret

if TYPE_CHECKING:
    import httpx

__all__ = [
    "CODEX_CLIENT_ID",
    "LOGIN_COMMAND",
    "CodexLogin",
    "LoginStatus",
    "UsageLimitError",
    "codex_auth_file",
    "map_codex_error",
]

log = structlog.get_logger(__name__)

#: the official Codex CLI's public OAuth client id (its refresh requests use it)
CODEX_CLIENT_ID = "app_EMoamEEZ73f0CkXaXp7hrann"
LOGIN_COMMAND = "codex login"
#: refresh this many seconds before the access token's ``exp``
REFRESH_MARGIN_S = 300.0
_PROVIDER = "codex"
#: refresh locks per (login file, event loop): an asyncio.Lock belongs to one loop
_LOCKS: dict[tuple[str, int], asyncio.Lock] = {}


def codex_auth_file(home: Path | None) -> Path:
    """``home``/auth.json (the settings resolve ``$CODEX_HOME``), else ``~/.codex/auth.json``."""
    return (home or Path.home() / ".codex").expanduser() / "auth.json"


def _login_hint(path: Path) -> str:
    return f"Run `{LOGIN_COMMAND}` (the official Codex CLI) to sign in; GEODE reads {path}."


def jwt_claims(token: str) -> dict[str, Any]:
    """The unverified payload of a JWT ({} if it is not one): only ``exp`` and ids are read."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        data = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class _Tokens:
    access_token: str
    refresh_token: str
    account_id: str
    expires_at: float | None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at - REFRESH_MARGIN_S <= now


@dataclass(frozen=True)
class LoginStatus:
    """What ``geode doctor`` reports: is there a login, and is it usable."""

    path: Path
    present: bool
    valid: bool
    detail: str


def _parse(raw: dict[str, Any], path: Path) -> _Tokens:
    tokens = raw.get("tokens")
    if not isinstance(tokens, dict):
        raise ConfigError(f"{path} holds no Codex login tokens. {_login_hint(path)}")
    access = tokens.get("access_token")
    refresh = tokens.get("refresh_token")
    if not isinstance(access, str) or not access or not isinstance(refresh, str) or not refresh:
        raise ConfigError(f"{path} lacks an access or refresh token. {_login_hint(path)}")
    register_secret(access)
    register_secret(refresh)
    account = tokens.get("account_id")
    if not isinstance(account, str) or not account:
        claims = jwt_claims(str(tokens.get("id_token") or "")) or jwt_claims(access)
        auth = claims.get("https://api.openai.com/auth")
        account = str(auth.get("chatgpt_account_id") or "") if isinstance(auth, dict) else ""
    exp = jwt_claims(access).get("exp")
    return _Tokens(
        access_token=access,
        refresh_token=refresh,
        account_id=account,
        expires_at=float(exp) if isinstance(exp, int | float) else None,
    )


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"No Codex login found at {path}. {_login_hint(path)}") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"Cannot read the Codex login {path}: {exc}. {_login_hint(path)}"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a Codex login file. {_login_hint(path)}")
    return data


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` with ``data``: same directory, same mode, never a half-written file."""
    mode = path.stat().st_mode & 0o777
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class CodexLogin:
    """The Codex CLI login at ``auth_file``: current tokens, refreshed when needed.

    Args:
        auth_file: the login's ``auth.json``.
        token_url: the OAuth token endpoint (configurable for tests).
        timeout: seconds for a refresh request.
        clock: seconds since the epoch (tests pass a fixed clock).
    """

    def __init__(
        self,
        *,
        auth_file: Path,
        token_url: str,
        timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.auth_file = auth_file
        self.token_url = token_url
        self._timeout = timeout
        self._clock = clock
        self._http: httpx.AsyncClient | None = None

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    def status(self) -> LoginStatus:
        """Present and usable without a network call? (An expired access token with a refresh
        token is usable: it is refreshed on first use.)"""
        path = self.auth_file
        if not path.is_file():
            return LoginStatus(path, False, False, f"no Codex login at {path}")
        try:
            tokens = _parse(_read(path), path)
        except ConfigError as exc:
            return LoginStatus(path, True, False, str(exc))
        if not tokens.account_id:
            return LoginStatus(path, True, False, f"{path} names no ChatGPT account")
        if tokens.expires_at is None:
            return LoginStatus(path, True, True, "login present (token expiry unknown)")
        left = tokens.expires_at - self._clock()
        if left <= 0:
            return LoginStatus(path, True, True, "login present; access token expired, "
                                                 "it is refreshed on first use")
        return LoginStatus(path, True, True, f"login present; access token valid for "
                                             f"{int(left // 60)} min")

    async def request_headers(self, *, force_refresh: bool = False) -> dict[str, str]:
        """Authorization and account headers for one subscription request."""
        tokens = await self._current(force_refresh=force_refresh)
        headers = {"Authorization": f"Bearer {tokens.access_token}", "originator": "geode"}
        if tokens.account_id:
            headers["chatgpt-account-id"] = tokens.account_id
        return headers

    async def _current(self, *, force_refresh: bool) -> _Tokens:
        path = self.auth_file
        tokens = _parse(await asyncio.to_thread(_read, path), path)
        if not force_refresh and not tokens.expired(self._clock()):
            return tokens
        key = (str(path.resolve()), id(asyncio.get_running_loop()))
        lock = _LOCKS.setdefault(key, asyncio.Lock())
        async with lock:
            # Another session (or the Codex CLI) may have refreshed while we waited.
            raw = await asyncio.to_thread(_read, path)
            fresh = _parse(raw, path)
            if fresh.access_token != tokens.access_token and not fresh.expired(self._clock()):
                return fresh
            return await self._refresh(raw, fresh)

    async def _refresh(self, raw: dict[str, Any], tokens: _Tokens) -> _Tokens:
        import httpx  # here, not at import: every session names the login file (factory)

        path = self.auth_file
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self._timeout)
        try:
            response = await self._http.post(
                self.token_url,
                json={
                    "client_id": CODEX_CLIENT_ID,
                    "grant_type": "refresh_token",
                    "refresh_token": tokens.refresh_token,
                    "scope": "openid profile email",
                },
            )
        except httpx.HTTPError as exc:
            raise ModelError(
                f"codex: refreshing the login failed ({type(exc).__name__})",
                kind="transient",
                provider=_PROVIDER,
            ) from exc
        if response.status_code != 200:
            kind: ModelErrorKind = "transient" if response.status_code >= 500 else "auth"
            reason = ""
            with contextlib.suppress(ValueError):
                body = response.json()
                if isinstance(body, dict) and isinstance(body.get("error"), str):
                    reason = f" {body['error']}"
            raise ModelError(
                f"codex: the login could not be refreshed (HTTP {response.status_code}{reason}); "
                f"it expired or was revoked. {_login_hint(path)}",
                kind=kind,
                provider=_PROVIDER,
                status_code=response.status_code,
            )
        try:
            body = response.json()
            access = str(body["access_token"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelError(
                "codex: the token endpoint answered without an access token",
                kind="transient",
                provider=_PROVIDER,
            ) from exc
        stored = dict(raw.get("tokens") or {})
        stored["access_token"] = access
        for key in ("refresh_token", "id_token"):
            if isinstance(body.get(key), str) and body[key]:
                stored[key] = body[key]
        updated = {
            **raw,
            "tokens": stored,
            "last_refresh": datetime.fromtimestamp(self._clock(), UTC)
            .isoformat()
            .replace("+00:00", "Z"),
        }
        await asyncio.to_thread(_write_atomic, path, updated)
        log.info("codex login refreshed", file=str(path))
        return _parse(updated, path)


def _usage_limit(body: object) -> tuple[float | None, str]:
    """``retry_after`` seconds and a reset phrase from a subscription 429 body."""
    err = body.get("error", body) if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return None, ""
    seconds = err.get("resets_in_seconds")
    at = err.get("resets_at")
    if not isinstance(seconds, int | float) and isinstance(at, int | float):
        seconds = max(0.0, float(at) - time.time())
    if not isinstance(seconds, int | float):
        return None, ""
    if not isinstance(at, int | float):
        at = time.time() + float(seconds)
    when = datetime.fromtimestamp(float(at), UTC).strftime("%Y-%m-%d %H:%M UTC")
    return float(seconds), f"; resets at {when} (in {int(seconds)} s)"


#: a usage limit resetting later than this is not retried: waiting it out inside one call
#: only delays the error (the message says when the limit resets)
USAGE_LIMIT_RETRY_MAX_S = 60.0


class UsageLimitError(ModelError):
    """The subscription's usage limit, resetting too late to retry within the call."""

    @property
    def retryable(self) -> bool:
        return False


def map_codex_error(exc: BaseException) -> ModelError:
    """Classify a failure on the subscription endpoint; auth errors name the login command."""
    import openai

    from geode.providers._errors import map_openai_error

    if isinstance(exc, ModelError):
        return exc
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status in (401, 403):
            return ModelError(
                f"codex: the Codex subscription rejected the login (HTTP {status}). "
                f"Run `{LOGIN_COMMAND}` to sign in again.",
                kind="auth",
                provider=_PROVIDER,
                status_code=status,
            )
        if status == 429:
            retry_after, reset = _usage_limit(exc.body)
            err = exc.body.get("error", exc.body) if isinstance(exc.body, dict) else {}
            what = (
                "usage limit reached"
                if isinstance(err, dict) and err.get("type") == "usage_limit_reached"
                else "rate limited"
            )
            if retry_after is None:
                return map_openai_error(exc, provider=_PROVIDER)
            cls = UsageLimitError if retry_after > USAGE_LIMIT_RETRY_MAX_S else ModelError
            return cls(
                f"codex: subscription {what} (HTTP 429){reset}",
                kind="rate_limit",
                provider=_PROVIDER,
                status_code=429,
                retry_after=retry_after,
            )
    return map_openai_error(exc, provider=_PROVIDER)
