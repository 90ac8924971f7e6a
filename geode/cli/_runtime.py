"""Shared plumbing of the in-process commands (settings → logging → runtime → session)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geode.cli import _state
from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.logging import configure_logging
from geode.loop import LoopEvent, TurnResult, model_wait_text
from geode.loop.events import ModelRetrying, ModelWaiting, TextDelta, ToolProposed, ToolResulted
from geode.policy import Mode
from geode.secret_redaction import redact_text
from geode.settings import PROJECT_CONFIG, Settings, load_settings

if TYPE_CHECKING:
    from geode.store import Store

__all__ = ["RunOptions", "load", "run_once"]


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    prompt: str
    model: str | None = None
    path: str | None = None
    session_id: str | None = None
    #: continue this workspace's last CLI session (``-c``)
    continue_last: bool = False
    mcp_configs: tuple[Path, ...] = ()
    allow_tools: tuple[str, ...] = ()
    deny_tools: tuple[str, ...] = ()
    max_rounds: int | None = None
    time_budget_s: float | None = None
    workspace: Path = Path(".")
    demo: bool = False
    stream: bool = False
    mode: Mode = "HEADLESS"


def load(cwd: Path | None = None) -> tuple[Settings, object]:
    settings, secrets = load_settings(cwd=cwd)
    configure_logging(
        json=_state.LOG_JSON or settings.log_json,
        level=_state.LOG_LEVEL or settings.log_level,
    )
    return settings, secrets


async def _print_wait(ev: LoopEvent) -> None:
    note = model_wait_text(ev.kind, ev.data)
    if note is not None:  # on stderr: stdout carries only the answer (or --json)
        sys.stderr.write(f"{note}\n")
        sys.stderr.flush()


class _StreamPrinter:
    """Streams text to stdout redacted: held back to the end of each line, since a secret
    can arrive split over several deltas (and never spans a line break)."""

    def __init__(self) -> None:
        self._pending = ""

    async def __call__(self, ev: LoopEvent) -> None:
        match ev:
            case ModelWaiting() | ModelRetrying():
                self.flush()
                sys.stderr.write("\n")  # after streamed text, the note starts its own line
                await _print_wait(ev)
            case TextDelta(text=text):
                self._pending += text
                head, sep, tail = self._pending.rpartition("\n")
                if sep:
                    self._pending = tail
                    sys.stdout.write(redact_text(head + sep))
                    sys.stdout.flush()
            case ToolProposed(name=name):
                self.flush()
                sys.stderr.write(f"\n→ {name}\n")
            case ToolResulted(status=status, text=text) if status != "ok":
                sys.stderr.write(f"  ✗ {status}: {redact_text(text)[:200]}\n")
            case _:
                pass

    def flush(self) -> None:
        if self._pending:
            sys.stdout.write(redact_text(self._pending))
            sys.stdout.flush()
            self._pending = ""


def _project_mcp_section(workspace: Path) -> dict[str, Any] | None:
    """The project's ``[mcp]`` table (:func:`geode.mcp.trust.project_mcp_section`); a project
    without a config file does not import ``geode.mcp`` (its config models, ~6 ms) to say so."""
    if not (workspace / PROJECT_CONFIG).is_file():
        return None
    from geode.mcp.trust import project_mcp_section

    return project_mcp_section(workspace)


async def run_once(opts: RunOptions) -> TurnResult:
    settings, secrets = load_settings(cwd=opts.workspace)
    configure_logging(
        json=_state.LOG_JSON or settings.log_json,
        level=_state.LOG_LEVEL or settings.log_level,
    )
    provider = None
    if opts.demo:
        from geode.demo import demo_provider

        provider = demo_provider()
    mcp = None
    if opts.mcp_configs or settings.mcp or _project_mcp_section(opts.workspace) is not None:
        from geode.mcp import MCPServerManager

        mcp = MCPServerManager.from_settings(
            settings, secrets, extra_files=opts.mcp_configs, project_dir=opts.workspace
        )
    runtime = await Runtime.create(settings=settings, secrets=secrets, mcp=mcp)
    printer = _StreamPrinter()
    async with runtime:
        session_id = opts.session_id
        if opts.continue_last:
            session_id = await last_session_id(runtime.store, opts.workspace)
        session = await runtime.open_session(
            SessionContext(
                mode=opts.mode,
                workspace=opts.workspace,
                session_id=session_id,
                model=opts.model,
                path=opts.path,
                allow_tools=opts.allow_tools,
                deny_tools=opts.deny_tools,
                max_rounds=opts.max_rounds,
                time_budget_s=opts.time_budget_s,
                provider=provider,
                stream=opts.stream,
                # a stalled model shows "waiting for the model" even without --stream
                on_event=printer if opts.stream else _print_wait,
            )
        )
        # at the start, so a long run can be followed (`geode sessions timeline ID`)
        _announce_session(session.session_id, json=_state.LOG_JSON or settings.log_json)
        try:
            return await session.run(opts.prompt)
        finally:
            printer.flush()


def _announce_session(session_id: str, *, json: bool) -> None:
    """The session id on stderr: a human line, or with ``--log-json`` (stderr is then a
    JSON-lines stream) a record of its own with ``session_id`` as a field, whatever the
    log level, so the stream stays parseable line by line."""
    if json:
        import json as jsonlib
        from datetime import UTC, datetime

        record = {"event": "run.session", "session_id": session_id, "level": "info",
                  "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z")}
        sys.stderr.write(jsonlib.dumps(record) + "\n")
    else:
        sys.stderr.write(f"(session {session_id})\n")
    sys.stderr.flush()


async def last_session_id(store: Store | None, workspace: Path) -> str:
    """``-c``: the id of this workspace's most recent terminal session (run, repl, ask)."""
    from geode.errors import ConfigError

    found = None
    if store is not None:
        found = await store.sessions.latest_in(str(workspace), source="cli")
    if found is None:
        raise ConfigError(f"No earlier session in {workspace} to continue; leave out "
                          "-c/--continue to start one (`geode sessions list` shows them all).")
    return found.id
