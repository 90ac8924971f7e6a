"""``geode ask``: a prompt sent to the running ``geode serve`` over its IPC socket."""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Annotated, Any

import typer

from geode.cli._terminal import print_event, terminal_answer
from geode.cli.app import app
from geode.cli.cmd_run import (
    AllowOpt,
    BudgetOpt,
    ContinueOpt,
    CwdOpt,
    DenyOpt,
    ModelOpt,
    RoundsOpt,
    SessionOpt,
    read_prompt,
    resolve_cwd,
)


@app.command()
def ask(
    prompt: Annotated[str, typer.Argument(help="The task; `-` reads it from stdin.")],
    session: SessionOpt = None,
    continue_last: ContinueOpt = False,
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

    if session and continue_last:
        from geode.errors import ConfigError

        raise ConfigError("Use --session ID or -c/--continue, not both.")
    where = resolve_cwd(cwd)
    if continue_last:
        session = asyncio.run(_last_session(where))
    sock = geode_home() / "cli.sock"
    frame: dict[str, Any] = {
        "type": "run", "id": f"cli-{secrets.token_hex(4)}", "prompt": read_prompt(prompt),
        "session_id": session, "model": model, "allow_tools": list(allow_tool or ()),
        "deny_tools": list(deny_tool or ()), "max_rounds": max_rounds,
        "time_budget_s": time_budget, "stream": stream and not json_out and not jsonl,
        "cwd": str(where),
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


async def _last_session(workspace: Path) -> str:
    """``ask -c``: the daemon's store holds the sessions; read it here, as `sessions` does."""
    from geode.cli._common import load_typed, open_store
    from geode.cli._runtime import last_session_id

    settings, _ = load_typed()
    async with await open_store(settings) as store:
        return await last_session_id(store, workspace)


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
            if kind == "event" and not jsonl:
                print_event(str(msg.get("kind")), dict(msg.get("data") or {}),
                            streamed=bool(frame.get("stream")), retries=True,
                            notes_only=json_out)
            elif kind == "approval_request":
                answer = await terminal_answer(
                    str(msg.get("tool")), msg.get("input"), str(msg.get("reason", "")),
                    bool(msg.get("always_allowed", True)), str(msg.get("summary") or ""),
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
