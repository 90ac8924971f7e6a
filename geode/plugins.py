"""Packages that add to the harness (the chat layer is one), found through an entry point group.

A package registers one :class:`HarnessPlugin` as a line of its distribution's metadata::

    [project.entry-points."geode.plugins"]
    NAME = "PACKAGE.MODULE:PLUGIN"

The plugin names each part it adds as ``"module:attribute"``; a part is imported when it is
used, never before:

- :attr:`~HarnessPlugin.commands`: ``geode`` sub-commands (a Typer app, or a function for a
  single command), imported when that command runs, or for help and completion;
- :attr:`~HarnessPlugin.preflight`: start checks, run by ``geode serve`` and ``geode doctor``;
- :attr:`~HarnessPlugin.doctor`: further ``geode doctor`` checks (reading the store);
- :attr:`~HarnessPlugin.env_lines`: lines ``geode init`` writes into the new ``.env``;
- :attr:`~HarnessPlugin.connectors`: what ``geode serve`` hosts (channel connectors);
- :attr:`~HarnessPlugin.session_details`: what ``geode sessions show`` adds to a session;
- :attr:`~HarnessPlugin.demo`: what ``geode serve --demo`` adds to a bare configuration.

So ``geode run`` reads no plugin at all, and a harness installed without the chat layer runs
(its commands are simply not there). The plugin's own module must stay cheap to import: it
holds the spec, its parts hold the code.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import Any

from geode.errors import ConfigError

__all__ = ["GROUP", "HarnessPlugin", "command_owner", "load_part", "plugin_commands",
           "plugins", "reset_plugins"]

#: the entry point group each plugin package registers its :class:`HarnessPlugin` under
GROUP = "geode.plugins"


@dataclass(frozen=True, kw_only=True)
class HarnessPlugin:
    """What one package adds to the harness; every part is ``"module:attribute"`` ("" none).

    Attributes:
        name: the plugin's name (its entry point's), for messages.
        commands: each ``geode`` sub-command it adds and its Typer app (or command function).
        preflight: ``(settings, secrets) -> list[Check]``: start checks
            (:class:`geode.cli.preflight.Check`), none raising.
        doctor: ``async (settings) -> list[Check]``: ``geode doctor``'s further checks.
        env_lines: ``() -> list[str]``: lines for a new ``.env`` (comments, ``NAME=``).
        connectors: ``(host, settings, secrets) -> list[Connector]``: hosted by
            ``geode serve`` (:class:`geode.daemon.serve.Connector`).
        session_details: ``async (store, session_id) -> dict``: keys ``geode sessions show``
            adds to a session (its ``--json`` object; the text report reads them too).
        demo: ``(settings, *, workspace, throwaway) -> (settings, announce | None)``:
            what ``geode serve --demo`` serves offline; ``announce`` is ``async (daemon) -> lines``,
            printed once the daemon is up (the chat layer: a web chat and its sign-in link).
    """

    name: str
    commands: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    preflight: str = ""
    doctor: str = ""
    env_lines: str = ""
    connectors: str = ""
    session_details: str = ""
    demo: str = ""


_lock = threading.Lock()


@cache
def plugins() -> tuple[HarnessPlugin, ...]:
    """Every installed plugin, in entry point order (each name once, the first found wins).

    Raises:
        ConfigError: a plugin does not import, or what it registered is not a
            :class:`HarnessPlugin`: a channel layer that silently did not load would leave
            the bot deaf with nothing said.
    """
    from geode._entry_points import entry_points  # parses only the dists naming GROUP

    out: dict[str, HarnessPlugin] = {}
    for ep in entry_points(GROUP):
        if ep.name in out:
            continue
        try:
            plugin = ep.load()
        except Exception as exc:
            raise ConfigError(f"GEODE plugin {ep.name!r} ({ep.value}) failed to load: {exc}. "
                              "Fix or uninstall the package that provides it.") from exc
        if not isinstance(plugin, HarnessPlugin):
            raise ConfigError(f"GEODE plugin {ep.name!r} ({ep.value}) is not a HarnessPlugin; "
                              "fix or uninstall the package that provides it.")
        out[ep.name] = plugin
    return tuple(out.values())


def plugin_commands() -> dict[str, str]:
    """Every plugin's sub-commands and where each is (``"module:attribute"``), in order; a
    command a plugin adds twice, or one the harness has, is the first plugin's."""
    found: dict[str, str] = {}
    for plugin in plugins():
        for command, ref in plugin.commands.items():
            found.setdefault(command, ref)
    return found


def command_owner(command: str) -> str | None:
    """Where plugin command ``command`` is (``"module:attribute"``); None: no plugin has it."""
    return plugin_commands().get(command)


_parts: dict[str, Any] = {}


def load_part(ref: str) -> Any:
    """The object ``ref`` (``"module:attribute"``) names, imported now (once).

    Raises:
        ImportError: its module (or one it imports) cannot be imported.
        AttributeError: the module has no such attribute.
    """
    with _lock:
        if ref in _parts:
            return _parts[ref]
    module, _, attribute = ref.partition(":")
    found = getattr(importlib.import_module(module), attribute)
    with _lock:
        return _parts.setdefault(ref, found)


def reset_plugins() -> None:
    """Forget the plugins (a distribution was installed or removed: tests)."""
    plugins.cache_clear()
    with _lock:
        _parts.clear()
