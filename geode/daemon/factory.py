"""The one session factory: every entry point (REPL, IPC, DAEMON, HEADLESS, SCHEDULER) builds
its session here, so the mode's policy, the tool plan, the executor and the records are
wired the same way everywhere. No entry point builds a loop by hand.

A :class:`Runtime` holds what a process shares across sessions (settings, secrets, store,
resource locks, hooks, observers, MCP manager); :meth:`Runtime.open_session` returns a
:class:`Session` whose executor and loop are paired.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from geode.daemon.port import (
    OpeningNote,
    SessionOverrides,
    SessionStatus,
    TurnOutcome,
    WriteFence,
)
from geode.daemon.spend import SpendControl, SpendIdentity, usage_status_lines
from geode.errors import ConfigError, RunError
from geode.executor import (
    Approver,
    HookVerifier,
    MemoryReceiptStore,
    MemoryResults,
    MemoryTimeline,
    ResourceLocks,
    ToolExecutor,
)
from geode.hooks import (
    HookPromptGate,
    HookRegistry,
    HookSystem,
    load_entry_point_hooks,
    load_shell_hooks,
)
from geode.loop import (
    AgenticLoop,
    LoopLimits,
    RunDeps,
    TerminationReason,
    TurnInfo,
    TurnResult,
)
from geode.loop.compaction import CHARS_PER_TOKEN as RESULT_CHARS_PER_TOKEN
from geode.loop.events import EventSink
from geode.loop.resume import awaits_approval, dangling_calls, repair_dangling
from geode.loop.system_prompt import SystemPromptSources, build_system_prompt
from geode.loop.timeline import TurnTimeline
from geode.messages import ImageBlock, Message
from geode.policy import MODE_POLICIES, Mode, SessionScope, session_scope
from geode.providers._clients import ClientCache
from geode.providers.base import BaseProvider
from geode.providers.catalog import (
    PROVIDERS,
    ModelRef,
    model_has_vision,
    resolve_generation_model,
    role_model,
    select_path,
)
from geode.providers.factory import build_provider, check_provider
from geode.providers.retry import RetryPolicy
from geode.settings import Secrets, Settings, SpendCaps
from geode.tools.base import ToolDef
from geode.tools.builtin import builtin_tools
from geode.tools.names import check_tool_names
from geode.tools.plan import BoundToolPlan
from geode.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from geode.mcp.manager import MCPServerManager
    from geode.providers.codex_auth import CodexLogin
    from geode.providers.judge import Judge
    from geode.store import Store
    from geode.store.timeline import SessionTimeline

__all__ = ["Runtime", "Session", "SessionContext"]

#: closes an open tool batch: (messages, the turn, ask again?) -> messages with its results
OpenBatch = Callable[[list[Message], TurnInfo, bool], Awaitable[list[Message]]]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class SessionContext:
    """What an entry point knows when it asks for a session."""

    mode: Mode
    workspace: Path
    session_id: str | None = None
    model: str | None = None
    #: access path ("api" / "codex"); None = [model.paths] / [model] path / api
    path: str | None = None
    #: neutral adjustments (a channel maps its binding onto these)
    overrides: SessionOverrides = field(default_factory=SessionOverrides)
    #: run inside each checkpoint transaction of the session; raising aborts the save
    fence: WriteFence | None = None
    #: a timeline row written with the turn's first checkpoint, in its transaction
    opening_note: OpeningNote | None = None
    user: str | None = None
    allow_tools: Sequence[str] = ()
    deny_tools: Sequence[str] = ()
    max_rounds: int | None = None
    time_budget_s: float | None = None
    approver: Approver | None = None
    on_event: EventSink | None = None
    stream: bool = False
    #: an explicit adapter (scripted model for tests / the demo); skips credentials
    provider: BaseProvider | None = None
    rules: Sequence[str] = ()
    parent_session_id: str | None = None
    #: the session's title in `geode sessions list`; empty: its first prompt
    title: str = ""
    extra_tools: Sequence[ToolDef] = ()
    #: the conversation per-thread spend caps count (a channel thread); default: the session
    thread: str | None = None
    #: who opened it, for `geode sessions list` (cli, telegram, schedule, mcp, ...);
    #: empty: derived from the mode
    source: str = ""

    def session_source(self) -> str:
        if self.source:
            return self.source
        return {"SCHEDULER": "schedule", "DAEMON": "channel"}.get(self.mode, "cli")

    def session_metadata(self) -> dict[str, Any]:
        """Written once, when the session is created (``geode run -c`` looks it up)."""
        return {"source": self.session_source(), "workspace": str(self.workspace)}


@dataclass(kw_only=True)
class Session:
    session_id: str
    ctx: SessionContext
    scope: SessionScope
    loop: AgenticLoop
    executor: ToolExecutor
    model: str
    uncertain_calls: list[str] = field(default_factory=list)
    #: the guard counters of the chain's last checkpoint (what :meth:`resume` continues)
    saved_state: dict[str, Any] = field(default_factory=dict)
    timeline: SessionTimeline | None = None
    #: gives an untitled session its first prompt as title (None: nothing to do)
    entitle: Callable[[str], Awaitable[None]] | None = None
    #: closes the chain's open tool batch whose calls wait for an approval: ``ask`` True
    #: (a resumed turn) asks again, which resumes the wait; False (a new turn) tells the
    #: model they did not run (None: no such batch)
    open_batch: OpenBatch | None = None

    async def run(self, prompt: str, *, turn_id: str | None = None,
                  images: Sequence[ImageBlock] = ()) -> TurnResult:
        """Run a turn; ``images`` go to the model as image content when it has vision (a
        catalog flag), else the prompt says they were not shown."""
        if images and not model_has_vision(self.model):
            prompt += ("\n\n[the attached image(s) are saved as files but not shown: "
                       f"{self.model} does not take images]")
            images = ()
        if self.open_batch is not None:  # a new turn: the interrupted batch did not run
            await self._close_open_batch(ask=False)
        self.saved_state = {}  # a new turn: what was loaded no longer describes the chain
        if self.entitle is not None:
            from geode.secret_redaction import redact_text
            from geode.store.sessions import short_title

            entitle, self.entitle = self.entitle, None
            await entitle(short_title(redact_text(prompt)))
        return await self.loop.run(prompt, turn_id=turn_id, images=images)

    def can_resume(self, turn_id: str) -> bool:
        """True when the chain's last checkpoint is turn ``turn_id``, started and unfinished."""
        state = self.saved_state
        return bool(turn_id) and state.get("turn_id") == turn_id and not state.get(
            "last_termination")

    async def resume(self, turn_id: str) -> TurnResult:
        """Continue turn ``turn_id`` from the last checkpoint, its guard counters restored
        (see :meth:`AgenticLoop.resume`). A turn past the recovery limit ends at once,
        with a timeline row saying so."""
        if not self.can_resume(turn_id):
            raise RunError(f"turn {turn_id!r} is not the unfinished turn of session "
                           f"{self.session_id!r}; nothing to resume")
        saved, self.saved_state = self.saved_state, {}  # resumed once per load
        reopen = None
        if self.open_batch is not None:
            close, self.open_batch = self.open_batch, None

            async def reopen(batch: list[Message], turn: TurnInfo) -> list[Message]:
                return await close(batch, turn, True)

        result = await self.loop.resume(turn_id=turn_id, saved=saved, open_batch=reopen)
        if result.termination == TerminationReason.RECOVERY_LIMIT and self.timeline is not None:
            await self.timeline.append(
                session_id=self.session_id, turn_id=turn_id, kind="turn.recovery_limit",
                payload={"recoveries": int(saved.get("recoveries", 0)) + 1,
                         "limit": self.loop.deps.limits.recovery_limit,
                         "rounds": result.rounds},
            )
        return result

    def cancel(self) -> bool:
        return self.loop.cancel()

    async def _close_open_batch(self, *, ask: bool) -> None:
        """Give the open batch its results now and save them (see ``open_batch``)."""
        close, self.open_batch = self.open_batch, None
        assert close is not None
        state = self.saved_state
        turn_id = str(state.get("turn_id") or "resume")
        turn = TurnInfo(session_id=self.session_id, turn_id=turn_id,
                        round=int(state.get("round", 0)), correlation_id=f"{turn_id}:resume",
                        mode=self.ctx.mode)
        self.loop.messages = await close(self.loop.messages, turn, ask)
        checkpointer = self.loop.deps.checkpointer
        if checkpointer is not None:
            await checkpointer.save(messages=self.loop.messages, state=state, status="active")


