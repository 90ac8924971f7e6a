"""The chat layer as a plugin of the harness: registered in the ``geode.plugins`` entry point
group (pyproject.toml), read by :mod:`geode.plugins`. Each part is imported when used: the
commands when they run, the checks by ``geode serve`` / ``geode doctor``, the connectors by
``geode serve`` (each configured platform's SDK by its own builder)."""

from __future__ import annotations

from types import MappingProxyType

from geode.plugins import HarnessPlugin

__all__ = ["PLUGIN"]

PLUGIN = HarnessPlugin(
    name="chat",
    commands=MappingProxyType({
        "bindings": "bots.cli.channels:bindings_app",
        "pairing": "bots.cli.channels:pairing_app",
        "queue": "bots.cli.queue:queue_app",
        "console": "bots.cli.console:console_app",
    }),
    preflight="bots.cli.checks:preflight",
    doctor="bots.cli.checks:doctor",
    env_lines="bots.cli.checks:env_lines",
    connectors="bots:build_connectors",
    session_details="bots.cli.sessions:session_details",
    demo="bots.webchat.demo:prepare",
)
