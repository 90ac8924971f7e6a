"""Daemon-side commands: ``serve``, ``ask``, ``repl``, ``schedule``, ``sessions``, ``db``.

Heavy modules (the store, aiohttp, the runtime) are imported inside the commands, so
``geode --help`` stays fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from geode.cli.app import app
from geode.cli.cmd_run import (
    AllowOpt,
    BudgetOpt,
    CwdOpt,
    DenyOpt,
    ModelOpt,
    RoundsOpt,
    SessionOpt,
    read_prompt,
)

if TYPE_CHECKING:
    from geode.daemon.factory import Runtime, Session
    from geode.executor.decisions import ApprovalRequest
    from geode.loop import LoopEvent
    from geode.settings import Secrets, Settings
    from geode.store import Store

schedule_app = typer.Typer(help="Scheduled prompts, run by `geode serve` in SCHEDULER mode.",
                           no_args_is_help=True)
sessions_app = typer.Typer(help="Inspect sessions and their records.", no_args_is_help=True)
db_app = typer.Typer(help="The store's schema.", no_args_is_help=True)
app.add_typer(schedule_app, name="schedule")
app.add_typer(sessions_app, name="sessions")
app.add_typer(db_app, name="db")

_SCRIPT_ENV = "GEODE_SCRIPTED_MODEL"


def _load() -> tuple[Settings, Secrets]:
    from geode.cli._runtime import load

    settings, secrets_ = load()
    return settings, secrets_  # type: ignore[return-value]  # load() is typed loosely


# -- geode serve ----------------------------------------------------------------------------


@app.command()
def serve(
    demo: Annotated[
        bool, typer.Option("--demo", help="Every session uses the offline scripted demo model.")
    ] = False,
    cwd: Annotated[
        Path | None,
        typer.Option("--cwd", help="Workspace of sessions (default: $GEODE_HOME/workspace)."),
    ] = None,
    drain_timeout: Annotated[
        float, typer.Option("--drain-timeout", min=0.0,
                            help="Seconds running turns get to finish on SIGTERM.")
    ] = 30.0,
) -> None:
    """Run the daemon: IPC socket, channel connectors, scheduler, health endpoint."""
    from geode.daemon.serve import Daemon, ProviderFactory, describe, scripted_factory

    settings, secrets_ = _load()
    factory: ProviderFactory | None = None
    script = os.environ.get(_SCRIPT_ENV)
    if script:
        factory = scripted_factory(Path(script))
    elif demo:
        from geode.demo import demo_provider

        factory = demo_provider
    daemon = Daemon(settings=settings, secrets=secrets_, provider_factory=factory,
                    workspace=cwd.resolve() if cwd else None, drain_timeout_s=drain_timeout,
                    settle_heap=True)
    from bots import build_connectors

    # Every enabled [channels.*] connector runs inside this daemon, on its lanes and store.
    for connector in build_connectors(daemon, settings, secrets_):
        daemon.add_connector(connector)

    async def main() -> None:
        await daemon.start()
        for line in describe(daemon):
            typer.echo(line, err=True)
        await daemon.serve_forever()
        typer.echo("geode serve: stopped", err=True)

    asyncio.run(main())


# -- terminal approvals (ask, repl) ---------------------------------------------------------


async def _terminal_answer(tool: str, args: Any, reason: str, always_ok: bool) -> str:
    shown = json.dumps(args, ensure_ascii=False, default=str)
    if len(shown) > 600:
        shown = shown[:600] + " ..."
    choices = "[y]es / [n]o / [a]lways for this session" if always_ok else "[y]es / [n]o"
    sys.stderr.write(f"\n? approve {tool}: {reason}\n  input: {shown}\n  {choices}: ")
    sys.stderr.flush()
    line = await _read_line(sys.stdin.readline)
    word = line.strip().lower()
    if word in ("y", "yes"):
        return "allow"
    if word in ("a", "always") and always_ok:
        return "always"
    if not line:
        sys.stderr.write("(no answer: denied)\n")
    return "deny"


async def _read_line(read: Callable[[], str]) -> str:
    """Run a blocking terminal read in a daemon thread.

    Not ``asyncio.to_thread``: its pool thread is joined at exit, so Ctrl-C while a prompt
    waits would hang until the user pressed Enter.
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[str] = loop.create_future()

    def deliver(value: str | None, exc: BaseException | None) -> None:
        if fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value or "")

    def work() -> None:
        try:
            value = read()
        except BaseException as exc:  # EOFError / KeyboardInterrupt go to the awaiting side
            loop.call_soon_threadsafe(deliver, None, exc)
        else:
            loop.call_soon_threadsafe(deliver, value, None)

    threading.Thread(target=work, name="geode-stdin", daemon=True).start()
    return await fut


