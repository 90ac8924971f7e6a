"""Model adapters and verify judges, built from the settings and the secrets.

A process builds one SDK client per model endpoint (shared by every session, closed with the
runtime) and one adapter per model, endpoint and credential on it. Which provider a model id
names, and which credential and endpoint it needs, is the catalog's
(:mod:`geode.providers.catalog`); how an adapter is made, :mod:`geode.providers.factory`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from geode.errors import ConfigError
from geode.providers._clients import ClientCache
from geode.providers.base import BaseProvider
from geode.providers.catalog import (
    PROVIDERS,
    ModelRef,
    resolve_generation_model,
    role_model,
    select_path,
)
from geode.providers.factory import build_provider, check_provider
from geode.providers.retry import RetryPolicy

if TYPE_CHECKING:
    from geode.providers.codex_auth import CodexLogin
    from geode.providers.judge import Judge
    from geode.settings import Secrets, Settings

__all__ = ["ProviderBuilder", "scripted_ref"]

#: adapters kept per process; keys rotated many times drop the oldest
_MAX_ADAPTERS = 64


def scripted_ref(model: str) -> ModelRef:
    """What a session on an explicit adapter (a scripted model: tests, ``--demo``) runs on."""
    return ModelRef(provider="scripted", model=model, context_window=200_000, max_output=8192,
                    default=False)


class ProviderBuilder:
    """Builds a session's model adapter and verify judge; one per process.

    ``secrets`` may be replaced while the process runs: a changed key or URL builds a new
    adapter (the old one stays with the sessions that have it).
    """

    def __init__(self, *, settings: Settings, secrets: Secrets) -> None:
        self.settings = settings
        self.secrets = secrets
        #: one SDK client per model endpoint, shared by every session
        self.clients = ClientCache()
        self._adapters: dict[tuple[Any, ...], BaseProvider] = {}
        self._codex_login: CodexLogin | None = None

    async def aclose(self) -> None:
        self._adapters.clear()
        await self.clients.aclose()
        if self._codex_login is not None:
            await self._codex_login.aclose()

    def resolve(self, model_id: str | None) -> ModelRef:
        """A generation model (judge-only ids are refused); None: the default model."""
        return resolve_generation_model(model_id or self.settings.model.default)

    def session_model(self, *, model_id: str | None, path: str | None,
                      given: BaseProvider | None) -> tuple[ModelRef, BaseProvider]:
        """The model a session runs on and its adapter: ``given`` (a scripted model, no
        credentials) or the one ``model_id`` names on its access path."""
        if given is not None:
            return scripted_ref(model_id or "scripted"), given
        ref = self.resolve(model_id)
        return ref, self.provider_for(ref, path)

    def path_for(self, ref: ModelRef, path: str | None = None) -> str:
        """The access path: explicit, else ``[model.paths]``, else ``[model] path``, else
        api. A path the catalog does not allow for the model is a ConfigError, no fallback."""
        chosen = path or self.settings.model.paths.get(ref.id) or self.settings.model.path
        return select_path(ref, chosen)

    def provider_for(self, ref: ModelRef, path: str | None = None) -> BaseProvider:
        if ref.provider not in PROVIDERS:
            raise ConfigError(f"Unknown provider {ref.provider!r} for model {ref.model!r}.")
        timeout = self.settings.model.request_timeout_s
        if self.path_for(ref, path) == "codex_subscription":
            return build_provider(ref, api_key=None, base_url=self.settings.codex.base_url,
                                  timeout=timeout, clients=self.clients,
                                  path="codex_subscription", codex_login=self._codex())
        api_key, base_url = self._endpoint(ref.provider)
        # One adapter per model, endpoint and credential, like the clients they use: an
        # adapter holds no state of a session's, and building one per turn read the
        # client's headers and URL again each time. A changed key or URL builds a new one.
        key = (ref, api_key, base_url, timeout)
        adapter = self._adapters.get(key)
        if adapter is None:
            adapter = build_provider(ref, api_key=api_key, base_url=base_url,
                                     timeout=timeout, clients=self.clients)
            if len(self._adapters) >= _MAX_ADAPTERS:
                self._adapters.pop(next(iter(self._adapters)))
            self._adapters[key] = adapter
        return adapter

    def check_provider(self, ref: ModelRef, path: str | None = None) -> None:
        """The ConfigError :meth:`provider_for` would raise (credential, endpoint, path), with
        no adapter built: no SDK imported, no client (``geode serve``'s start-up check)."""
        if ref.provider not in PROVIDERS:
            raise ConfigError(f"Unknown provider {ref.provider!r} for model {ref.model!r}.")
        if self.path_for(ref, path) == "codex_subscription":
            check_provider(ref, api_key=None, base_url=self.settings.codex.base_url,
                           path="codex_subscription", codex_login=self._codex())
            return
        api_key, base_url = self._endpoint(ref.provider)
        check_provider(ref, api_key=api_key, base_url=base_url)

    def judge_for(self, ref: ModelRef) -> Judge | None:
        """The verify judge ``[verify] judge`` selects for a session on ``ref``, or None.

        ``llm``: the auxiliary-role model next to ``ref``'s provider (``[model.roles]``
        overrides; a scripted session uses the default model's provider). ``jev``: the
        judge-only TypeSafe/Jev adapter on ``[verify] jev_route``.

        Raises:
            ConfigError: the judge's credential is missing (the message names it).
        """
        verify = self.settings.verify
        if verify.judge == "none":
            return None
        # here, not above: the judges' module loads httpx, which a session without one skips
        from geode.providers.judge import JEV_MODELS, JevJudge, LLMJudge

        retry = RetryPolicy(max_attempts=self.settings.model.max_retries)
        if verify.judge == "jev":
            info = PROVIDERS[verify.jev_route]
            api_key, base_url = self._endpoint(info.name)
            if not api_key:
                override = self.settings.providers.get(info.name)
                env = (override.api_key_env if override else None) or info.key_env
                raise ConfigError(
                    f'[verify] judge = "jev" via {verify.jev_route} ({JEV_MODELS[info.name]}) '
                    f"needs {env}: set it in the environment or in $GEODE_HOME/.env."
                )
            return JevJudge(route=verify.jev_route, api_key=api_key,
                            base_url=base_url or info.default_base_url or "",
                            timeout=verify.timeout_s, retry=retry)
        main = ref.provider if ref.provider != "scripted" else self.resolve(None).provider
        aux = role_model("auxiliary", main, self.settings.model.roles)
        return LLMJudge(provider=self.provider_for(aux), model=aux.model, retry=retry)

    def _codex(self) -> CodexLogin:
        """The Codex CLI login, one per process: its token refreshes are serialised on it."""
        from geode.providers.codex_auth import CodexLogin, codex_auth_file

        if self._codex_login is None:
            codex = self.settings.codex
            self._codex_login = CodexLogin(auth_file=codex_auth_file(codex.home),
                                           token_url=codex.token_url)
        return self._codex_login

    def _endpoint(self, provider: str) -> tuple[str | None, str | None]:
        """The provider's key and base URL override (config, then the SDK's variables)."""
        info = PROVIDERS[provider]
        override = self.settings.providers.get(provider)
        key_env = (override.api_key_env if override else None) or info.key_env
        base_url = (override.base_url if override else None) or (
            self.secrets.get(info.base_url_env) if info.base_url_env else None
        )
        return (self.secrets.get(key_env) if key_env else None), base_url
