"""Helpers shared by the daemon-side command modules (``cmd_serve``, ``cmd_ask``, ``cmd_repl``,
``cmd_schedule``, ``cmd_sessions``, ``cmd_db``). Light at import time: heavy modules load inside."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from geode.settings import Secrets, Settings
    from geode.store import Store

# A JSON script of model replies: serve / repl use the offline scripted model (tests, demos).
SCRIPT_ENV = "GEODE_SCRIPTED_MODEL"


def load_typed() -> tuple[Settings, Secrets]:
    from geode.cli._runtime import load

    settings, secrets_ = load()
    return settings, secrets_  # type: ignore[return-value]  # load() is typed loosely


async def open_store(settings: Settings) -> Store:
    from geode.store import open_store

    settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return await open_store(settings.store_url)
