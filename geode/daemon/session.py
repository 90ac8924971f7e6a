"""A session: what an entry point asks for (:class:`SessionContext`), what it gets
(:class:`Session`, whose executor and loop are paired), and how one is opened
(:func:`open_session`, from the process's builders in :mod:`geode.daemon.builders`).

Every entry point (REPL, IPC, DAEMON, HEADLESS, SCHEDULER, MCP) opens its sessions here, so
the mode's policy, the tool plan, the executor and the records are wired the same way
everywhere. No entry point builds a loop by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geode.daemon.builders import Budgets, OpenBatch, ProviderBuilder, Records, ToolsBuilder
from geode.daemon.port_values import OpeningNote, SessionOverrides, WriteFence
from geode.errors import RunError
from geode.executor import Approver, HookVerifier, ToolExecutor
from geode.hooks import HookPromptGate, HookRegistry, HookSystem
from geode.loop import AgenticLoop, RunDeps, TerminationReason, TurnInfo, TurnResult
from geode.loop.events import EventSink
from geode.loop.system_prompt import SystemPromptSources, build_system_prompt
from geode.loop.timeline import TurnTimeline
from geode.messages import ImageBlock, Message
from geode.policy import Mode, SessionScope
from geode.providers.base import BaseProvider
from geode.providers.catalog import model_has_vision
from geode.providers.retry import RetryPolicy
from geode.store.sessions import short_title
from geode.tools.base import ToolDef

if TYPE_CHECKING:
    from geode.memory import MemoryRead
    from geode.skills import OfferedSkills
    from geode.store.timeline import SessionTimeline

__all__ = ["Session", "SessionContext", "SessionParts", "open_session"]


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
    #: the session's title in `geode sessions list` (masked and cut to one line here, as
    #: :func:`~geode.store.sessions.short_title` does); empty: its first prompt
    title: str = ""
    extra_tools: Sequence[ToolDef] = ()
    #: the conversation per-thread spend caps count (a channel thread); default: the session
    thread: str | None = None
    #: who opened it, for `geode sessions list` (cli, a platform, schedule, mcp, ...);
    #: empty: derived from the mode
    source: str = ""

    def session_source(self) -> str:
        if self.source:
            return self.source
        return {"SCHEDULER": "schedule", "DAEMON": "channel"}.get(self.mode, "cli")

    def session_metadata(self) -> dict[str, Any]:
        """Written once, when the session is created (``geode run -c`` looks it up).

        ``policy``: the tool policy the caller asked for beyond its mode (flags, a binding's
        lists), so ``geode replay`` checks the session against the policy it ran under."""
        meta: dict[str, Any] = {"source": self.session_source(), "workspace": str(self.workspace)}
        o = self.overrides
        policy: dict[str, Any] = {k: v for k, v in (
            ("allow_tools", sorted(self.allow_tools)), ("deny_tools", sorted(self.deny_tools)),
            ("approve", sorted(o.approve)), ("binding", o.spend_scope)) if v}
        if o.tools is not None:
            policy["tools"] = sorted(o.tools)
        if o.computer_use:
            policy["computer_use"] = True
        if o.memory != "off":
            policy["memory"] = o.memory
        if policy:
            meta["policy"] = policy
        return meta


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
            entitle, self.entitle = self.entitle, None
            await entitle(short_title(prompt))  # masked, then cut
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


@dataclass(frozen=True, kw_only=True)
class SessionParts:
    """What a process opens its sessions from: its builders and its hooks (the
    :class:`~geode.daemon.runtime.Runtime` holds one)."""

    home: Path
    providers: ProviderBuilder
    tools: ToolsBuilder
    records: Records
    budgets: Budgets
    hooks: HookRegistry
    observers: HookSystem
    #: model calls retried at most this many times
    max_retries: int


def _skill_tools(skills: OfferedSkills) -> list[ToolDef]:
    """The ``skill`` tool, when the session is offered any skill."""
    if not skills:
        return []
    from geode.skills import skill

    return [skill]


def _memory_tools(ctx: SessionContext) -> list[ToolDef]:
    """The ``memory`` tool, when the caller's binding turned memory on."""
    if ctx.overrides.memory == "off":
        return []
    from geode.tools.builtin.memory import memory

    return [memory]


