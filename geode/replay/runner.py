"""Replay one recording against this build and compare every decision.

The session is rebuilt through the same factory as every entry point (its mode, its tool
policy, this build's checks), in a throwaway folder: a copy of its workspace, a store of its
own, a home of its own (nothing is written to the operator's). Each recorded turn runs with
its recorded user input and its recorded model responses (:class:`RecordedModel`); the file
tools and ``run_bash`` (in its sandbox) act on the copy; everything that would reach the
world answers from its recorded result; nothing is sent to a platform. The replay's timeline
is then read with the same reader as the recording's (:mod:`geode.replay.decisions`).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geode.daemon.port_values import SessionOverrides
from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.errors import ConfigError
from geode.policy import MODE_POLICIES, Mode
from geode.replay.decisions import Difference, compare_turn
from geode.replay.recording import Recording
from geode.replay.stand_ins import RecordedApprover, RecordedModel, replay_tools

if TYPE_CHECKING:
    from geode.settings import BindingSettings, Secrets, Settings
    from geode.tools.base import ToolDef

__all__ = ["ReplayPolicy", "SessionReplay", "replay_all", "replay_recording"]


@dataclass(frozen=True, kw_only=True)
class ReplayPolicy:
    """The tool flags a replay adds to each session's own policy (``--allow-tool`` /
    ``--deny-tool``)."""

    allow_tools: tuple[str, ...] = ()
    deny_tools: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SessionReplay:
    """The outcome of replaying one session."""

    session_id: str
    turns: int
    differences: tuple[Difference, ...] = ()
    #: what the reader should know about how it was replayed (an empty workspace, ...)
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "turns": self.turns,
                "differences": [d.to_json() for d in self.differences],
                "notes": list(self.notes)}


def _mode(recording: Recording) -> Mode:
    mode = recording.mode
    if mode not in MODE_POLICIES:
        raise ConfigError(f"session {recording.session_id!r}: unknown mode {mode!r}")
    return mode


def _binding(settings: Settings, scope: str) -> BindingSettings | None:
    for b in settings.bindings:
        if f"{b.platform}:{b.channel}" == scope:
            return b
    return None


def _overrides(recording: Recording, settings: Settings, policy: ReplayPolicy,
               mode: Mode) -> tuple[SessionOverrides, tuple[str, ...], list[str]]:
    """The session's tool policy under ``settings``: its binding's lists as this config
    writes them (the recorded ones when the config has no such binding), plus the flags.
    Returns (overrides, allow_tools, notes)."""
    recorded = recording.policy
    notes: list[str] = []
    tools: list[str] | None = list(recorded["tools"]) if "tools" in recorded else None
    approve = list(recorded.get("approve", ()))
    computer_use = bool(recorded.get("computer_use", False))
    actions: dict[str, frozenset[str]] = {}
    scope = recording.binding
    binding = _binding(settings, scope) if scope else None
    if binding is not None:
        tools, approve = binding.tools, list(binding.approve)
        computer_use = binding.computer_use is True
        if "computer" in binding.approve:
            actions = {"computer": frozenset(binding.approve_computer_actions)}
    elif scope:
        notes.append(f"binding {scope} is not in this config: its recorded tool lists apply")
    allow = tuple(dict.fromkeys([*recorded.get("allow_tools", ()), *policy.allow_tools]))
    if mode in ("DAEMON", "SCHEDULER") and policy.allow_tools:
        # an unattended operator session takes no flags: the name joins its allow-list
        if tools is None:
            raise ConfigError(
                f"--allow-tool: session {recording.session_id!r} runs under its binding's "
                "mode defaults (no `tools` list); replay it with a --config whose binding "
                "lists the tools instead.")
        tools = list(dict.fromkeys([*tools, *policy.allow_tools]))
        allow = ()
    return (SessionOverrides(tools=tools, approve=tuple(approve), computer_use=computer_use,
                             approve_actions=actions), allow, notes)


def _copy_workspace(recording: Recording, into: Path) -> list[str]:
    """Copy the session's workspace as it is now; notes when it cannot be."""
    source = Path(recording.workspace) if recording.workspace else None
    if source is not None and source.is_dir():
        shutil.copytree(source, into, symlinks=True, ignore_dangling_symlinks=True)
        return []
    into.mkdir()
    return [f"workspace {recording.workspace or '(none recorded)'} not found: replayed in "
            "an empty folder"]


