"""``geode console``: a one-time sign-in link for the web console, and its sessions.

Works on the store whether ``geode serve`` runs or not: the link and the sessions are rows
(``bots.store.console``) the running console reads. The chat layer's plugin
(:mod:`bots.plugin`) adds the command to ``geode``.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from geode.cli._common import load_typed, open_store

if TYPE_CHECKING:
    from bots.store import ConsoleSession

__all__ = ["console_app"]

console_app = typer.Typer(help="The operator console: sign-in links and sessions.",
                          no_args_is_help=True)
sessions_app = typer.Typer(help="Signed-in console sessions (revoke ID ends one).",
                           invoke_without_command=True)
console_app.add_typer(sessions_app, name="sessions")


@console_app.command("link")
def console_link(
    as_: Annotated[str, typer.Option(
        "--as", metavar="PLATFORM:USER_ID",
        help="The chat identity to sign in as (an operator, or a binding's approver).")],
) -> None:
    """Print a one-time sign-in link (valid 10 minutes, used once)."""
    from bots.console import Identity, issue_link
    from bots.store.console import ConsoleLinkLimitError
    from geode.errors import ConfigError

    try:
        who = Identity.parse(as_)
    except ValueError as exc:
        raise ConfigError(f"--as: {exc}") from exc
    settings, _ = load_typed()

    async def main() -> str:
        async with await open_store(settings) as store:
            return await issue_link(store, settings, who, via="cli")

    try:
        url = asyncio.run(main())
    except ConsoleLinkLimitError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if not settings.console.enabled:
        typer.echo("note: [console] enabled is not true: `geode serve` does not serve the "
                   "console yet", err=True)
    typer.echo(url)
    typer.echo(f"Open it within 10 minutes, once; it signs in as {who}.", err=True)


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


async def _list(include_ended: bool) -> list[ConsoleSession]:
    from bots.store import ConsoleSessions

    settings, _ = load_typed()
    async with await open_store(settings) as store:
        return await ConsoleSessions(store=store).list(include_ended=include_ended)


@sessions_app.callback()
def sessions_list(
    ctx: typer.Context,
    all_: Annotated[bool, typer.Option("--all", help="Ended and revoked ones too.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Signed-in console sessions, newest first."""
    if ctx.invoked_subcommand is not None:
        return
    rows = asyncio.run(_list(all_))
    if json_out:
        typer.echo(json.dumps([
            {"id": s.id, "identity": s.identity, "signed_in_at": s.signed_in_at,
             "expires_at": s.expires_at, "revoked_at": s.revoked_at, "remote": s.remote,
             "user_agent": s.user_agent} for s in rows], ensure_ascii=False))
        return
    if not rows:
        typer.echo("no console sessions")
        return
    for s in rows:
        state = f"revoked {_when(s.revoked_at)}" if s.revoked_at else f"until {_when(s.expires_at)}"
        typer.echo(f"{s.id}  {s.identity:<24} signed in {_when(s.signed_in_at)}  {state}  "
                   f"{s.remote}")


@sessions_app.command("revoke")
def sessions_revoke(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="The session's id.")],
) -> None:
    """End a session at once: its browser is signed out."""
    from bots.store import ConsoleSessions

    settings, _ = load_typed()

    async def main() -> bool:
        async with await open_store(settings) as store:
            done = await ConsoleSessions(store=store).revoke(session_id)
            if done:
                await store.timeline.append(
                    session_id="console", turn_id="", kind="console.revoke",
                    payload={"action": "revoke", "by": "cli", "console_session": session_id})
            return done

    if not asyncio.run(main()):
        typer.echo(f"error: no active console session {session_id!r} "
                   "(`geode console sessions` lists them)", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {session_id}")