def _print_event(kind: str, data: dict[str, Any], *, streamed: bool) -> None:
    if kind == "text_delta":
        sys.stdout.write(str(data.get("text", "")))
        sys.stdout.flush()
    elif kind == "assistant_text" and not streamed:
        sys.stdout.write(str(data.get("text", "")) + "\n")
        sys.stdout.flush()
    elif kind == "tool_call":
        sys.stderr.write(f"→ {data.get('name')}\n")
    elif kind == "tool_result" and data.get("status") != "ok":
        sys.stderr.write(f"  ✗ {data.get('status')}: {str(data.get('text', ''))[:300]}\n")


# -- geode ask ------------------------------------------------------------------------------


@app.command()
def ask(
    prompt: Annotated[str, typer.Argument(help="The task; `-` reads it from stdin.")],
    session: SessionOpt = None,
    model: ModelOpt = None,
    allow_tool: AllowOpt = None,
    deny_tool: DenyOpt = None,
    max_rounds: RoundsOpt = None,
    time_budget: BudgetOpt = None,
    cwd: CwdOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    jsonl: Annotated[
        bool, typer.Option("--jsonl", help="Print every protocol frame as a JSON line.")
    ] = False,
    stream: Annotated[bool, typer.Option("--stream/--no-stream", help="Stream text.")] = True,
) -> None:
    """Send a prompt to the running `geode serve`; stream its events; answer approvals."""
    from geode.settings import geode_home

    sock = geode_home() / "cli.sock"
    frame: dict[str, Any] = {
        "type": "run", "id": f"cli-{secrets.token_hex(4)}", "prompt": read_prompt(prompt),
        "session_id": session, "model": model, "allow_tools": list(allow_tool or ()),
        "deny_tools": list(deny_tool or ()), "max_rounds": max_rounds,
        "time_budget_s": time_budget, "stream": stream and not json_out and not jsonl,
        "cwd": str((cwd or Path.cwd()).resolve()),
    }
    try:
        code = asyncio.run(_ask(sock, {k: v for k, v in frame.items() if v is not None},
                                json_out=json_out, jsonl=jsonl))
    except KeyboardInterrupt:
        # the turn belongs to the daemon: it finishes and is checkpointed without us
        typer.echo("\ninterrupted; the turn goes on in the daemon (see `geode sessions list`)",
                   err=True)
        raise typer.Exit(130) from None
    raise typer.Exit(code)


async def _ask(sock: Path, frame: dict[str, Any], *, json_out: bool, jsonl: bool) -> int:
    from geode.daemon.ipc import DaemonNotRunning, IPCClient

    try:
        client = await IPCClient.connect(sock)
    except DaemonNotRunning as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    try:
        await client.send(frame)
        while True:
            msg = await client.recv()
            if msg is None:
                typer.echo("error: the daemon closed the connection", err=True)
                return 1
            if jsonl:
                typer.echo(json.dumps(msg, ensure_ascii=False))
            kind = msg.get("type")
            if kind == "event" and not jsonl and not json_out:
                _print_event(str(msg.get("kind")), dict(msg.get("data") or {}),
                             streamed=bool(frame.get("stream")))
            elif kind == "approval_request":
                answer = await _terminal_answer(
                    str(msg.get("tool")), msg.get("input"), str(msg.get("reason", "")),
                    bool(msg.get("always_allowed", True)),
                )
                await client.send({"type": "approval", "request_id": msg.get("request_id"),
                                   "answer": answer})
            elif kind == "result":
                return _finish(msg, json_out=json_out, jsonl=jsonl,
                               streamed=bool(frame.get("stream")))
            elif kind == "error":
                if not jsonl:
                    typer.echo(f"error: {msg.get('message')}", err=True)
                return 2 if msg.get("code") in ("config", "protocol") else 1
    finally:
        await client.close()


