"""``geode sessions``: inspect sessions and their records."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from geode.cli._common import load_typed, open_store
from geode.cli.app import app

if TYPE_CHECKING:
    from geode.store import Store

sessions_app = typer.Typer(help="Inspect sessions and their records.", no_args_is_help=True)
app.add_typer(sessions_app, name="sessions")


@sessions_app.command("list")
def sessions_list(
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many, newest first.")] = 50,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List sessions, most recently updated first."""
    settings, _ = load_typed()

    async def main() -> list[Any]:
        async with await open_store(settings) as store:
            return list(await store.sessions.list(limit))

    rows = asyncio.run(main())
    if json_out:
        typer.echo(json.dumps([_session_json(r) for r in rows], ensure_ascii=False))
        return
    if not rows:
        typer.echo("no sessions yet")
        return
    typer.echo(f"{'ID':32}  {'UPDATED (UTC)':16}  {'SOURCE':9}  {'STATUS':9}  {'MODEL':20}  TITLE")
    for r in rows:
        typer.echo(f"{r.id:32}  {r.updated_at:%Y-%m-%d %H:%M}  {session_source(r):9}  "
                   f"{r.status:9}  {r.model[:20]:20}  {r.title or '-'}")


def session_source(r: Any) -> str:
    """cli / a platform's name / schedule / mcp: recorded at creation;
    sessions from before that are told by their mode and id."""
    recorded = r.metadata.get("source") if isinstance(r.metadata, dict) else None
    if recorded:
        return str(recorded)
    if r.mode == "SCHEDULER":
        return "schedule"
    if r.mode == "DAEMON":
        return r.id.split(":", 1)[0] if ":" in r.id else "channel"
    return "cli"


def _session_json(r: Any) -> dict[str, Any]:
    return {"id": r.id, "status": r.status, "mode": r.mode, "model": r.model,
            "title": r.title, "source": session_source(r),
            "workspace": r.metadata.get("workspace") if isinstance(r.metadata, dict) else None,
            "created_at": r.created_at.isoformat(),
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
    all_turns: Annotated[bool, typer.Option(
        "--all", help="Also list every turn, the rewound ones marked, and its rewinds.")] = False,
) -> None:
    """One session: status, checkpoint head, approvals (requested / decided / expired, by
    whom), effect receipts (uncertain ones flagged) and the attachments its channel thread
    received (saved where, or refused and why). With --all: every turn it ran, those a
    rewind took back marked (their conversation is kept in the session the rewind names)."""
    from geode.plugins import load_part, plugins

    settings, _ = load_typed()

    async def main() -> dict[str, Any]:
        async with await open_store(settings) as store:
            record = await _require_session(store, session_id)
            # what plugins add (the chat layer: the attachments its thread received)
            details: dict[str, Any] = {"attachments": []}
            for plugin in plugins():
                if plugin.session_details:
                    details.update(await load_part(plugin.session_details)(store, session_id))
            checkpoints = await store.checkpoints.list(session_id, limit=1000)
            receipts = await store.receipts.list_for(session_id)
            approvals = [r for r in await store.timeline.list(session_id)
                         if r.kind.startswith("approval.")]
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
                              "detail": r.detail, "approved_by": r.approved_by,
                              "approved_by_name": r.approved_by_name} for r in receipts],
                "uncertain": [r.call_id for r in receipts
                              if r.status in ("uncertain", "intended")],
                "approvals": [{"kind": r.kind.removeprefix("approval."),
                               "call_id": r.payload.get("call_id"),
                               "tool": r.payload.get("tool"),
                               "decision": r.payload.get("outcome") or r.payload.get("decision"),
                               "by": r.payload.get("by", ""),
                               "by_id": r.payload.get("by_id", ""),
                               "by_name": r.payload.get("by_name", ""),
                               "resumed": bool(r.payload.get("resumed", False)),
                               "at": r.created_at.isoformat() if r.created_at else None}
                              for r in approvals],
                **details,
                **(await _turns_json(store, session_id, checkpoints) if all_turns else {}),
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
    if info["approvals"]:
        typer.echo(f"  approvals {len(info['approvals'])}")
    for a in info["approvals"]:
        outcome = ((" (resumed after a restart)" if a["resumed"] else "")
                   if a["kind"] == "requested" else f" {a['decision']}")
        by = f" by {a['by']}" if a["by"] else ""
        typer.echo(f"    {(a['at'] or '-')[:19]}  {a['call_id']}  {a['tool']}  "
                   f"{a['kind']}{outcome}{by}")
    if info["attachments"]:
        typer.echo(f"  attachments received {len(info['attachments'])}")
    for a in info["attachments"]:
        where = a["path"] if a["status"] == "saved" else f"refused: {a['reason']}"
        typer.echo(f"    {a['name'] or 'file'}  {a['size']} bytes  {a['status']}  {where}")
    typer.echo(f"  effect receipts {len(info['receipts'])}")
    for r in info["receipts"]:
        flag = "  UNCERTAIN: check the outcome by hand" if r["call_id"] in info["uncertain"] else ""
        who = r["approved_by_name"] or r["approved_by"]
        approved = (f"  approved by {who} ({r['approved_by']})" if r["approved_by_name"]
                    else f"  approved by {who}" if who else "")
        typer.echo(f"    {r['call_id']}  {r['tool']}  {r['status']}{approved}{flag}")
    if all_turns:
        _echo_turns(info)


