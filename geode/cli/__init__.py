"""The ``geode`` command line (Typer). Commands import their heavy modules lazily."""

from geode.cli.app import app, main

__all__ = ["app", "main"]
