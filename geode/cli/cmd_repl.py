"""``geode repl``: an interactive session in this terminal (approvals asked here)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from geode.cli._common import SCRIPT_ENV, load_typed
from geode.cli._terminal import TerminalApprover, print_event, read_line
from geode.cli.app import app
from geode.cli.cmd_run import (
    AllowOpt,
    ContinueOpt,
    CwdOpt,
    DenyOpt,
    ModelOpt,
    SessionOpt,
    resolve_cwd,
)

if TYPE_CHECKING:
    from geode.daemon.runtime import Runtime
    from geode.daemon.session import Session
    from geode.loop import LoopEvent

_REPL_HELP = "/help  /new  /status  /model [ID]  /exit"
_REPL_COMMANDS = """\
/help        this list
/new         start a new session (same model and tools)
/status      session, model, messages, last turn and its tokens
/model       the model in use; /model ID switches this session to ID (`geode models`)
/exit        quit (also /quit, Ctrl-D, or Ctrl-C at the prompt); Ctrl-C during a turn
             stops the turn (checkpointed) and the REPL goes on"""


@app.command()
def repl(
    session: SessionOpt = None,
    continue_last: ContinueOpt = False,
    model: ModelOpt = None,
    allow_tool: AllowOpt = None,
    deny_tool: DenyOpt = None,
    cwd: CwdOpt = None,
    demo: Annotated[bool, typer.Option("--demo", help="Offline scripted demo model.")] = False,
) -> None:
    """Interactive session in this terminal (approvals asked here)."""
    if session and continue_last:
        from geode.errors import ConfigError

        raise ConfigError("Use --session ID or -c/--continue, not both.")
    try:
        asyncio.run(_repl(session_id=session, continue_last=continue_last, model=model,
                          allow=tuple(allow_tool or ()), deny=tuple(deny_tool or ()),
                          workspace=resolve_cwd(cwd), demo=demo))
    except KeyboardInterrupt:
        typer.echo("\ninterrupted (every finished round is checkpointed)", err=True)
        raise typer.Exit(130) from None


async def _repl(*, session_id: str | None, continue_last: bool, model: str | None,
                allow: tuple[str, ...], deny: tuple[str, ...], workspace: Path,
                demo: bool) -> None:
    from geode.cli._runtime import last_session_id
    from geode.daemon.runtime import Runtime
    from geode.daemon.session import SessionContext

    settings, secrets_ = load_typed()
    history = settings.home / "repl_history"
    _enable_history(history)
    provider_factory = _repl_provider(demo)

    async def on_event(ev: LoopEvent) -> None:
        print_event(ev.kind, ev.data, streamed=True)

    def context(sid: str | None, mdl: str | None) -> SessionContext:
        return SessionContext(
            mode="REPL", workspace=workspace, session_id=sid, model=mdl, allow_tools=allow,
            deny_tools=deny, approver=TerminalApprover(), on_event=on_event, stream=True,
            provider=provider_factory() if provider_factory else None,
        )

    mcp = None
    if settings.mcp:
        from geode.mcp import MCPServerManager

        mcp = MCPServerManager.from_settings(settings, secrets_, project_dir=workspace)
    runtime = await Runtime.create(settings=settings, secrets=secrets_, mcp=mcp)
    try:
        async with runtime:
            if continue_last:
                session_id = await last_session_id(runtime.store, workspace)
            current = await runtime.open_session(context(session_id, model))
            shown = "the offline demo model" if provider_factory else f"model {current.model}"
            typer.echo(f"geode repl: session {current.session_id}, {shown}. {_REPL_HELP}",
                       err=True)
            while True:
                line = await _prompt()
                if line is None:  # Ctrl-D or Ctrl-C at the prompt: a normal way out
                    typer.echo("", err=True)
                    break
                line = line.strip()
                if not line:
                    continue
                if line.startswith("/"):
                    nxt = await _repl_command(line, current, runtime, context,
                                              fixed_model=provider_factory is not None)
                    if nxt is None:
                        break
                    current = nxt
                    continue
                with _ctrl_c_stops(current):
                    result = await current.run(line)
                typer.echo("")
                if not result.ok:
                    typer.echo(f"[{result.termination.value}] {result.detail}", err=True)
    finally:
        _save_history(history)  # whatever ended the REPL, the lines typed stay


async def _prompt() -> str | None:
    """One line typed at ``geode>``; None for end of input or Ctrl-C at the prompt.

    Ctrl-C is taken as a signal here (the read runs in a thread), so it ends the REPL
    cleanly, with its history saved, instead of unwinding it as KeyboardInterrupt.
    """
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    read = asyncio.ensure_future(read_line(lambda: input("geode> ")))
    wait_ctrl_c = asyncio.ensure_future(interrupted.wait())
    previous = signal.getsignal(signal.SIGINT)
    try:
        loop.add_signal_handler(signal.SIGINT, interrupted.set)
        handled = True
    except (NotImplementedError, RuntimeError, ValueError):
        handled = False  # not the main thread / Windows: Ctrl-C raises as before
    try:
        await asyncio.wait([read, wait_ctrl_c], return_when=asyncio.FIRST_COMPLETED)
    finally:
        wait_ctrl_c.cancel()
        if handled:
            loop.remove_signal_handler(signal.SIGINT)
            signal.signal(signal.SIGINT, previous)
    if not read.done():
        read.cancel()  # the reading thread is a daemon: it ends with the process
        return None
    try:
        return read.result()
    except EOFError:
        return None


@contextlib.contextmanager
def _ctrl_c_stops(session: Session) -> Iterator[None]:
    """While a turn runs, Ctrl-C stops the turn (checkpointed, reason ``cancelled``) and the
    REPL goes on; at the prompt it quits as before. Where the loop cannot take SIGINT
    (Windows, not the main thread) Ctrl-C keeps quitting."""
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGINT)
    try:
        loop.add_signal_handler(signal.SIGINT, session.cancel)
    except (NotImplementedError, RuntimeError, ValueError):
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous)  # asyncio.run's own handler, not the default


async def _repl_command(
    line: str, current: Session, runtime: Runtime,
    context: Callable[[str | None, str | None], Any], *, fixed_model: bool = False,
) -> Session | None:
    cmd, _, arg = line.partition(" ")
    if cmd in ("/exit", "/quit"):
        return None
    if cmd in ("/help", "/?"):
        typer.echo(_REPL_COMMANDS, err=True)
        return current
    if cmd == "/new":
        nxt = await runtime.open_session(context(None, current.ctx.model))
        typer.echo(f"new session {nxt.session_id}", err=True)
        return nxt
    if cmd == "/model":
        if fixed_model:
            typer.echo("this REPL runs the offline demo (scripted) model, which cannot be "
                       "switched; start `geode repl` without --demo to use /model ID", err=True)
            return current
        if not arg.strip():
            typer.echo(f"model: {current.model} (use /model ID to switch)", err=True)
            return current
        from geode.errors import ConfigError

        try:
            nxt = await runtime.open_session(context(current.session_id, arg.strip()))
        except ConfigError as exc:
            typer.echo(f"error: {exc}", err=True)
            return current
        typer.echo(f"model {nxt.model} (session {nxt.session_id})", err=True)
        return nxt
    if cmd == "/status":
        last = current.loop.last_result
        usage = f"{last.usage.input_tokens} in / {last.usage.output_tokens} out" if last else "-"
        typer.echo(
            f"session {current.session_id}  mode REPL  model {current.model}\n"
            f"messages {len(current.loop.messages)}  last turn "
            f"{last.termination.value if last else '-'}  tokens {usage}",
            err=True,
        )
        return current
    typer.echo(f"unknown command {cmd}; {_REPL_HELP}", err=True)
    return current


def _repl_provider(demo: bool) -> Callable[[], Any] | None:
    script = os.environ.get(SCRIPT_ENV)
    if script:
        from geode.daemon.serve import scripted_factory

        return scripted_factory(Path(script))
    if demo:
        from geode.demo import demo_provider

        return demo_provider
    return None


def _enable_history(path: Path) -> None:
    try:
        import readline
    except ImportError:  # not on every platform; history is a comfort, not a feature
        return
    if path.is_file():
        try:
            readline.read_history_file(str(path))
        except OSError:
            pass


def _save_history(path: Path) -> None:
    try:
        import readline

        readline.set_history_length(1000)
        readline.write_history_file(str(path))
    except (ImportError, OSError):
        pass