async def _turns_json(store: Store, session_id: str, checkpoints: list[Any]) -> dict[str, Any]:
    """Every turn the chain recorded (rewound ones marked) and the session's rewinds."""
    from geode.rewind import finished_turns

    rewinds = [r for r in await store.timeline.list(session_id, limit=100_000)
               if r.kind == "session.rewound"]
    rewound = {str(t): r.payload.get("archive_session_id", "")
               for r in rewinds for t in r.payload.get("turn_ids", [])}
    current = {str(cp.state.get("turn_id") or cp.turn_id) for cp in finished_turns(checkpoints)}
    seen: dict[str, Any] = {}
    for cp in checkpoints:
        turn_id = str(cp.state.get("turn_id") or cp.turn_id)
        if cp.kind != "rewind" and cp.state.get("last_termination") and turn_id not in seen:
            seen[turn_id] = cp
    turns = [{"turn_id": t, "termination": cp.state.get("last_termination"),
              "rewound": t not in current, "kept_in": rewound.get(t, "")}
             for t, cp in seen.items()]
    return {"turns": turns,
            "rewinds": [{"at": r.created_at.isoformat() if r.created_at else None,
                         "by": r.payload.get("by", ""), "turns": r.payload.get("turns", []),
                         "files": r.payload.get("files", []),
                         "irreversible": r.payload.get("irreversible", []),
                         "archive_session_id": r.payload.get("archive_session_id", "")}
                        for r in rewinds]}


def _echo_turns(info: dict[str, Any]) -> None:
    typer.echo(f"  turns {len(info['turns'])}")
    for n, t in enumerate(info["turns"], 1):
        mark = f"  REWOUND (kept in session {t['kept_in']})" if t["rewound"] else ""
        typer.echo(f"    {n:3}  {t['turn_id']}  {t['termination'] or '-'}{mark}")
    for r in info["rewinds"]:
        typer.echo(f"  rewind {(r['at'] or '-')[:19]} by {r['by'] or '-'}: turn(s) "
                   f"{', '.join(map(str, r['turns']))}, files put back: "
                   f"{', '.join(r['files']) or 'none'}")


