"""``geode schedule``: scheduled prompts, run by ``geode serve`` in SCHEDULER mode."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer

from geode.cli._common import load_typed, open_store
from geode.cli.app import app
from geode.cli.cmd_run import ModelOpt

schedule_app = typer.Typer(help="Scheduled prompts, run by `geode serve` in SCHEDULER mode.",
                           no_args_is_help=True)
app.add_typer(schedule_app, name="schedule")


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

    settings, _ = load_typed()
    if model is not None:
        from geode.providers.catalog import resolve_generation_model

        # a typo (or a judge-only id) is exit 2 now, with close matches, not at every run
        resolve_generation_model(model)

    async def main() -> Any:
        async with await open_store(settings) as store:
            return await JobStore(store=store).add(cron, prompt, session_id=session, model=model,
                                                   tz=tz)

    job = asyncio.run(main())
    typer.echo(f"{job.id}  next run {_utc(job.next_run)}{_local(job.next_run, job.tz)}")


@schedule_app.command("list")
def schedule_list(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List scheduled prompts, and the reminders set in chat threads (with their thread)."""
    from dataclasses import asdict, replace

    from geode.daemon.scheduler import JobStore

    settings, _ = load_typed()

    async def main() -> Any:
        async with await open_store(settings) as store:
            return await JobStore(store=store).list()

    from geode.secret_redaction import redact_text

    # what a prompt or a reminder says is shown masked, as /reminders shows it in the thread
    # (the stored prompt keeps its words: it is what the model gets when the job runs)
    jobs = [replace(j, prompt=redact_text(j.prompt),
                    last_status=redact_text(j.last_status) if j.last_status else j.last_status)
            for j in asyncio.run(main())]
    if json_out:
        typer.echo(json.dumps([asdict(j) for j in jobs], ensure_ascii=False))
        return
    if not jobs:
        typer.echo("no scheduled prompts (add one with `geode schedule add CRON PROMPT`)")
    for j in jobs:
        last = f"last {_utc(j.last_run)} {j.last_status}" if j.last_run else "never ran"
        cron = "once" if j.once else f"{j.cron!r} {j.tz}" if j.tz else repr(j.cron)
        nxt = f"next {_utc(j.next_run)}{_local(j.next_run, j.tz)}" if j.enabled else "done"
        typer.echo(f"{j.id}  {cron}  {nxt}  runs {j.run_count}  {last}"
                   f"\n    {j.prompt[:100]!r}" + (f"  session {j.session_id}" if j.session_id
                                                  else ""))
        if j.thread is not None:
            typer.echo(f"    {_thread_line(j.thread)}  by {j.created_by or '-'}")


def _thread_line(thread: str) -> str:
    """A reminder's thread as ``binding PLATFORM CHANNEL, thread ROOT`` (its key is
    ``platform:workspace:channel:root``; a channel id may hold colons, the root does not)."""
    platform, _, rest = thread.partition(":")
    _workspace, _, rest = rest.partition(":")
    channel, _, root = rest.rpartition(":")
    return f"reminder in binding {platform} {channel}, thread {root}"


@schedule_app.command("remove")
def schedule_remove(job_id: Annotated[str, typer.Argument(help="The job id.")]) -> None:
    """Remove a scheduled prompt."""
    from geode.daemon.scheduler import JobStore

    settings, _ = load_typed()

    async def main() -> bool:
        async with await open_store(settings) as store:
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
