"""The process's composition root: :class:`Runtime` holds what a process shares across
sessions (settings, secrets, store, resource locks, hooks, observers, MCP manager) as one
builder per concern (:mod:`geode.daemon.builders`), and opens sessions from them
(:meth:`Runtime.open_session`, :mod:`geode.daemon.session`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from geode.daemon.builders import (
    Budgets,
    ProviderBuilder,
    Records,
    ToolsBuilder,
    build_observers,
    operator_hooks,
)
from geode.daemon.session import Session, SessionContext, SessionParts, open_session

if TYPE_CHECKING:
    from geode.daemon.port_values import SessionStatus, TurnOutcome
    from geode.hooks import HookRegistry, HookSystem
    from geode.mcp.manager import MCPServerManager
    from geode.providers.base import BaseProvider
    from geode.providers.catalog import ModelRef
    from geode.providers.judge import Judge
    from geode.settings import Secrets, Settings, SpendCaps
    from geode.store import Store
    from geode.tools.base import ToolDef

__all__ = ["Runtime"]

log = structlog.get_logger(__name__)


class Runtime:
    """Process-wide shared parts, opened once per process
    (``async with await Runtime.create(...)``)."""

    def __init__(
        self,
        *,
        settings: Settings,
        secrets: Secrets,
        store: Store | None = None,
        hooks: HookRegistry | None = None,
        observers: HookSystem | None = None,
        mcp: MCPServerManager | None = None,
        tools: Sequence[ToolDef] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """``hooks``: None loads the operator's (entry points, ``[hooks]``); ``tools``: None
        registers the built-ins; ``clock``: wall-clock seconds for the spend caps' days
        (tests move it)."""
        self.settings = settings
        self.store = store
        self.mcp = mcp
        self.clock = clock or time.time
        self.hooks = hooks if hooks is not None else operator_hooks(settings)
        self.observers, self.ledger = build_observers(settings, observers=observers,
                                                      ledger=store is not None)
        if tools is None:
            from geode.tools.builtin import builtin_tools

            tools = builtin_tools()
        self.providers = ProviderBuilder(settings=settings, secrets=secrets)
        from geode.search import search_client

        self.tools = ToolsBuilder(settings=settings, tools=tools, hooks=self.hooks,
                                  observers=self.observers, mcp=mcp,
                                  search=search_client(settings.search, secrets))
        self.records = Records(store=store, rewind_home=settings.home / "rewind")
        self.budgets = Budgets(settings=settings, clock=self.clock, store=store,
                               observers=self.observers)
        self._parts = SessionParts(
            home=settings.home, providers=self.providers, tools=self.tools,
            records=self.records, budgets=self.budgets, hooks=self.hooks,
            observers=self.observers, max_retries=settings.model.max_retries)

    @classmethod
    async def create(
        cls, *, settings: Settings, secrets: Secrets, use_store: bool = True, **kw: Any
    ) -> Runtime:
        """A runtime on the configured store (created and migrated), its retention applied."""
        store = None
        if use_store:
            from geode.store import open_store

            settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
            store = await open_store(settings.store_url)
        runtime = cls(settings=settings, secrets=secrets, store=store, **kw)
        await runtime.prune()
        return runtime

    @property
    def secrets(self) -> Secrets:
        return self.providers.secrets

    @secrets.setter
    def secrets(self, value: Secrets) -> None:
        """New secrets (rotated keys): the next adapter built uses them."""
        self.providers.secrets = value

    async def prune(self) -> None:
        """Apply the retention settings to the timeline and the ledger (observation only)."""
        if self.store is None:
            return
        retention = self.settings.store
        try:
            await self.store.timeline.prune(retention.timeline_retention_days)
            # kept tool results (read_result) live as long as the timeline that names them
            await self.store.results.prune(retention.timeline_retention_days)
            if self.ledger is not None:
                await self.ledger.prune(retention.ledger_retention_days)
        except Exception:
            log.warning("retention prune failed", exc_info=True)

    async def aclose(self) -> None:
        await self.observers.drain()  # let ledger rows land before the process ends
        if self.mcp is not None:
            await self.mcp.aclose()
        await self.providers.aclose()
        if self.store is not None:
            await self.store.aclose()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def open_session(self, ctx: SessionContext) -> Session:
        """Build (or resume) a session with its paired executor and loop."""
        return await open_session(self._parts, ctx)

    # -- models (geode serve's start-up check, tests) ------------------------------------------

    def resolve(self, model_id: str | None) -> ModelRef:
        """A generation model (judge-only ids are refused)."""
        return self.providers.resolve(model_id)

    def provider_for(self, ref: ModelRef, path: str | None = None) -> BaseProvider:
        return self.providers.provider_for(ref, path)

    def check_provider(self, ref: ModelRef, path: str | None = None) -> None:
        """The ConfigError :meth:`provider_for` would raise, with no adapter built."""
        self.providers.check_provider(ref, path)

    def judge_for(self, ref: ModelRef) -> Judge | None:
        return self.providers.judge_for(ref)

    # -- what a host asks about sessions (the harness port) ----------------------------------

    async def turn_outcome(self, session_id: str, turn_id: str) -> TurnOutcome:
        """What the checkpoint chain says about turn ``turn_id`` of ``session_id``."""
        return await self.records.turn_outcome(session_id, turn_id)

    async def session_status(self, session_id: str) -> SessionStatus:
        """The session's record and the termination of its latest finished turn."""
        return await self.records.session_status(session_id)

    async def usage_status(self, *, scope: str, caps: SpendCaps, thread: str = "",
                           platform: str = "", user: str = "") -> list[str]:
        """Today's usage under ``scope`` (a binding) against its per-day caps."""
        return await self.budgets.usage_status(scope=scope, caps=caps, thread=thread,
                                               platform=platform, user=user)
