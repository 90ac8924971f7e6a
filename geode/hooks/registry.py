"""Decision hooks: user code that may block, rewrite or annotate at five points.

Points and the results each accepts (anything else is a misbehaving hook):

=================  ==========================================================
UserPromptSubmit   ``cont``, ``block``, ``rewrite({"prompt": ...})``, ``add_context``
PreToolUse         ``cont``, ``block``, ``rewrite(args, tool=...)``, ``ask``
PostToolUse        ``cont``, ``add_context``, ``withhold``
PostVerify         ``cont`` / ``accept``, ``revise``
Stop               ``cont``, ``continue_with``
=================  ==========================================================

Hooks of a point run in registration order. ``block`` / ``withhold`` / ``revise`` /
``continue_with`` end the chain; rewrites compose (the next hook sees the rewritten call).

**A hook that raises, times out or returns a result its point does not accept is logged and
treated as the safe choice for its point** (the original system failed open; we do not):

- UserPromptSubmit -> block: a prompt filter that cannot run must not let the prompt through.
- PreToolUse -> block: a guard that cannot run must not let the call through.
- PostToolUse -> withhold: the tool already ran, so information is lost either way; but a
  PostToolUse hook is typically a redaction/DLP filter, and passing its input through when it
  crashed would leak exactly what it exists to stop. The withheld result tells the model the
  tool *did* run, so it does not repeat the effect.
- PostVerify -> revise: a broken verifier must never certify completion; the loop's repair
  budget bounds the extra rounds, then the turn ends "verification failed".
- Stop -> cont (finalize): continuing would run more model rounds (and maybe effects) on
  the word of a hook that failed; stopping does nothing further.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Literal, TypeAlias, cast, get_args, overload

import structlog

from geode._entry_points import entry_points as entry_points  # re-exported: its old home
from geode.errors import ConfigError
from geode.loop.protocols import PromptDecision, TurnInfo

__all__ = [
    "HOOK_POINTS",
    "HookEvent",
    "HookFn",
    "HookPoint",
    "HookPromptGate",
    "HookRegistry",
    "HookResult",
    "PostToolOutcome",
    "PreToolOutcome",
    "PromptOutcome",
    "load_entry_point_hooks",
]

log = structlog.get_logger(__name__)

HookPoint = Literal["UserPromptSubmit", "PreToolUse", "PostToolUse", "PostVerify", "Stop"]
HOOK_POINTS: tuple[HookPoint, ...] = get_args(HookPoint)

Action = Literal[
    "continue", "block", "rewrite", "ask", "add_context", "withhold", "revise", "continue_with"
]

_ALLOWED: dict[HookPoint, frozenset[Action]] = {
    "UserPromptSubmit": frozenset({"continue", "block", "rewrite", "add_context"}),
    "PreToolUse": frozenset({"continue", "block", "rewrite", "ask"}),
    "PostToolUse": frozenset({"continue", "add_context", "withhold"}),
    "PostVerify": frozenset({"continue", "revise"}),
    "Stop": frozenset({"continue", "continue_with"}),
}


@dataclass(frozen=True)
class HookResult:
    """What one hook decided. Build with the classmethods, never by hand."""

    action: Action
    reason: str = ""
    new_input: Mapping[str, Any] | None = None
    new_tool: str | None = None

    @classmethod
    def cont(cls) -> HookResult:
        """Go on unchanged (Stop: finalize)."""
        return cls("continue")

    @classmethod
    def accept(cls) -> HookResult:
        """PostVerify: the answer stands."""
        return cls("continue")

    @classmethod
    def block(cls, reason: str) -> HookResult:
        return cls("block", reason)

    @classmethod
    def rewrite(cls, new_input: Mapping[str, Any], *, tool: str | None = None) -> HookResult:
        """PreToolUse: new arguments (and optionally another tool); UserPromptSubmit:
        ``{"prompt": "..."}``."""
        return cls("rewrite", new_input=MappingProxyType(dict(new_input)), new_tool=tool)

    @classmethod
    def ask(cls, reason: str) -> HookResult:
        """PreToolUse: require a human's approval for this call."""
        return cls("ask", reason)

    @classmethod
    def add_context(cls, text: str) -> HookResult:
        return cls("add_context", text)

    @classmethod
    def withhold(cls, reason: str) -> HookResult:
        """PostToolUse: do not show the result to the model."""
        return cls("withhold", reason)

    @classmethod
    def revise(cls, instruction: str) -> HookResult:
        """PostVerify: reject the answer; the instruction asks for a repair."""
        return cls("revise", instruction)

    @classmethod
    def continue_with(cls, instruction: str) -> HookResult:
        """Stop: do not stop yet; run another round with this instruction."""
        return cls("continue_with", instruction)