def _finish(msg: dict[str, Any], *, json_out: bool, jsonl: bool, streamed: bool) -> int:
    ok = msg.get("termination") == "natural"
    if json_out:
        typer.echo(json.dumps({k: v for k, v in msg.items() if k not in ("type", "id")},
                              ensure_ascii=False))
    elif not jsonl:
        if streamed:
            typer.echo("")
        if not ok:
            typer.echo(f"[{msg.get('termination')}] {msg.get('detail', '')}", err=True)
        typer.echo(f"(session {msg.get('session_id')})", err=True)
    return 0 if ok else 1


# -- geode repl -----------------------------------------------------------------------------

_REPL_HELP = "/new  /status  /model ID  /exit"


@app.command()
def repl(
    session: SessionOpt = None,
    model: ModelOpt = None,
    allow_tool: AllowOpt = None,
    deny_tool: DenyOpt = None,
    cwd: CwdOpt = None,
    demo: Annotated[bool, typer.Option("--demo", help="Offline scripted demo model.")] = False,
) -> None:
    """Interactive session in this terminal (approvals asked here)."""
    try:
        asyncio.run(_repl(session_id=session, model=model, allow=tuple(allow_tool or ()),
                          deny=tuple(deny_tool or ()), workspace=(cwd or Path.cwd()).resolve(),
                          demo=demo))
    except KeyboardInterrupt:
        typer.echo("\ninterrupted (every finished round is checkpointed)", err=True)
        raise typer.Exit(130) from None


class _TerminalApprover:
    async def __call__(self, request: ApprovalRequest) -> Any:
        return await _terminal_answer(request.tool, dict(request.args), request.reason,
                                      request.always_allowed)


async def _repl(*, session_id: str | None, model: str | None, allow: tuple[str, ...],
                deny: tuple[str, ...], workspace: Path, demo: bool) -> None:
    from geode.daemon.factory import Runtime, SessionContext

    settings, secrets_ = _load()
    _enable_history(settings.home / "repl_history")
    provider_factory = _repl_provider(demo)

    async def on_event(ev: LoopEvent) -> None:
        _print_event(ev.kind, ev.data, streamed=True)

    def context(sid: str | None, mdl: str | None) -> SessionContext:
        return SessionContext(
            mode="REPL", workspace=workspace, session_id=sid, model=mdl, allow_tools=allow,
            deny_tools=deny, approver=_TerminalApprover(), on_event=on_event, stream=True,
            provider=provider_factory() if provider_factory else None,
        )

    mcp = None
    if settings.mcp:
        from geode.mcp import MCPServerManager

        mcp = MCPServerManager.from_settings(settings, secrets_, project_dir=workspace)
    runtime = await Runtime.create(settings=settings, secrets=secrets_, mcp=mcp)
    async with runtime:
        current = await runtime.open_session(context(session_id, model))
        typer.echo(f"geode repl: session {current.session_id}, model {current.model}. "
                   f"{_REPL_HELP}", err=True)
        while True:
            try:
                line = await _read_line(lambda: input("geode> "))
            except EOFError:
                break
            line = line.strip()
            if not line:
                continue
            if line.startswith("/"):
                nxt = await _repl_command(line, current, runtime, context)
                if nxt is None:
                    break
                current = nxt
                continue
            with _ctrl_c_stops(current):
                result = await current.run(line)
            typer.echo("")
            if not result.ok:
                typer.echo(f"[{result.termination.value}] {result.detail}", err=True)
    _save_history(settings.home / "repl_history")


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
    context: Callable[[str | None, str | None], Any],
) -> Session | None:
    cmd, _, arg = line.partition(" ")
    if cmd in ("/exit", "/quit"):
        return None
    if cmd == "/new":
        nxt = await runtime.open_session(context(None, current.ctx.model))
        typer.echo(f"new session {nxt.session_id}", err=True)
        return nxt
    if cmd == "/model":
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
    script = os.environ.get(_SCRIPT_ENV)
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


