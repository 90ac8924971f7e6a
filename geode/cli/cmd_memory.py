"""``geode memory list / show / rm``: what the bot remembers (``geode.memory``), for the
operator: every person's user memory and every binding's channel memory."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from geode.cli._common import load_typed, open_store
from geode.cli.app import app

if TYPE_CHECKING:
    from geode.store.memory import MemoryEntry

memory_app = typer.Typer(help="What the bot remembers about people and for channels.",
                         no_args_is_help=True)
app.add_typer(memory_app, name="memory")


def _when(ms: int | None) -> str:
    if ms is None:
        return "never"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _qualified(value: str, what: str) -> str:
    platform, sep, rest = value.partition(":")
    if not sep or not platform or not rest:
        from geode.errors import ConfigError

        raise ConfigError(f"{what} {value!r} is not PLATFORM:ID (a platform's name, a colon, "
                          "an id)")
    return value


@memory_app.command("list")
def memory_list(
    binding: Annotated[str | None, typer.Option(
        "--binding", help="Only this binding's channel memory (PLATFORM:CHANNEL).")] = None,
    user: Annotated[str | None, typer.Option(
        "--user", help="Only this person's user memory (PLATFORM:USER_ID).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List memory entries (all of them, or a binding's and / or a person's), oldest first."""
    from geode.store.memory import MemoryStore

    settings, _ = load_typed()
    wanted = [("channel", _qualified(binding, "--binding"))] if binding else []
    wanted += [("user", _qualified(user, "--user"))] if user else []

    async def main() -> list[MemoryEntry]:
        async with await open_store(settings) as store:
            memory = MemoryStore(store=store)
            if not wanted:
                return await memory.list()
            return await memory.for_owners(wanted)  # type: ignore[arg-type]  # literal scopes

    entries = asyncio.run(main())
    if json_out:
        typer.echo(json.dumps([e.as_dict() for e in entries], ensure_ascii=False))
        return
    if not entries:
        typer.echo("nothing remembered")
    for e in entries:
        typer.echo(f"{e.id}  {e.scope:<7}  {e.owner}  used {e.use_count}x  "
                   f"updated {_when(e.updated_at)}\n    {e.text}")


@memory_app.command("show")
def memory_show(
    entry_id: Annotated[str, typer.Argument(metavar="ID", help="The entry's id (m...).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show one entry: its text, whose it is, who wrote it, in which session, its use."""
    from geode.store.memory import MemoryStore

    settings, _ = load_typed()

    async def main() -> MemoryEntry | None:
        async with await open_store(settings) as store:
            return await MemoryStore(store=store).get(entry_id)

    entry = asyncio.run(main())
    if entry is None:
        typer.echo(f"no memory entry {entry_id!r}", err=True)
        raise typer.Exit(1)
    if json_out:
        typer.echo(json.dumps(entry.as_dict(), ensure_ascii=False))
        return
    rows: list[tuple[str, Any]] = [
        ("id", entry.id), ("scope", entry.scope), ("owner", entry.owner),
        ("text", entry.text), ("created", f"{_when(entry.created_at)} by {entry.created_by}"),
        ("updated", f"{_when(entry.updated_at)} by {entry.updated_by}"),
        ("session", entry.session_id or "-"),
        ("used", f"{entry.use_count} turn(s), last {_when(entry.last_used_at)}")]
    for key, value in rows:
        typer.echo(f"{key + ':':<9}{value}")


@memory_app.command("rm")
def memory_rm(
    entry_id: Annotated[str, typer.Argument(metavar="ID", help="The entry's id (m...).")],
) -> None:
    """Remove one entry (recorded on the timeline of the session that wrote it)."""
    import getpass

    from geode.store.memory import MemoryAudit, MemoryStore

    settings, _ = load_typed()

    async def main() -> bool:
        async with await open_store(settings) as store:
            memory = MemoryStore(store=store)
            entry = await memory.get(entry_id)
            if entry is None:
                return False
            audit = MemoryAudit(by=f"cli:{getpass.getuser()}", session_id=entry.session_id,
                                via="cli")
            return bool(await memory.remove(entry_ids=[entry_id], audit=audit))

    if not asyncio.run(main()):
        typer.echo(f"no memory entry {entry_id!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"removed {entry_id}")
