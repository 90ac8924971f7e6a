"""ClientCache: one SDK client per endpoint and credential, shared by adapters, closed once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from prov_helpers import make_request

from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.providers import build_provider, resolve_model
from geode.providers._clients import ClientCache
from geode.settings import load_settings
from geode.testing.fake_anthropic import FakeAnthropicServer
from geode.testing.fake_openai import FakeOpenAIServer


async def test_same_endpoint_and_key_share_one_client() -> None:
    cache = ClientCache()
    a = cache.openai(api_key="k1", base_url="http://127.0.0.1:1/v1", timeout=30.0)
    b = cache.openai(api_key="k1", base_url="http://127.0.0.1:1/v1", timeout=30.0)
    other_url = cache.openai(api_key="k1", base_url="http://127.0.0.1:2/v1", timeout=30.0)
    anth = cache.anthropic(api_key="k1", base_url="http://127.0.0.1:1", timeout=30.0)
    assert a is b
    assert other_url is not a and anth is not a
    assert len(cache) == 3
    await cache.aclose()
    assert a.is_closed() and other_url.is_closed() and anth.is_closed()


async def test_changed_key_gets_a_new_client_and_the_old_one_is_closed_at_shutdown() -> None:
    cache = ClientCache()
    old = cache.openai(api_key="old-key", base_url="http://127.0.0.1:1/v1", timeout=30.0)
    new = cache.openai(api_key="new-key", base_url="http://127.0.0.1:1/v1", timeout=30.0)
    assert new is not old
    assert new.api_key == "new-key"
    assert not old.is_closed()  # a request still running on it may finish
    assert len(cache) == 1
    await cache.aclose()
    assert old.is_closed() and new.is_closed()


async def test_adapters_from_the_cache_reuse_one_connection() -> None:
    async with FakeOpenAIServer() as srv, FakeAnthropicServer() as anth:
        cache = ClientCache()
        for _ in range(3):
            srv.enqueue_text("ok")
            anth.enqueue_text("ok")
            oai = build_provider(resolve_model("openai:fake-model"), api_key="k",
                                 base_url=srv.base_url, clients=cache)
            cla = build_provider(resolve_model("anthropic:claude-x"), api_key="k",
                                 base_url=anth.base_url, clients=cache)
            await oai.complete(make_request())
            await cla.complete(make_request())
            await oai.aclose()  # a shared client outlives its adapter
            await cla.aclose()
        await cache.aclose()
    assert len(srv.generate_requests) == 3 and len(srv.connections) == 1
    assert len(anth.generate_requests) == 3 and len(anth.connections) == 1


async def test_runtime_sessions_share_the_client_and_aclose_closes_it(tmp_path: Path) -> None:
    async with FakeOpenAIServer(default_text="hello") as srv:
        settings, secrets = load_settings(
            cwd=tmp_path,
            env={"GEODE_HOME": str(tmp_path / "home"), "OPENAI_BASE_URL": srv.base_url,
                 "GEODE_MODEL": "openai:fake-model"},
        )
        runtime = await Runtime.create(settings=settings, secrets=secrets, use_store=False)
        ctx = SessionContext(mode="HEADLESS", workspace=tmp_path)
        clients = []
        for _ in range(3):
            session = await runtime.open_session(ctx)
            assert (await session.run("hi")).text == "hello"
            clients.append(session.loop.deps.provider._client)  # type: ignore[attr-defined]
        await runtime.aclose()
    assert clients[0] is clients[1] is clients[2]
    assert clients[0].is_closed()
    assert len(srv.connections) == 1


@pytest.mark.parametrize(("adapter", "other"), [("openai_compat", "anthropic"),
                                                ("anthropic", "openai")])
def test_an_adapter_does_not_import_the_other_vendors_sdk(adapter: str, other: str) -> None:
    # a daemon on one vendor must not pay for the other SDK (anthropic's is ~70 MB of RSS)
    code = f"import sys, geode.providers.{adapter}; print({other!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "False", out.stderr


async def test_runtime_reuses_the_adapter_until_the_key_changes(tmp_path: Path) -> None:
    async with FakeOpenAIServer(default_text="hello") as srv:
        env = {"GEODE_HOME": str(tmp_path / "home"), "OPENAI_BASE_URL": srv.base_url,
               "GEODE_MODEL": "openai:fake-model", "OPENAI_API_KEY": "old-key"}
        settings, secrets = load_settings(cwd=tmp_path, env=env)
        runtime = await Runtime.create(settings=settings, secrets=secrets, use_store=False)
        ref = runtime.resolve("openai:fake-model")
        first = runtime.provider_for(ref)
        assert runtime.provider_for(ref) is first
        # the operator rotates the key (.env re-read): a new adapter on a new client
        runtime.secrets = load_settings(cwd=tmp_path, env={**env, "OPENAI_API_KEY": "new-key"})[1]
        rotated = runtime.provider_for(ref)
        assert rotated is not first
        assert rotated._client is not first._client  # type: ignore[attr-defined]
        assert rotated._client.api_key == "new-key"  # type: ignore[attr-defined]
        ctx = SessionContext(mode="HEADLESS", workspace=tmp_path)
        session = await runtime.open_session(ctx)
        assert session.loop.deps.provider is rotated
        await runtime.aclose()
    assert first._client.is_closed() and rotated._client.is_closed()  # type: ignore[attr-defined]