class Runtime:
    """Process-wide shared parts; open once per process (``async with Runtime.open(...)``)."""

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
        """``clock``: wall-clock seconds for the spend caps' days (tests move it)."""
        self.settings = settings
        self.secrets = secrets
        self.store = store
        self.clock = clock or time.time
        self.locks = ResourceLocks()
        if hooks is None:
            # Operator hooks: Python plugins (entry points) and shell commands from config.
            hooks = HookRegistry()
            load_entry_point_hooks(hooks)
            load_shell_hooks(
                hooks, {k: [h.model_dump() for h in v] for k, v in settings.hooks.items()}
            )
        self.hooks = hooks
        self.observers = observers or HookSystem()
        self.mcp = mcp
        from geode.daemon.tracing import attach_tracing

        attach_tracing(self.observers)  # OpenTelemetry, when installed and configured
        if store is not None:
            from geode.daemon.evidence import LedgerObserver
            from geode.store.ledger import EvidenceLedger

            self.ledger: EvidenceLedger | None = EvidenceLedger(settings.home)
            LedgerObserver(self.ledger).attach(self.observers)
        else:
            self.ledger = None
        self.registry = ToolRegistry()
        for t in tools if tools is not None else builtin_tools():
            self.registry.register(t)
        #: one SDK client per model endpoint, shared by every session, closed with the runtime
        self.clients = ClientCache()
        #: the adapters built on those clients (:meth:`provider_for`)
        self._adapters: dict[tuple[Any, ...], BaseProvider] = {}
        #: sessions' first tool plans (:class:`_PlanSource`)
        self._first_plans: dict[tuple[int, ...], BoundToolPlan] = {}
        self._codex_login: CodexLogin | None = None
        self._memory_receipts = MemoryReceiptStore()
        self._memory_timeline = MemoryTimeline()
        self._memory_results = MemoryResults()

    @classmethod
    async def create(
        cls, *, settings: Settings, secrets: Secrets, use_store: bool = True, **kw: Any
    ) -> Runtime:
        store = None
        if use_store:
            from geode.store import open_store

            settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
            store = await open_store(settings.store_url)
        runtime = cls(settings=settings, secrets=secrets, store=store, **kw)
        await runtime.prune()
        return runtime

    async def prune(self) -> None:
        """Apply the retention settings to the timeline and the ledger (observation only)."""
        if self.store is None:
            return
        try:
            await self.store.timeline.prune(self.settings.store.timeline_retention_days)
            # kept tool results (read_result) live as long as the timeline that names them
            await self.store.results.prune(self.settings.store.timeline_retention_days)
            if self.ledger is not None:
                await self.ledger.prune(self.settings.store.ledger_retention_days)
        except Exception:
            log.warning("retention prune failed", exc_info=True)

    async def aclose(self) -> None:
        await self.observers.drain()  # let ledger rows land before the process ends
        if self.mcp is not None:
            await self.mcp.aclose()
        self._adapters.clear()
        await self.clients.aclose()
        if self._codex_login is not None:
            await self._codex_login.aclose()
        if self.store is not None:
            await self.store.aclose()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- providers -------------------------------------------------------------------------

    def resolve(self, model_id: str | None) -> ModelRef:
        """A generation model (judge-only ids are refused)."""
        return resolve_generation_model(model_id or self.settings.model.default)

    def path_for(self, ref: ModelRef, path: str | None = None) -> str:
        """The access path: explicit, else ``[model.paths]``, else ``[model] path``, else
        api. A path the catalog does not allow for the model is a ConfigError, no fallback."""
        chosen = path or self.settings.model.paths.get(ref.id) or self.settings.model.path
        return select_path(ref, chosen)

    def provider_for(self, ref: ModelRef, path: str | None = None) -> BaseProvider:
        info = PROVIDERS.get(ref.provider)
        if info is None:
            raise ConfigError(f"Unknown provider {ref.provider!r} for model {ref.model!r}.")
        if self.path_for(ref, path) == "codex_subscription":
            codex = self.settings.codex
            return build_provider(
                ref,
                api_key=None,
                base_url=codex.base_url,
                timeout=self.settings.model.request_timeout_s,
                clients=self.clients,
                path="codex_subscription",
                codex_login=self._codex(),
            )
        api_key, base_url = self._endpoint(ref.provider)
        timeout = self.settings.model.request_timeout_s
        # One adapter per model, endpoint and credential, like the clients they use: an
        # adapter holds no state of a session's, and building one per turn read the
        # client's headers and URL again each time. A changed key or URL builds a new one.
        key = (ref, api_key, base_url, timeout)
        adapter = self._adapters.get(key)
        if adapter is None:
            adapter = build_provider(ref, api_key=api_key, base_url=base_url,
                                     timeout=timeout, clients=self.clients)
            if len(self._adapters) >= 64:  # keys rotated many times: keep the newest
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

    def _codex(self) -> CodexLogin:
        """The Codex CLI login, one per process: its token refreshes are serialised on it."""
        from geode.providers.codex_auth import CodexLogin, codex_auth_file

        if self._codex_login is None:
            codex = self.settings.codex
            self._codex_login = CodexLogin(
                auth_file=codex_auth_file(codex.home), token_url=codex.token_url
            )
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
            return JevJudge(
                route=verify.jev_route,
                api_key=api_key,
                base_url=base_url or info.default_base_url or "",
                timeout=verify.timeout_s,
                retry=retry,
            )
        main = ref.provider if ref.provider != "scripted" else self.resolve(None).provider
        aux = role_model("auxiliary", main, self.settings.model.roles)
        return LLMJudge(provider=self.provider_for(aux), model=aux.model, retry=retry)

    # -- sessions --------------------------------------------------------------------------

    def _scope(self, ctx: SessionContext) -> SessionScope:
        o = ctx.overrides
        known = {t.name for t in (*self.registry, *ctx.extra_tools)}
        known.update(*(p.denied_tools for p in MODE_POLICIES.values()))  # delegate_task
        servers = self.mcp.servers if self.mcp is not None else ()
        # the flags a person typed; a binding's list is checked where it is written
        # (`geode bindings add`, `geode serve` reading config.toml), not at every turn
        check_tool_names(ctx.allow_tools, known=known, mcp_servers=servers,
                         what="--allow-tool")
        check_tool_names(ctx.deny_tools, known=known, mcp_servers=servers, what="--deny-tool")
        return session_scope(
            ctx.mode,
            channel_tools=o.tools,
            channel_approve=o.approve,
            computer_use=o.computer_use,
            approve_actions=o.approve_actions,
            allow_tools=ctx.allow_tools,
            deny_tools=ctx.deny_tools,
        )

    def _window(self, ref: ModelRef) -> int:
        """The model's context window: ``[model.windows]`` by id, else the catalog's figure
        (200,000 assumed for models it does not know)."""
        windows = self.settings.model.windows
        return windows.get(ref.id) or windows.get(ref.model) or ref.context_window

    def _max_result_chars(self, ref: ModelRef) -> int:
        """Characters a tool result may have and pass whole: ``max_result_share`` of the
        model's window, counted at :data:`RESULT_CHARS_PER_TOKEN`, capped by an explicit
        ``max_result_chars``."""
        loop = self.settings.loop
        by_share = int(self._window(ref) * loop.max_result_share * RESULT_CHARS_PER_TOKEN)
        return min(by_share, loop.max_result_chars) if loop.max_result_chars else by_share

    def _limits(self, ctx: SessionContext, ref: ModelRef) -> LoopLimits:
        loop = self.settings.loop
        budget = ctx.time_budget_s
        if budget is None:
            budget = ctx.overrides.time_budget_s
        if budget is None:
            budget = loop.time_budget_s
        if budget is None:
            budget = MODE_POLICIES[ctx.mode].time_budget_s
        price = self.settings.model.prices.get(ref.id) or self.settings.model.prices.get(ref.model)
        if price is None and ref.provider != "scripted":
            own = ctx.overrides.spend_caps
            usd = [("[loop] cost_budget_usd", loop.cost_budget_usd)] + [
                (f"{where} {name}", getattr(caps, name))
                for where, caps in (("[budgets]", self.settings.budgets), ("the binding's", own))
                if caps is not None for name in ("max_usd_per_day", "max_usd_per_turn")]
            for what, value in usd:
                if value is not None:  # a USD cap cannot count an unpriced model: never guess
                    raise ConfigError(
                        f"{what} is set but model {ref.id!r} has no price: add "
                        f'[model.prices] "{ref.id}" = [input_usd_per_mtok, output_usd_per_mtok].'
                    )
        return LoopLimits(
            max_rounds=ctx.max_rounds or loop.max_rounds,
            time_budget_s=budget,
            cost_budget_usd=loop.cost_budget_usd,
            price_per_mtok=price,
            context_window=self._window(ref),
            repeated_error_limit=loop.repeated_error_limit,
            max_error_rounds=loop.max_error_rounds,
            repair_budget=loop.repair_budget,
            recovery_limit=loop.recovery_limit,
            max_tokens=min(self.settings.model.max_tokens, ref.max_output or 8192),
            model_call_deadline_s=self.settings.model.call_deadline_s,
            waiting_notice_s=self.settings.model.waiting_notice_s,
        )

    @functools.cached_property
    def _tool_settings(self) -> dict[str, Any]:
        """What the built-in tools need of the settings (fixed for the runtime's life, so
        built once, not per session): GEODE's own files (never reachable through a tool,
        wherever the workspace is) and the sandbox's limits."""
        from geode.tools.builtin import SandboxLimits

        protected = [self.settings.home]
        url = self.settings.store_url
        if url.startswith("sqlite"):
            from sqlalchemy.engine import make_url

            db = make_url(url).database
            if db:
                protected += [Path(db + suffix) for suffix in ("", "-wal", "-shm", "-journal")]
        from geode.providers.codex_auth import codex_auth_file

        # the Codex CLI login (a refresh token): GEODE reads it, so no tool may
        protected.append(codex_auth_file(self.settings.codex.home))
        return {
            "protected_paths": tuple(protected),
            "sandbox_limits": SandboxLimits(**self.settings.sandbox.model_dump()),
        }

    def _tool_extra(self, ctx: SessionContext) -> dict[str, Any]:
        """The settings' part (:attr:`_tool_settings`) and the X display of a computer-use
        session."""
        display = ctx.overrides.display
        return {**self._tool_settings, **({"display": display} if display else {})}

    async def open_session(self, ctx: SessionContext) -> Session:
        """Build (or resume) a session with its paired executor and loop."""
        model_id = ctx.model or ctx.overrides.model or None
        if ctx.provider is not None:
            model_name = model_id or "scripted"
            ref = ModelRef(
                provider="scripted",
                model=model_name,
                context_window=200_000,
                max_output=8192,
                default=False,
            )
            provider = ctx.provider
        else:
            ref = self.resolve(model_id)
            provider = self.provider_for(ref, ctx.path)
            model_name = ref.model
        scope = self._scope(ctx)

        session_id, messages, receipts_status, saved_state = await self._load_or_create(
            ctx, model_name
        )
        receipts = self.store.receipts if self.store is not None else self._memory_receipts
        timeline = self.store.timeline if self.store is not None else self._memory_timeline
        executor = ToolExecutor(
            scope=scope,
            workspace=ctx.workspace,
            hooks=self.hooks,
            observers=self.observers,
            approver=ctx.approver,
            receipts=receipts,
            timeline=timeline,
            locks=self.locks,
            max_result_chars=self._max_result_chars(ref),
            results=self.store.results if self.store is not None else self._memory_results,
            extra=self._tool_extra(ctx),
        )
        extra = list(ctx.extra_tools)
        if self.mcp is not None:
            await self.mcp.tools_for(scope)  # start servers; the plan reads current_tools()
        plan_source = _PlanSource(self.registry, extra, scope, mcp=self.mcp,
                                  first_plans=self._first_plans)

        rules = [*ctx.rules]
        if ctx.overrides.prompt_addition:
            rules.append(ctx.overrides.prompt_addition)
        sources = SystemPromptSources(
            home=self.settings.home, workspace=ctx.workspace, rules=rules, mode=ctx.mode
        )
        checkpointer = None
        if self.store is not None:
            note = ctx.opening_note
            checkpointer = self.store.checkpointer(
                session_id, fence=ctx.fence,
                opening=[(note.kind, note.payload, note.turn_id)] if note is not None else (),
            )
        deps = RunDeps(
            session_id=session_id,
            mode=ctx.mode,
            model=model_name,
            provider=provider,
            plan_source=plan_source,
            runner=executor,
            system_prompt=lambda: build_system_prompt(sources),
            limits=self._limits(ctx, ref),
            retry=RetryPolicy(max_attempts=self.settings.model.max_retries),
            checkpointer=checkpointer,
            verifier=HookVerifier(hooks=self.hooks, judge=self.judge_for(ref)),
            prompt_gate=HookPromptGate(hooks=self.hooks),
            observer=self.observers,
            spend=self._spend(ctx, session_id),
            on_event=ctx.on_event,
            stream=ctx.stream,
            timeline=TurnTimeline(writer=timeline, session_id=session_id, source=ctx.mode,
                                  sender=ctx.user),
        )
        uncertain: list[str] = []
        open_batch: OpenBatch | None = None
        ask_again = scope.needs_approval
        if dangling_calls(messages) and checkpointer is not None and awaits_approval(
                messages, receipts_status, ask_again):
            # A call of the open batch waited for a person when the process stopped: the
            # batch stays open here, and resuming the turn resumes that wait inside the
            # turn (where /stop reaches it); a new turn closes it first (Session.run).
            async def close(batch: list[Message], turn: TurnInfo, ask: bool) -> list[Message]:
                closed, unsure = await repair_dangling(
                    batch, runner=executor, plan=plan_source(), turn=turn,
                    receipts=receipts_status, ask_again=ask_again if ask else frozenset(),
                )
                uncertain.extend(unsure)
                return closed

            open_batch = close
            log.info("resumed a session whose tool batch waits for an approval")
        elif dangling_calls(messages):
            turn_id = str(saved_state.get("turn_id") or "resume")
            turn = TurnInfo(
                session_id=session_id,
                turn_id=turn_id,
                round=int(saved_state.get("round", 0)),
                correlation_id=f"{turn_id}:resume",
                mode=ctx.mode,
            )
            messages, uncertain = await repair_dangling(
                messages,
                runner=executor,
                plan=plan_source(),
                turn=turn,
                receipts=receipts_status,
            )
            if checkpointer is not None:
                # Saved with the turn's own counters: the results above are reported to the
                # model once (a later crash finds no open batch), and a resume continues
                # the turn's rounds, time and spend instead of starting them again.
                await checkpointer.save(messages=messages, state=saved_state, status="active")
            log.warning("resumed a session with an unfinished tool batch", uncertain=uncertain)
        loop = AgenticLoop(deps=deps, messages=messages)
        return Session(
            session_id=session_id,
            ctx=ctx,
            scope=scope,
            loop=loop,
            executor=executor,
            model=model_name,
            uncertain_calls=uncertain,
            saved_state=saved_state,
            open_batch=open_batch,
            timeline=self.store.timeline if self.store is not None else None,
            entitle=self._entitle(session_id) if not ctx.title else None,
        )

    def _spend(self, ctx: SessionContext, session_id: str) -> SpendControl | None:
        """The session's spend caps and usage ledger (none without a store)."""
        if self.store is None:
            return None
        o = ctx.overrides
        identity = SpendIdentity(
            session_id=session_id,
            binding=o.spend_scope,
            platform=ctx.source if o.spend_scope else "",
            user=ctx.user or "",
            thread=ctx.thread or session_id,
        )
        return SpendControl(ledger=self.store.usage, identity=identity,
                            budgets=self.settings.budgets, binding_caps=o.spend_caps,
                            clock=self.clock,
                            timeline=self.store.timeline, observer=self.observers)

    def _entitle(self, session_id: str) -> Callable[[str], Awaitable[None]] | None:
        store = self.store
        if store is None:
            return None

        async def entitle(title: str) -> None:
            await store.sessions.title_if_untitled(session_id, title)

        return entitle

    # -- what a host asks about sessions (the harness port) ----------------------------------

    async def turn_outcome(self, session_id: str, turn_id: str) -> TurnOutcome:
        """What the checkpoint chain says about turn ``turn_id`` of ``session_id``.

        Raises:
            StoreError: the chain could not be read.
        """
        if self.store is None or not turn_id:
            return TurnOutcome(state="not_started")
        restored = await self.store.checkpointer(session_id).load()
        if restored is None or restored.state.get("turn_id") != turn_id:
            return TurnOutcome(state="not_started")
        termination = restored.state.get("last_termination")
        if not termination:
            return TurnOutcome(state="started")
        return TurnOutcome(state="finished", termination=str(termination),
                           text=_last_assistant_text(restored.messages))

    async def usage_status(self, *, scope: str, caps: SpendCaps) -> list[str]:
        """Today's usage under ``scope`` (a binding) against its per-day caps."""
        if self.store is None:
            return []
        return await usage_status_lines(ledger=self.store.usage, budgets=self.settings.budgets,
                                        binding=scope, caps=caps, now=self.clock())

    async def session_status(self, session_id: str) -> SessionStatus:
        """The session's record and the termination of its latest finished turn."""
        if self.store is None:
            return SessionStatus(session_id=session_id, exists=False)
        record = await self.store.sessions.get(session_id)
        if record is None:
            return SessionStatus(session_id=session_id, exists=False)
        last: str | None = None
        rows = await self.store.checkpoints.list(session_id, limit=100)
        for row in sorted(rows, key=lambda r: r.seq, reverse=True):
            term = row.state.get("last_termination")
            if term:
                last = str(term)
                break
        return SessionStatus(session_id=session_id, exists=True, model=record.model or "",
                             parent_session_id=record.parent_session_id,
                             status=record.status, last_termination=last)

    async def _load_or_create(
        self, ctx: SessionContext, model: str
    ) -> tuple[str, list[Any], dict[str, str], dict[str, Any]]:
        if self.store is None:
            from geode.loop._util import new_id

            return ctx.session_id or new_id("s"), [], {}, {}
        sessions = self.store.sessions
        if ctx.session_id:
            if ctx.mode in ("HEADLESS", "REPL", "IPC"):
                if not await sessions.exists(ctx.session_id):
                    # A user asked to continue a session that does not exist: say so (exit 2).
                    raise ConfigError(f"Session {ctx.session_id!r} does not exist. "
                                      "`geode sessions list` shows them.")
            elif await sessions.create_if_missing(
                ctx.session_id, mode=ctx.mode, model=model,
                parent_session_id=ctx.parent_session_id, title=ctx.title,
                metadata=ctx.session_metadata(),
            ):
                # a fixed id seen for the first time (a thread)
                return ctx.session_id, [], {}, {}
            restored = await self.store.checkpointer(ctx.session_id).load()
            _, status = await self.store.receipts.resume(ctx.session_id)
            messages = list(restored.messages) if restored is not None else []
            saved = dict(restored.state) if restored is not None else {}
            return ctx.session_id, messages, status, saved
        sid = await sessions.create(
            session_id=ctx.session_id,
            mode=ctx.mode,
            model=model,
            parent_session_id=ctx.parent_session_id,
            title=ctx.title,
            metadata=ctx.session_metadata(),
        )
        return sid, [], {}, {}


