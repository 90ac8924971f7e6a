"""``geode db``: the store's schema, one migration branch per package that owns tables."""

from __future__ import annotations

import asyncio

import typer

from geode.cli._common import load_typed
from geode.cli.app import app

db_app = typer.Typer(help="The store's schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply the store's migrations, every branch (back the database up first)."""
    from geode.store import branch_heads, upgrade

    settings, _ = load_typed()
    settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    heads = asyncio.run(upgrade(settings.store_url))
    typer.echo(f"store at revision {', '.join(heads)}")
    for branch, head in sorted(branch_heads().items()):
        typer.echo(f"  {branch}: {head}")


@db_app.command("status")
def db_status() -> None:
    """Say which migration branch of the store is at which revision (changes nothing).

    Exit 1 when a branch is behind this GEODE's head (run `geode db upgrade`).
    """
    from geode.store import status

    settings, _ = load_typed()
    branches = asyncio.run(status(settings.store_url))
    behind = False
    for b in branches:
        state = "current" if b.is_current else "behind: run `geode db upgrade`"
        behind = behind or not b.is_current
        typer.echo(f"{b.branch}: {b.current or 'none'} (head {b.head}, {state})")
    if behind:
        raise typer.Exit(1)
