"""The Codex-subscription path against the fake backend and token endpoint, through the real
`openai` SDK: request shape, token refresh (expiry and 401), the login file written back
atomically with its mode, errors that name the login command, 429 with the reset time."""

from __future__ import annotations

import asyncio
import json
import stat
import time
from pathlib import Path

import pytest
from prov_helpers import READ_FILE, make_request

from geode.errors import ModelError
from geode.messages import Message, ReasoningBlock, ToolResultBlock
from geode.providers import build_provider, resolve_model
from geode.providers.codex_auth import CODEX_CLIENT_ID, CodexLogin, jwt_claims
from geode.providers.openai_responses import OpenAIResponsesProvider
from geode.testing.fake_openai_responses import FakeCodexServer, make_jwt


def _write_login(path: Path, data: dict[str, object], mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    path.chmod(mode)
    return path


def _provider(srv: FakeCodexServer, auth_file: Path) -> OpenAIResponsesProvider:
    login = CodexLogin(auth_file=auth_file, token_url=srv.token_url)
    provider = build_provider(
        resolve_model("gpt-6-sol"), api_key=None, base_url=srv.base_url, path="codex",
        codex_login=login,
    )
    assert isinstance(provider, OpenAIResponsesProvider)
    return provider


async def test_request_shape_and_answer(tmp_path: Path) -> None:
    async with FakeCodexServer() as srv:
        auth = _write_login(tmp_path / "auth.json", srv.login_file())
        provider = _provider(srv, auth)
        srv.enqueue_text("hello from the subscription", usage=(11, 4))
        try:
            response = await provider.complete(make_request(model="gpt-6-sol"))
        finally:
            await provider.aclose()
        sent = srv.generate_requests[0]
    assert response.message.text == "hello from the subscription"
    assert isinstance(response.message.content[0], ReasoningBlock)
    assert (response.usage.input_tokens, response.usage.output_tokens) == (11, 4)
    assert sent.path == "/backend-api/codex/responses"
    assert sent.headers["authorization"] == f"Bearer {srv.access_token}"
    assert sent.headers["chatgpt-account-id"] == "acct-fake"
    body = sent.body
    assert (body["stream"], body["store"], body["instructions"]) == (True, False,
                                                                      "You are terse.")
    assert "max_output_tokens" not in body
    assert body["include"] == ["reasoning.encrypted_content"]
    assert srv.refreshes == 0  # a valid token is used as is


async def test_tool_calls_stream_and_reasoning_carry_over(tmp_path: Path) -> None:
    async with FakeCodexServer() as srv:
        auth = _write_login(tmp_path / "auth.json", srv.login_file())
        provider = _provider(srv, auth)
        srv.enqueue_tool_calls([("read_file", {"path": "x"}, "call_9")])
        srv.enqueue_text("read it")
        try:
            events = [e async for e in provider.stream(make_request(tools=(READ_FILE,)))]
            first = events[-1].response
            assert first is not None and first.stop_reason == "tool_use"
            result = Message(role="user", content=[ToolResultBlock.text("call_9", "X")])
            await provider.complete(make_request(Message.user("go"), first.message, result))
        finally:
            await provider.aclose()
        second = srv.generate_requests[1].body
    reasoning = first.message.content[0]
    assert isinstance(reasoning, ReasoningBlock)
    assert second["input"][1]["encrypted_content"] == reasoning.data["encrypted_content"]


@pytest.mark.parametrize("mode", [0o600, 0o640])
async def test_expired_token_is_refreshed_and_written_back_atomically_with_its_mode(
    tmp_path: Path, mode: int
) -> None:
    async with FakeCodexServer() as srv:
        expired = make_jwt(exp=time.time() - 60)
        login = srv.login_file(access_token=expired)
        auth = _write_login(tmp_path / "auth.json", login, mode)
        old_refresh = srv.refresh_token
        provider = _provider(srv, auth)
        srv.enqueue_text("after refresh")
        try:
            response = await provider.complete(make_request())
        finally:
            await provider.aclose()
        token_requests = [r for r in srv.requests if r.path == "/oauth/token"]
        new_access, new_refresh = srv.access_token, srv.refresh_token
    assert response.message.text == "after refresh"
    assert len(token_requests) == 1
    assert token_requests[0].body == {
        "client_id": CODEX_CLIENT_ID,
        "grant_type": "refresh_token",
        "refresh_token": old_refresh,
        "scope": "openid profile email",
    }
    saved = json.loads(auth.read_text())
    assert saved["tokens"]["access_token"] == new_access
    assert saved["tokens"]["refresh_token"] == new_refresh != old_refresh  # rotated
    assert saved["tokens"]["account_id"] == "acct-fake"
    assert saved["OPENAI_API_KEY"] is None  # the rest of the file is kept
    assert saved["last_refresh"] != login["last_refresh"]
    assert stat.S_IMODE(auth.stat().st_mode) == mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["auth.json"]  # no temp file left
    assert jwt_claims(new_access)["exp"] > time.time()


async def test_401_refreshes_once_and_retries(tmp_path: Path) -> None:
    async with FakeCodexServer() as srv:
        auth = _write_login(tmp_path / "auth.json", srv.login_file())
        srv.revoke_access()  # the server forgot a token that has not expired
        provider = _provider(srv, auth)
        srv.enqueue_text("recovered")
        try:
            response = await provider.complete(make_request())
        finally:
            await provider.aclose()
        statuses = [r.path for r in srv.requests]
    assert response.message.text == "recovered"
    assert srv.refreshes == 1
    assert statuses == ["/backend-api/codex/responses", "/oauth/token",
                        "/backend-api/codex/responses"]


async def test_401_after_refresh_is_an_auth_error_naming_the_login_command(
    tmp_path: Path,
) -> None:
    async with FakeCodexServer() as srv:
        auth = _write_login(tmp_path / "auth.json", srv.login_file())
        srv.reject_all = True
        provider = _provider(srv, auth)
        with pytest.raises(ModelError) as info:
            await provider.complete(make_request())
        await provider.aclose()
    err = info.value
    assert (err.kind, err.status_code, err.retryable) == ("auth", 401, False)
    assert "Run `codex login`" in str(err)
    assert srv.access_token not in str(err)


async def test_dead_refresh_token_is_an_auth_error_naming_the_login_command(
    tmp_path: Path,
) -> None:
    async with FakeCodexServer() as srv:
        login = srv.login_file(access_token=make_jwt(exp=time.time() - 60))
        login["tokens"]["refresh_token"] = "rt-already-used"  # type: ignore[index]
        auth = _write_login(tmp_path / "auth.json", login)
        provider = _provider(srv, auth)
        with pytest.raises(ModelError) as info:
            await provider.complete(make_request())
        await provider.aclose()
        assert srv.generate_requests == []  # an expired token is never sent
    assert info.value.kind == "auth"
    assert "could not be refreshed (HTTP 400 invalid_grant)" in str(info.value)
    assert "Run `codex login`" in str(info.value)
    assert json.loads(auth.read_text()) == login  # a failed refresh writes nothing


async def test_usage_limit_429_carries_the_reset_time(tmp_path: Path) -> None:
    async with FakeCodexServer() as srv:
        auth = _write_login(tmp_path / "auth.json", srv.login_file())
        provider = _provider(srv, auth)
        srv.enqueue_usage_limit(5400)
        with pytest.raises(ModelError) as info:
            await provider.complete(make_request())
        await provider.aclose()
    err = info.value
    assert (err.kind, err.status_code) == ("rate_limit", 429)
    assert err.retry_after is not None and 5390 <= err.retry_after <= 5400
    assert "usage limit reached" in str(err)
    assert "resets at" in str(err) and "(in 5400 s)" in str(err)
    assert not err.retryable  # waiting 90 minutes inside one call would only delay the error


async def test_a_usage_limit_that_resets_soon_is_retried(tmp_path: Path) -> None:
    from geode.providers.retry import RetryPolicy, call_with_retry

    async with FakeCodexServer() as srv:
        auth = _write_login(tmp_path / "auth.json", srv.login_file())
        provider = _provider(srv, auth)
        srv.enqueue_usage_limit(20)
        srv.enqueue_text("after the reset")
        waits: list[float] = []

        async def sleep(delay: float) -> None:
            waits.append(delay)

        response = await call_with_retry(
            lambda: provider.complete(make_request()),
            policy=RetryPolicy(max_attempts=2, max_delay=30.0),
            sleep=sleep,
        )
        await provider.aclose()
    assert response.message.text == "after the reset"
    assert len(waits) == 1 and 19 <= waits[0] <= 20


async def test_concurrent_calls_with_an_expired_token_refresh_once(tmp_path: Path) -> None:
    async with FakeCodexServer() as srv:
        auth = _write_login(
            tmp_path / "auth.json", srv.login_file(access_token=make_jwt(exp=time.time() - 1))
        )
        providers = [_provider(srv, auth) for _ in range(3)]
        for _ in providers:
            srv.enqueue_text("ok")
        try:
            answers = await asyncio.gather(*(p.complete(make_request()) for p in providers))
        finally:
            for p in providers:
                await p.aclose()
    assert [a.message.text for a in answers] == ["ok"] * 3
    assert srv.refreshes == 1  # single-use refresh tokens: a second refresh would fail


def test_login_status_for_doctor(tmp_path: Path) -> None:
    auth = tmp_path / "auth.json"
    login = CodexLogin(auth_file=auth, token_url="http://127.0.0.1:1/oauth/token")
    assert (login.status().present, login.status().valid) == (False, False)
    _write_login(auth, {"tokens": {"access_token": "x"}})
    assert (login.status().present, login.status().valid) == (True, False)
    good = {"tokens": {"access_token": make_jwt(exp=time.time() + 3600),
                       "refresh_token": "r", "account_id": "a"}}
    _write_login(auth, good)
    status = login.status()
    assert (status.present, status.valid) == (True, True)
    assert "valid for" in status.detail


async def test_runtime_runs_a_turn_on_the_codex_path_from_config(tmp_path: Path) -> None:
    from geode.daemon.runtime import Runtime
    from geode.daemon.session import SessionContext
    from geode.settings import load_settings

    async with FakeCodexServer() as srv:
        codex_home = tmp_path / "codex"
        _write_login(codex_home / "auth.json", srv.login_file())
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.toml").write_text(
            '[model]\ndefault = "gpt-6-sol"\n[model.paths]\n"gpt-6-sol" = "codex"\n'
            f'[codex]\nbase_url = "{srv.base_url}"\ntoken_url = "{srv.token_url}"\n'
        )
        settings, secrets = load_settings(
            cwd=tmp_path, env={"GEODE_HOME": str(home), "CODEX_HOME": str(codex_home)}
        )
        srv.enqueue_text("turn answered on the subscription")
        async with Runtime(settings=settings, secrets=secrets) as rt:
            session = await rt.open_session(SessionContext(mode="HEADLESS", workspace=tmp_path))
            result = await session.run("hello")
            await session.loop.deps.provider.aclose()
    assert result.termination == "natural"
    assert result.text == "turn answered on the subscription"
    assert srv.generate_requests[0].body["model"] == "gpt-6-sol"