class _PlanSource:
    """Projects the session's plan each step; unchanged content keeps its generation,
    a change (e.g. MCP tools refreshed) becomes the next generation for the next step."""

    def __init__(
        self,
        registry: ToolRegistry,
        extra: Sequence[ToolDef],
        scope: SessionScope,
        *,
        mcp: MCPServerManager | None = None,
        first_plans: dict[tuple[int, ...], BoundToolPlan] | None = None,
    ) -> None:
        """``first_plans``: the runtime's first-generation plans by the ids of their tools,
        shared by sessions (a new thread's session builds the same plan as the last one)."""
        self.registry = registry
        self.extra = list(extra)
        self.scope = scope
        self.mcp = mcp
        self._plan: BoundToolPlan | None = None
        self._ids: tuple[int, ...] = ()
        self._first = first_plans if first_plans is not None else {}

    def __call__(self) -> BoundToolPlan:
        live = self.mcp.current_tools(self.scope) if self.mcp is not None else []
        tools = [t for t in (*self.registry, *self.extra, *live) if self.scope.permits(t.name)]
        # The same tool objects give the same plan. An id names its object only while that
        # lives; a plan holds every tool of its key, so none of them can go meanwhile.
        ids = tuple(map(id, tools))
        if self._plan is not None and ids == self._ids:
            return self._plan
        self._ids = ids
        if self._plan is None:
            plan = self._first.get(ids)
            if plan is None:
                plan = BoundToolPlan.build(tools)
                if len(self._first) >= 32:
                    self._first.pop(next(iter(self._first)))
                self._first[ids] = plan
            self._plan = plan
        else:
            self._plan = self._plan.refreshed(tools)
        return self._plan


MakeProvider = Callable[[ModelRef], BaseProvider]


def _last_assistant_text(messages: Sequence[Message]) -> str:
    """The last assistant text of the latest turn (after its user message), or ``""``."""
    for m in reversed(messages):
        if m.role == "assistant":
            if m.text:
                return m.text
        elif m.role == "user":
            break
    return ""
