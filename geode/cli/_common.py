"""Helpers shared by the daemon-side command modules (``cmd_serve``, ``cmd_ask``, ``cmd_repl``,
``cmd_schedule``, ``cmd_sessions``, ``cmd_db``). Light at import time: heavy modules load inside."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from geode.settings import BindingSettings, Secrets, Settings
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


def check_binding(binding: BindingSettings, settings: Settings, *,
                  where: str | None = None) -> None:
    """A binding's model and tools exist (ConfigError with close matches otherwise): checked
    when it is written or read at start, so no channel turn fails on a typo. ``where``
    names it in the message (default: ``binding PLATFORM CHANNEL``)."""
    from geode.errors import ConfigError
    from geode.mcp.config import servers_section
    from geode.providers.catalog import resolve_generation_model
    from geode.tools.names import check_tool_names, known_tool_names

    where = where or f"binding {binding.platform} {binding.channel}"
    if binding.model:
        resolve_generation_model(binding.model)  # judge-only ids never serve a channel
    for model_id in binding.models:  # what /model may pick: the same check, at start
        try:
            resolve_generation_model(model_id)
        except ConfigError as exc:
            raise ConfigError(f"models: {exc}") from exc
    servers = list(servers_section(settings.mcp))
    check_tool_names(binding.tools or (), known=known_tool_names(),
                     mcp_servers=servers, what=f"{where}: tools")
    check_tool_names(binding.approve, known=known_tool_names(),
                     mcp_servers=servers, what=f"{where}: approve")