@dataclass(frozen=True, kw_only=True)
class HookEvent:
    """What a hook sees. Read-only: a hook changes things only through its result."""

    point: HookPoint
    session_id: str
    turn_id: str
    mode: str = ""
    tool_name: str | None = None
    tool_input: Mapping[str, Any] | None = None
    call_id: str | None = None
    tool_output: str | None = None
    is_error: bool = False
    prompt: str | None = None
    text: str | None = None  # the candidate answer (PostVerify, Stop)

    def to_json(self) -> dict[str, Any]:
        """The Claude Code-style stdin payload for shell hooks."""
        out: dict[str, Any] = {
            "hook_event_name": self.point,
            "session_id": self.session_id,
            "turn_id": self.turn_id,
            "mode": self.mode,
        }
        extra = {
            "tool_name": self.tool_name,
            "tool_input": None if self.tool_input is None else _plain(self.tool_input),
            "tool_use_id": self.call_id,
            "tool_output": self.tool_output,
            "prompt": self.prompt,
            "text": self.text,
        }
        out.update({k: v for k, v in extra.items() if v is not None})
        if self.point == "PostToolUse":
            out["is_error"] = self.is_error
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


HookReturn: TypeAlias = HookResult | None
HookFn: TypeAlias = Callable[[HookEvent], Awaitable[HookReturn] | HookReturn]


@dataclass(frozen=True)
class _Registration:
    point: HookPoint
    fn: HookFn
    matcher: re.Pattern[str] | None
    timeout: float
    name: str

    def matches(self, tool_name: str | None) -> bool:
        if self.matcher is None or tool_name is None:
            return True
        return self.matcher.fullmatch(tool_name) is not None


@dataclass(frozen=True)
class PreToolOutcome:
    """PreToolUse chain result: blocked, or the (maybe rewritten) call and an ask flag."""

    tool_name: str
    tool_input: Mapping[str, Any]
    blocked: str | None = None
    ask: str | None = None
    rewritten: bool = False


@dataclass(frozen=True)
class PostToolOutcome:
    withheld: str | None = None
    context: tuple[str, ...] = ()


@dataclass(frozen=True)
class PromptOutcome:
    prompt: str
    blocked: str | None = None
    context: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Failure:
    """A hook that raised, timed out or answered out of turn."""

    hook: str
    why: str


# The safe result for each point when a hook fails (see the module docstring).
_SAFE: dict[HookPoint, Callable[[_Failure], HookResult]] = {
    "UserPromptSubmit": lambda f: HookResult.block(f"hook {f.hook} failed ({f.why})"),
    "PreToolUse": lambda f: HookResult.block(f"hook {f.hook} failed ({f.why})"),
    "PostToolUse": lambda f: HookResult.withhold(f"hook {f.hook} failed ({f.why})"),
    "PostVerify": lambda f: HookResult.revise(
        f"the verification hook {f.hook} failed ({f.why}); the answer cannot be accepted"
    ),
    "Stop": lambda f: HookResult.cont(),
}