async def replay_all(
    recordings: Sequence[Recording],
    *,
    settings: Settings,
    secrets: Secrets,
    policy: ReplayPolicy = ReplayPolicy(),
    tools: Sequence[ToolDef] | None = None,
) -> list[SessionReplay]:
    """:func:`replay_recording` for each recording, in order. Each gets a store of its own,
    copied from one migrated here (migrating a store costs more than replaying most
    sessions)."""
    from geode.store import open_store

    with tempfile.TemporaryDirectory(prefix="geode-replay-store-") as tmp:
        template = Path(tmp) / "empty.db"
        await (await open_store(f"sqlite:///{template}")).aclose()
        return [await replay_recording(r, settings=settings, secrets=secrets, policy=policy,
                                       tools=tools, template=template) for r in recordings]


async def replay_recording(
    recording: Recording,
    *,
    settings: Settings,
    secrets: Secrets,
    policy: ReplayPolicy = ReplayPolicy(),
    tools: Sequence[ToolDef] | None = None,
    template: Path | None = None,
) -> SessionReplay:
    """Replay ``recording`` under ``settings`` (this build's checks) and compare.

    ``tools``: the registry to replay with (default: the built-ins). ``template``: an
    empty store at this version's schema, copied instead of migrating a new one.

    Raises:
        ConfigError: the session cannot be replayed under these flags (the message says
            why), or a flag names no tool.
    """
    from geode.store import open_store

    if tools is None:
        from geode.tools.builtin import builtin_tools

        tools = builtin_tools()
    mode = _mode(recording)
    overrides, allow, notes = _overrides(recording, settings, policy, mode)
    registry, extra = replay_tools(recording, tools)
    deny = tuple(dict.fromkeys([*recording.policy.get("deny_tools", ()), *policy.deny_tools]))
    with tempfile.TemporaryDirectory(prefix="geode-replay-") as tmp:
        root = Path(tmp)
        notes += _copy_workspace(recording, root / "workspace")
        home = root / "home"
        home.mkdir()
        # a home of its own (its evidence ledger, its system prompt sources); the verify
        # judge is not asked again: a replay never calls a live model
        replayed = settings.model_copy(update={
            "home": home, "verify": settings.verify.model_copy(update={"judge": "none"})})
        db = root / "replay.db"
        if template is not None:
            shutil.copyfile(template, db)
        store = await open_store(f"sqlite:///{db}", migrate=template is None)
        model = RecordedModel()
        async with Runtime(settings=replayed, secrets=secrets, store=store,
                           tools=registry) as runtime:
            session = await runtime.open_session(SessionContext(
                mode=mode, workspace=root / "workspace", model=recording.model,
                provider=model, overrides=overrides, allow_tools=allow, deny_tools=deny,
                approver=RecordedApprover(recording), extra_tools=extra, source="replay",
                title=f"replay of {recording.session_id}"))
            for turn in recording.turns:
                model.start_turn(turn)
                await session.run(turn.input, turn_id=turn.turn_id)
            await store.flush_later()
            rows = await store.timeline.list(session.session_id, limit=10_000_000)
    by_turn: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_turn.setdefault(r.turn_id, []).append({"kind": r.kind, "payload": r.payload})
    differences = []
    for n, turn in enumerate(recording.turns, 1):
        if not any(r["kind"] == "turn.finished" for r in turn.rows):
            # pruned ([store] timeline_retention_days) or lost in a crash: nothing to
            # compare against, which is not a difference
            notes.append(f"turn {n} ({turn.turn_id}): its recorded decisions are gone "
                         "(timeline retention); replayed, not compared")
            continue
        differences += compare_turn(turn.rows, by_turn.get(turn.turn_id, ()),
                                    session_id=recording.session_id, turn=n,
                                    turn_id=turn.turn_id)
    return SessionReplay(session_id=recording.session_id, turns=len(recording.turns),
                         differences=tuple(differences), notes=tuple(notes))
