"""``geode queue``: channel messages waiting for a lane, and ending one unanswered.

Works on the store, whether ``geode serve`` runs or not (any number of replicas): a dropped
message's reply becomes the notice; the daemon delivers it instead of running the message
when it would have got its lanes, or the next start's recovery does. The chat layer's plugin
(:mod:`bots.plugin`) adds the command to ``geode``.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from geode.cli._common import load_typed, open_store

if TYPE_CHECKING:
    from bots.store import QueuedMessage

queue_app = typer.Typer(help="Channel messages waiting for a lane.", no_args_is_help=True)


def _age(received: datetime, now: datetime) -> str:
    s = max(0, int((now - received).total_seconds()))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


async def _queued() -> list[QueuedMessage]:
    from bots.store import ChannelQueue

    settings, _ = load_typed()
    async with await open_store(settings) as store:
        return await ChannelQueue(store=store).list()


@queue_app.command("list")
def queue_list(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Queued channel messages, next to run first (ID is what `geode queue drop` takes)."""
    queued = asyncio.run(_queued())
    now = datetime.now(UTC)
    if json_out:
        out: list[dict[str, Any]] = [
            {"id": q.id, "platform": q.platform, "workspace": q.workspace,
             "channel": q.channel, "thread": q.thread, "sender": q.sender,
             "position": q.position, "received_at": q.received_at.isoformat(),
             "age_s": int((now - q.received_at).total_seconds())} for q in queued]
        typer.echo(json.dumps(out, ensure_ascii=False))
        return
    if not queued:
        typer.echo("no queued messages")
        return
    typer.echo(f"{'ID':>6}  {'POS':>3}  {'AGE':>6}  {'PLATFORM':9} CHANNEL / THREAD")
    for q in queued:
        typer.echo(f"{q.id:>6}  {q.position:>3}  {_age(q.received_at, now):>6}  "
                   f"{q.platform:9} {q.channel} / {q.thread}")


@queue_app.command("drop")
def queue_drop(
    message_id: Annotated[int, typer.Argument(metavar="ID", help="The ID `geode queue list` "
                                              "shows.")],
) -> None:
    """End a queued message unanswered; its thread is told an operator removed it."""
    from bots.store import ChannelQueue

    settings, _ = load_typed()

    async def main() -> bool:
        async with await open_store(settings) as store:
            return await ChannelQueue(store=store).drop(message_id)

    if not asyncio.run(main()):
        typer.echo(f"{message_id}: not a queued message (unknown, already running or "
                   "answered)", err=True)
        raise typer.Exit(1)
    typer.echo(f"dropped {message_id}: its thread is told it was not run")