class HookRegistry:
    """Decision hooks by point. Register with :meth:`register` or the :meth:`on` decorator."""

    def __init__(self) -> None:
        self._hooks: dict[HookPoint, list[_Registration]] = {p: [] for p in HOOK_POINTS}

    def register(
        self,
        point: HookPoint,
        fn: HookFn,
        *,
        matcher: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        """Add ``fn`` at ``point``. ``matcher`` is a regex matched against the whole tool
        name (``"*"`` or ``""`` = every tool); it is ignored at points without a tool."""
        if point not in _ALLOWED:
            raise ConfigError(
                f"Unknown hook point {point!r}; expected one of {', '.join(HOOK_POINTS)}."
            )
        compiled: re.Pattern[str] | None = None
        if matcher not in (None, "", "*"):
            try:
                compiled = re.compile(matcher)
            except re.error as exc:
                raise ConfigError(f"Hook matcher {matcher!r} is not a valid regex: {exc}") from exc
        name = getattr(fn, "__qualname__", None) or getattr(fn, "name", None) or repr(fn)
        self._hooks[point].append(
            _Registration(point, fn, compiled, timeout, str(name))
        )

    @overload
    def on(self, point: HookPoint, fn: HookFn, /) -> HookFn: ...
    @overload
    def on(
        self, point: HookPoint, /, *, matcher: str | None = None, timeout: float = 10.0
    ) -> Callable[[HookFn], HookFn]: ...
    def on(
        self,
        point: HookPoint,
        fn: HookFn | None = None,
        /,
        *,
        matcher: str | None = None,
        timeout: float = 10.0,
    ) -> HookFn | Callable[[HookFn], HookFn]:
        """Decorator form: ``@hooks.on("PreToolUse")`` or ``@hooks.on("PreToolUse",
        matcher="write_.*")``; returns the function unchanged."""

        def deco(f: HookFn) -> HookFn:
            self.register(point, f, matcher=matcher, timeout=timeout)
            return f

        return deco(fn) if fn is not None else deco

    def hooks_for(self, point: HookPoint, tool_name: str | None = None) -> int:
        """How many hooks would run at ``point`` for ``tool_name``."""
        return sum(1 for r in self._hooks[point] if r.matches(tool_name))

    async def _call(self, reg: _Registration, event: HookEvent) -> HookResult:
        """Run one hook; any failure becomes the point's safe result."""
        try:
            raw = await asyncio.wait_for(_invoke(reg.fn, event), reg.timeout)
        except TimeoutError:
            failure = _Failure(reg.name, f"timed out after {reg.timeout:g} s")
        except Exception as exc:  # a hook must never break the boundary
            log.warning("hook raised", point=reg.point, hook=reg.name, exc_info=True)
            failure = _Failure(reg.name, f"raised {type(exc).__name__}")
        else:
            result = HookResult.cont() if raw is None else raw
            if isinstance(result, HookResult) and result.action in _ALLOWED[reg.point]:
                return result
            failure = _Failure(reg.name, f"returned {result!r}, not valid at {reg.point}")
        log.warning("hook failed; using the safe choice", point=reg.point, hook=failure.hook,
                    why=failure.why)
        return _SAFE[reg.point](failure)

    async def pre_tool_use(self, event: HookEvent) -> PreToolOutcome:
        """Run the PreToolUse chain; rewrites compose, a block ends the chain."""
        assert event.tool_name is not None and event.tool_input is not None
        tool, args = event.tool_name, event.tool_input
        ask: str | None = None
        rewritten = False
        for reg in self._hooks["PreToolUse"]:
            if not reg.matches(tool):
                continue
            current = _with(event, tool_name=tool, tool_input=args)
            res = await self._call(reg, current)
            if res.action == "block":
                return PreToolOutcome(tool, args, blocked=res.reason or f"blocked by {reg.name}")
            if res.action == "ask":
                ask = ask or res.reason or f"hook {reg.name} asks for approval"
            elif res.action == "rewrite":
                assert res.new_input is not None
                tool, args, rewritten = res.new_tool or tool, res.new_input, True
        return PreToolOutcome(tool, args, ask=ask, rewritten=rewritten)

    async def post_tool_use(self, event: HookEvent) -> PostToolOutcome:
        context: list[str] = []
        for reg in self._hooks["PostToolUse"]:
            if not reg.matches(event.tool_name):
                continue
            res = await self._call(reg, event)
            if res.action == "withhold":
                return PostToolOutcome(withheld=res.reason or f"withheld by {reg.name}")
            if res.action == "add_context" and res.reason:
                context.append(res.reason)
        return PostToolOutcome(context=tuple(context))

    async def user_prompt_submit(self, event: HookEvent) -> PromptOutcome:
        prompt = event.prompt or ""
        context: list[str] = []
        for reg in self._hooks["UserPromptSubmit"]:
            res = await self._call(reg, _with(event, prompt=prompt))
            if res.action == "block":
                return PromptOutcome(prompt, blocked=res.reason or f"blocked by {reg.name}")
            if res.action == "rewrite":
                new = (res.new_input or {}).get("prompt")
                if not isinstance(new, str):
                    res = _SAFE["UserPromptSubmit"](_Failure(reg.name, "rewrite without prompt"))
                    return PromptOutcome(prompt, blocked=res.reason)
                prompt = new
            elif res.action == "add_context" and res.reason:
                context.append(res.reason)
        return PromptOutcome(prompt, context=tuple(context))

    async def post_verify(self, event: HookEvent) -> str | None:
        """The first ``revise`` instruction, or None when every hook accepts."""
        return await self._first(event, "revise")

    async def stop(self, event: HookEvent) -> str | None:
        """The first ``continue_with`` instruction, or None to finalize."""
        return await self._first(event, "continue_with")

    async def _first(self, event: HookEvent, action: Action) -> str | None:
        for reg in self._hooks[event.point]:
            res = await self._call(reg, event)
            if res.action == action:
                return res.reason or f"requested by hook {reg.name}"
        return None


async def _invoke(fn: HookFn, event: HookEvent) -> object:
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callable objects (ShellHook)
    ):
        result: object = fn(event)
    else:
        # Sync hooks run in a thread so they cannot block the loop; a timed-out thread
        # runs to completion, but its answer is ignored.
        result = await asyncio.to_thread(cast(Callable[[HookEvent], object], fn), event)
    if inspect.isawaitable(result):
        result = await result
    return result


