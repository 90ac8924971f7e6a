"""``geode db``: the store's schema."""

from __future__ import annotations

import asyncio

import typer

from geode.cli._common import load_typed
from geode.cli.app import app

db_app = typer.Typer(help="The store's schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply the store's migrations (back the database up first)."""
    from geode.store import upgrade

    settings, _ = load_typed()
    settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    head = asyncio.run(upgrade(settings.store_url))
    typer.echo(f"store at revision {head}")
