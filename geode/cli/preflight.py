"""The configuration checks ``geode serve`` runs before it starts, as values.

``geode serve`` refuses to start (exit 2) when one fails; ``geode doctor`` runs the very
same function and reports every result, so a config that serve refuses makes doctor say
the same words and exit non-zero (a binding's model id used to pass doctor and fail serve).
What is checked: each named agent's and each configured binding's model id and tool names
(an agent no binding uses: all its keys, as a binding's are checked when loaded), then each
plugin's start checks (:attr:`geode.plugins.HarnessPlugin.preflight`; the chat layer's: the
bindings' workspaces and each ``[channels.*]`` section). Nothing here names a platform or
imports the chat layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from geode.errors import ConfigError

if TYPE_CHECKING:
    from geode.settings import Secrets, Settings

__all__ = ["Check", "CheckStatus", "preflight", "refuse_failed"]

CheckStatus = Literal["ok", "warn", "fail"]


@dataclass(frozen=True, kw_only=True)
class Check:
    """One start check's result: ``name`` says what was checked (``binding PLATFORM
    CHANNEL``, ``channel PLATFORM``), ``message`` what was found (the ConfigError's text when
    it failed), ``fix`` how to fix it."""

    name: str
    status: CheckStatus
    message: str
    fix: str = ""


def preflight(settings: Settings, secrets: Secrets) -> list[Check]:
    """Every start check of ``settings``, in order (the harness's, then each plugin's); a
    check never raises.

    Raises:
        ConfigError: a plugin does not load (it names the plugin and its package).
    """
    return [*_agents(settings), *_bindings(settings), *_plugins(settings, secrets)]


def refuse_failed(checks: list[Check]) -> None:
    """Raise one ConfigError naming every failed check (``geode serve``: exit 2)."""
    failed = [c.message for c in checks if c.status == "fail"]
    if failed:
        raise ConfigError("\n".join(failed))


def _bindings(settings: Settings) -> list[Check]:
    from geode.cli._common import check_binding

    out = []
    for b in settings.bindings:  # config.toml's; stored ones were checked when added
        name = f"binding {b.platform} {b.channel}"
        try:
            check_binding(b, settings)
        except ConfigError as exc:
            out.append(Check(name=name, status="fail", message=f"{name}: {exc}",
                             fix="fix the [[bindings]] entry in config.toml; `geode models` "
                                 "lists the model ids"))
        else:
            out.append(Check(name=name, status="ok",
                             message=f"{name}: model {b.model or settings.model.default}, "
                                     "tools known"))
    return out


def _agents(settings: Settings) -> list[Check]:
    """Each named agent's model and tool names, as a binding's; one no binding uses yet is
    also validated whole as a binding's keys are (values, the rules between keys): it fails
    here, not when a binding first names it. (A used agent's keys are validated in each
    binding that names it, with the binding's own keys over them.)"""
    from geode.agent_checks import check_unused_agent
    from geode.cli._common import check_binding
    from geode.settings import BindingSettings

    used = {b.agent for b in settings.bindings}
    out = []
    for name, agent in sorted(settings.agents.items()):
        where = f"[agents.{name}]"
        keys = agent.model_dump(include=agent.model_fields_set)
        try:
            if name in used:
                as_binding = BindingSettings.model_construct(**keys)
            else:
                try:
                    as_binding = check_unused_agent(name, agent)
                except ConfigError as exc:  # its own words: "[agents.NAME]: ..."
                    out.append(Check(name=where, status="fail", message=str(exc),
                                     fix="fix the [agents] table in config.toml"))
                    continue
            check_binding(as_binding, settings, where=where)
        except ConfigError as exc:
            out.append(Check(name=where, status="fail", message=f"{where}: {exc}",
                             fix="fix the [agents] table in config.toml; `geode models` "
                                 "lists the model ids"))
        else:
            nobody = name not in used and as_binding.approve and not as_binding.approvers
            out.append(Check(
                name=where, status="warn" if nobody else "ok",
                message=f"{where}: model and tools known" + (
                    f"; approve lists {', '.join(as_binding.approve)} but no approvers: "
                    "every such call would be denied" if nobody else ""),
                fix='give it approvers = ["USER_ID", ...] (or each binding that names it)'
                if nobody else ""))
    return out


def _plugins(settings: Settings, secrets: Secrets) -> list[Check]:
    from geode.plugins import load_part, plugins

    out: list[Check] = []
    for plugin in plugins():
        if plugin.preflight:
            out += load_part(plugin.preflight)(settings, secrets)
    return out