@sessions_app.command("timeline")
def sessions_timeline(
    session_id: Annotated[str, typer.Argument(help="The session id.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """The session's append-only timeline: turns, model calls, tool calls (proposed, denied
    by which check, started, finished), verify decisions, channel messages, schedule runs."""
    settings, _ = load_typed()

    async def main() -> list[Any]:
        async with await open_store(settings) as store:
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


@sessions_app.command("transcript")
def sessions_transcript(
    session_id: Annotated[str, typer.Argument(help="The session id.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The session's conversation (user, assistant, tool calls with their outcomes), redacted."""
    from geode.store.transcript import build_transcript, render_transcript

    settings, _ = load_typed()  # registers the credentials the redaction masks

    async def main() -> list[Any]:
        async with await open_store(settings) as store:
            await _require_session(store, session_id)
            restored = await store.checkpointer(session_id).load()
            messages = restored.messages if restored is not None else []
            return list(build_transcript(messages))

    entries = asyncio.run(main())
    if json_out:
        typer.echo(json.dumps([e.to_json() for e in entries], ensure_ascii=False, default=str))
        return
    if not entries:
        typer.echo("no messages yet")
    for line in render_transcript(entries):
        typer.echo(line)


@sessions_app.command("export")
def sessions_export(
    session_id: Annotated[str, typer.Argument(help="The session id.")],
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write to this file instead of stdout.")] = None,
    json_out: Annotated[bool, typer.Option(
        "--json", help='One JSON object ({"records": [...]}) instead of JSON lines.')] = False,
) -> None:
    """The session as JSON lines, redacted: a header, then per turn the user's input, each
    model response, each tool result (with its effect receipt) and each recorded decision.
    `geode replay FILE` reads it (either form)."""
    from geode.replay import load_recording, to_jsonl

    settings, _ = load_typed()  # registers the credentials the redaction masks

    async def main() -> list[str]:
        async with await open_store(settings) as store:
            await _require_session(store, session_id)
            return list(to_jsonl(await load_recording(store, session_id), store.secrets))

    lines = asyncio.run(main())
    if json_out:
        records = ",".join(lines)  # each line is one JSON object already
        text = f'{{"records": [{records}]}}\n'
    else:
        text = "".join(f"{line}\n" for line in lines)
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")


@sessions_app.command("fork")
def sessions_fork(
    session_id: Annotated[str, typer.Argument(help="The session id.")],
    at: Annotated[str | None, typer.Option(
        "--at", help="After this turn: its number (1 = the first) or its id; default the "
        "latest.")] = None,
) -> None:
    """A new session whose conversation is this one's after turn --at (its parent is
    recorded); prints its id. `geode run --session NEW` continues it."""
    from geode.errors import ConfigError
    from geode.replay import fork_session

    settings, _ = load_typed()

    async def main() -> Any:
        async with await open_store(settings) as store:
            await _require_session(store, session_id)
            return await fork_session(store, session_id, at=at)

    try:
        fork = asyncio.run(main())
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(fork.session_id)


@sessions_app.command("rewind")
def sessions_rewind(
    session_id: Annotated[str, typer.Argument(help="The session id.")],
    turns: Annotated[int, typer.Option("--turns", "-n", min=1,
                                       help="How many of its last turns to take back.")] = 1,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation "
                                      "(scripts).")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Take back the session's last --turns turns: its conversation goes back to the
    checkpoint before them, and the workspace files they changed (write_file, edit_file,
    run_bash) are put back. Effects that cannot be undone (files or messages sent, MCP and
    web calls) are listed first, and it asks before it runs. Nothing is deleted: the
    conversation as it was is kept as a session of its own (`geode sessions show ID
    --all`). An unfinished rewind of the session (a process died in it) is finished first."""
    import getpass

    from geode.errors import ConfigError
    from geode.rewind import BlobStore, RewindResult, finish_pending, plan_rewind, rewind
    from geode.store.rewinds import RewindConflictError

    settings, _ = load_typed()
    blobs = BlobStore(settings.home / "rewind")

    async def plan() -> tuple[RewindResult | None, Any]:
        async with await open_store(settings) as store:
            await _require_session(store, session_id)
            finished = await finish_pending(store, blobs, session_id)
            if finished is not None:
                return finished, None
            return None, await plan_rewind(store, blobs, session_id, turns=turns)

    async def run(planned: Any) -> RewindResult:
        async with await open_store(settings) as store:
            return await rewind(store, blobs, planned, by=f"cli:{getpass.getuser()}")

    try:
        finished, planned = asyncio.run(plan())
        if finished is not None:
            _echo_rewound(finished, json_out, resumed=True)
            return
        if not json_out:
            _echo_plan(planned)
        if planned.blockers:
            if json_out:
                typer.echo(json.dumps({"plan": planned.to_json(), "rewound": None}))
            typer.echo("error: this rewind cannot run: " + "; ".join(planned.blockers),
                       err=True)
            raise typer.Exit(1)
        if not yes and not typer.confirm("Rewind?", default=False, err=json_out):
            typer.echo("nothing was changed", err=True)
            raise typer.Exit(1)
        result = asyncio.run(run(planned))
    except (ConfigError, RewindConflictError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if json_out:
        typer.echo(json.dumps({"plan": planned.to_json(), "rewound": result.to_json()},
                              ensure_ascii=False))
        return
    _echo_rewound(result, json_out=False, resumed=False)


def _echo_plan(plan: Any) -> None:
    numbers = ", ".join(str(t.number) for t in plan.turns)
    typer.echo(f"rewind session {plan.session_id}: turn(s) {numbers} are taken back")
    files = plan.files
    typer.echo(f"  files put back ({len(files)}): {', '.join(files) if files else 'none'}")
    if plan.irreversible:
        typer.echo("  effects that cannot be undone:")
        for effect in plan.irreversible:
            typer.echo(f"    {effect.describe()}")
    else:
        typer.echo("  effects that cannot be undone: none")


def _echo_rewound(result: Any, json_out: bool, *, resumed: bool) -> None:
    if json_out:
        typer.echo(json.dumps({"rewound": result.to_json(), "resumed": resumed},
                              ensure_ascii=False))
        return
    what = "finished the unfinished rewind of" if resumed else "rewound"
    typer.echo(f"{what} session {result.session_id}: turn(s) "
               f"{', '.join(map(str, result.turns))}; files put back: "
               f"{', '.join(result.restored) or 'none'}")
    if result.archive_session_id:
        typer.echo(f"  the conversation as it was: session {result.archive_session_id}")