def _with(event: HookEvent, **changes: Any) -> HookEvent:
    return replace(event, **changes)


class HookPromptGate:
    """UserPromptSubmit hooks as the loop's ``PromptGate``; added context is appended."""

    def __init__(self, *, hooks: HookRegistry) -> None:
        self._hooks = hooks

    async def __call__(self, prompt: str, turn: TurnInfo) -> PromptDecision:
        outcome = await self._hooks.user_prompt_submit(
            HookEvent(
                point="UserPromptSubmit",
                session_id=turn.session_id,
                turn_id=turn.turn_id,
                mode=turn.mode,
                prompt=prompt,
            )
        )
        if outcome.blocked is not None:
            return PromptDecision(blocked=True, reason=outcome.blocked)
        text = "\n\n".join((outcome.prompt, *outcome.context))
        return PromptDecision(prompt=text if text != prompt else None)


def load_entry_point_hooks(registry: HookRegistry, *, group: str = "geode.hooks") -> list[str]:
    """Load hook plugins: each entry point names ``fn(registry: HookRegistry) -> None``.

    Returns the loaded entry point names. A plugin that fails to load is a ConfigError
    naming it: a security hook that silently did not load would fail open.
    """
    loaded: list[str] = []
    for ep in entry_points(group=group):
        try:
            install = ep.load()
            install(registry)
        except Exception as exc:
            raise ConfigError(
                f"Hook plugin {ep.name!r} ({ep.value}) failed to load: {exc}. "
                f"Fix or uninstall the package that provides it."
            ) from exc
        loaded.append(ep.name)
        log.info("hook plugin loaded", plugin=ep.name)
    return loaded