def _memory_read(parts: SessionParts, ctx: SessionContext) -> MemoryRead | None:
    """What this turn remembers, to be read with its session's load: the memory of the
    person it answers (``ctx.user`` on the ``ctx.source`` platform, as the host received the
    message: never the model's say) and of the binding (``spend_scope``); None when memory
    is off or there is no store."""
    store = parts.records.store
    o = ctx.overrides
    if o.memory == "off" or store is None:
        return None
    from geode.memory import MemoryRead, MemoryScope
    from geode.store.memory import MemoryStore

    user = f"{ctx.source}:{ctx.user}" if ctx.source and ctx.user else ""
    scope = MemoryScope(mode=o.memory, user=user, channel=o.spend_scope)
    return MemoryRead(store=MemoryStore(store=store), scope=scope,
                      budget_tokens=parts.tools.settings.memory.budget_tokens)


async def open_session(parts: SessionParts, ctx: SessionContext) -> Session:
    """Build (or resume) a session with its paired executor and loop."""
    ref, provider = parts.providers.session_model(
        model_id=ctx.model or ctx.overrides.model or None, path=ctx.path, given=ctx.provider)
    tools, records, budgets = parts.tools, parts.records, parts.budgets
    # the skill folders are scanned (stat, scandir, a changed SKILL.md parsed) off the loop
    skills = await asyncio.to_thread(tools.skills_for, ctx.overrides)
    extra_tools = [*ctx.extra_tools, *_skill_tools(skills), *_memory_tools(ctx)]
    scope = tools.scope(mode=ctx.mode, overrides=ctx.overrides, allow_tools=ctx.allow_tools,
                        deny_tools=ctx.deny_tools, extra_tools=extra_tools)
    if skills and not scope.permits("skill"):  # denied (--deny-tool skill): not listed
        from geode.skills import OfferedSkills

        skills = OfferedSkills(())
    # memory is read in the transaction that creates or finds the session's row, and its
    # use counted in the turn's first checkpoint: no transaction of its own for either
    reading = _memory_read(parts, ctx)
    loaded = await records.load_or_create(
        session_id=ctx.session_id, mode=ctx.mode, model=ref.model,
        parent_session_id=ctx.parent_session_id, title=short_title(ctx.title),
        metadata=ctx.session_metadata(), read_with=reading.read if reading else None)
    session_id = loaded.session_id
    memory = await reading.open(session_id) if reading is not None else None
    executor = tools.executor(scope=scope, workspace=ctx.workspace, approver=ctx.approver,
                              records=records, max_result_chars=budgets.max_result_chars(ref),
                              display=ctx.overrides.display, skills=skills, memory=memory)
    plan_source = await tools.plan_source(scope, extra_tools)
    rules = [*ctx.rules, *([ctx.overrides.prompt_addition] if ctx.overrides.prompt_addition
                           else [])]
    sources = SystemPromptSources(home=parts.home, workspace=ctx.workspace, rules=rules,
                                  mode=ctx.mode, skills=tuple(skills.listing()),
                                  memory=memory.prompt if memory is not None else None)
    checkpointer = records.checkpointer(
        session_id, fence=ctx.fence, opening_note=ctx.opening_note,
        riders=[memory.count_use] if memory is not None and memory.shown_at_open else ())
    deps = RunDeps(
        session_id=session_id,
        mode=ctx.mode,
        model=ref.model,
        provider=provider,
        plan_source=plan_source,
        runner=executor,
        system_prompt=lambda: build_system_prompt(sources),
        limits=budgets.limits(ref, mode=ctx.mode, overrides=ctx.overrides,
                              max_rounds=ctx.max_rounds, time_budget_s=ctx.time_budget_s),
        retry=RetryPolicy(max_attempts=parts.max_retries),
        checkpointer=checkpointer,
        verifier=HookVerifier(hooks=parts.hooks, judge=parts.providers.judge_for(ref)),
        prompt_gate=HookPromptGate(hooks=parts.hooks),
        observer=parts.observers,
        spend=budgets.spend(session_id=session_id, overrides=ctx.overrides, source=ctx.source,
                            user=ctx.user, thread=ctx.thread),
        on_event=ctx.on_event,
        stream=ctx.stream,
        timeline=TurnTimeline(writer=records.timeline, session_id=session_id, source=ctx.mode,
                              sender=ctx.user),
    )
    messages, uncertain, open_batch = await records.settle_open_batch(
        loaded, mode=ctx.mode, runner=executor, plan=plan_source, checkpointer=checkpointer,
        ask_again=scope.needs_approval)
    store = records.store
    return Session(
        session_id=session_id,
        ctx=ctx,
        scope=scope,
        loop=AgenticLoop(deps=deps, messages=messages),
        executor=executor,
        model=ref.model,
        uncertain_calls=uncertain,
        saved_state=loaded.state,
        open_batch=open_batch,
        timeline=store.timeline if store is not None else None,
        entitle=records.entitle(session_id) if not ctx.title else None,
    )