# -- geode schedule ----------------------------------------------------------------------------


async def _open_store(settings: Settings) -> Store:
    from geode.store import open_store

    settings.home.mkdir(parents=True, exist_ok=True)
    return await open_store(settings.store_url)


@schedule_app.command("add")
def schedule_add(
    cron: Annotated[str, typer.Argument(help="Cron expression ('0 9 * * 1-5'), read in --tz.")],
    prompt: Annotated[str, typer.Argument(help="The prompt to run.")],
    session: Annotated[
        str | None, typer.Option("--session", "-s", help="Run in this session every time.")
    ] = None,
    model: ModelOpt = None,
    tz: Annotated[
        str | None,
        typer.Option("--tz", help="IANA time zone of the cron, e.g. Europe/Berlin (default UTC)."),
    ] = None,
) -> None:
    """Add a scheduled prompt; prints its id and first run."""
    from geode.daemon.scheduler import JobStore

    settings, _ = _load()

    async def main() -> Any:
        async with await _open_store(settings) as store:
            return await JobStore(store=store).add(cron, prompt, session_id=session, model=model,
                                                   tz=tz)

    job = asyncio.run(main())
    typer.echo(f"{job.id}  next run {_utc(job.next_run)}{_local(job.next_run, job.tz)}")


@schedule_app.command("list")
def schedule_list(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List scheduled prompts."""
    from dataclasses import asdict

    from geode.daemon.scheduler import JobStore

    settings, _ = _load()

    async def main() -> Any:
        async with await _open_store(settings) as store:
            return await JobStore(store=store).list()

    jobs = asyncio.run(main())
    if json_out:
        typer.echo(json.dumps([asdict(j) for j in jobs], ensure_ascii=False))
        return
    if not jobs:
        typer.echo("no scheduled prompts (add one with `geode schedule add CRON PROMPT`)")
    for j in jobs:
        last = f"last {_utc(j.last_run)} {j.last_status}" if j.last_run else "never ran"
        cron = f"{j.cron!r} {j.tz}" if j.tz else repr(j.cron)
        typer.echo(f"{j.id}  {cron}  next {_utc(j.next_run)}  runs {j.run_count}  {last}"
                   f"\n    {j.prompt[:100]!r}" + (f"  session {j.session_id}" if j.session_id
                                                  else ""))


@schedule_app.command("remove")
def schedule_remove(job_id: Annotated[str, typer.Argument(help="The job id.")]) -> None:
    """Remove a scheduled prompt."""
    from geode.daemon.scheduler import JobStore

    settings, _ = _load()

    async def main() -> bool:
        async with await _open_store(settings) as store:
            return await JobStore(store=store).remove(job_id)

    if not asyncio.run(main()):
        typer.echo(f"error: no scheduled prompt {job_id!r}; `geode schedule list` shows them",
                   err=True)
        raise typer.Exit(2)
    typer.echo(f"removed {job_id}")


def _utc(ts: int | None) -> str:
    from datetime import UTC, datetime

    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _local(ts: int, tz: str | None) -> str:
    """`` (10:00 Europe/Berlin)`` for a job with a time zone, else nothing."""
    if tz is None:
        return ""
    import zoneinfo
    from datetime import datetime

    return f" ({datetime.fromtimestamp(ts, zoneinfo.ZoneInfo(tz)):%Y-%m-%d %H:%M} {tz})"


# -- geode sessions -----------------------------------------------------------------------------


@sessions_app.command("list")
def sessions_list(
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many, newest first.")] = 50,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List sessions, most recently updated first."""
    settings, _ = _load()

    async def main() -> list[Any]:
        async with await _open_store(settings) as store:
            return list(await store.sessions.list(limit))

    rows = asyncio.run(main())
    if json_out:
        typer.echo(json.dumps([_session_json(r) for r in rows], ensure_ascii=False))
        return
    if not rows:
        typer.echo("no sessions yet")
    for r in rows:
        typer.echo(f"{r.id}  {r.status:9}  {r.mode:9}  {r.model:24}  "
                   f"{r.updated_at:%Y-%m-%d %H:%M}  {r.title[:40]}")


def _session_json(r: Any) -> dict[str, Any]:
    return {"id": r.id, "status": r.status, "mode": r.mode, "model": r.model,
            "title": r.title, "created_at": r.created_at.isoformat(),
            "updated_at": r.updated_at.isoformat(), "parent_session_id": r.parent_session_id}


async def _require_session(store: Store, session_id: str) -> Any:
    record = await store.sessions.get(session_id)
    if record is None:
        typer.echo(f"error: no session {session_id!r}; `geode sessions list` shows them",
                   err=True)
        raise typer.Exit(2)
    return record


@sessions_app.command("show")
def sessions_show(
    session_id: Annotated[str, typer.Argument(help="The session id.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """One session: status, checkpoint head, and effect receipts (uncertain ones flagged)."""
    settings, _ = _load()

    async def main() -> dict[str, Any]:
        async with await _open_store(settings) as store:
            record = await _require_session(store, session_id)
            checkpoints = await store.checkpoints.list(session_id, limit=1000)
            receipts = await store.receipts.list_for(session_id)
            return {
                **_session_json(record),
                "checkpoints": len(checkpoints),
                "last_checkpoint": (
                    {"seq": checkpoints[-1].seq, "status": checkpoints[-1].status,
                     "kind": checkpoints[-1].kind, "turn_id": checkpoints[-1].turn_id,
                     "message_count": checkpoints[-1].message_count,
                     "last_termination": checkpoints[-1].state.get("last_termination")}
                    if checkpoints else None
                ),
                "receipts": [{"call_id": r.call_id, "tool": r.tool, "status": r.status,
                              "detail": r.detail} for r in receipts],
                "uncertain": [r.call_id for r in receipts
                              if r.status in ("uncertain", "intended")],
            }

    info = asyncio.run(main())
    if json_out:
        typer.echo(json.dumps(info, ensure_ascii=False))
        return
    last = info["last_checkpoint"]
    typer.echo(f"session {info['id']}  status {info['status']}  mode {info['mode']}  "
               f"model {info['model']}")
    typer.echo(f"  checkpoints {info['checkpoints']}"
               + (f", last #{last['seq']} {last['kind']} {last['status']} "
                  f"({last['message_count']} messages)" if last else ""))
    typer.echo(f"  effect receipts {len(info['receipts'])}")
    for r in info["receipts"]:
        flag = "  UNCERTAIN: check the outcome by hand" if r["call_id"] in info["uncertain"] else ""
        typer.echo(f"    {r['call_id']}  {r['tool']}  {r['status']}{flag}")


@sessions_app.command("timeline")
def sessions_timeline(
    session_id: Annotated[str, typer.Argument(help="The session id.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """The session's append-only timeline (turns, tool calls, denials, schedule runs)."""
    settings, _ = _load()

    async def main() -> list[Any]:
        async with await _open_store(settings) as store:
            await _require_session(store, session_id)
            return list(await store.timeline.list(session_id))

    rows = asyncio.run(main())
    for r in rows:
        if json_out:
            typer.echo(json.dumps({"id": r.id, "turn_id": r.turn_id, "kind": r.kind,
                                   "correlation_id": r.correlation_id, "payload": r.payload,
                                   "created_at": r.created_at.isoformat() if r.created_at
                                   else None}, ensure_ascii=False, default=str))
        else:
            when = f"{r.created_at:%H:%M:%S}" if r.created_at else "-"
            typer.echo(f"{when}  {r.kind:24} {r.turn_id:16} "
                       f"{json.dumps(r.payload, ensure_ascii=False, default=str)[:120]}")


# -- geode db -----------------------------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply the store's migrations (back the database up first)."""
    from geode.store import upgrade

    settings, _ = _load()
    settings.home.mkdir(parents=True, exist_ok=True)
    head = asyncio.run(upgrade(settings.store_url))
    typer.echo(f"store at revision {head}")
