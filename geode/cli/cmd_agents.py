"""``geode agents list / show NAME``: the named agents (``[agents.NAME]``), the bindings that
use each, and where each key a binding runs with comes from (its own table, its agent, or
the default)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from geode.cli.app import app

if TYPE_CHECKING:
    from geode.settings import AgentSettings, BindingSettings, Settings

agents_app = typer.Typer(help="Named agents: behaviour keys several bindings share.",
                         no_args_is_help=True)
app.add_typer(agents_app, name="agents")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _users(settings: Settings, name: str) -> list[BindingSettings]:
    return [b for b in settings.bindings if b.agent == name]


def key_sources(binding: BindingSettings) -> dict[str, str]:
    """Each behaviour key of ``binding`` and where its value comes from: ``binding`` (its
    own table), ``agent`` (its named agent) or ``default``."""
    from geode.settings import AgentSettings

    own = binding.model_fields_set - binding.agent_keys
    return {key: "binding" if key in own else "agent" if key in binding.agent_keys
            else "default" for key in AgentSettings.model_fields}


def _agent_row(name: str, agent: AgentSettings, settings: Settings) -> dict[str, Any]:
    return {"name": name,
            "keys": agent.model_dump(mode="json", include=agent.model_fields_set),
            "bindings": [f"{b.platform}:{b.channel}" for b in _users(settings, name)]}


@agents_app.command("list")
def list_agents(json_out: JsonOpt = False) -> None:
    """List the named agents, the keys each sets and the bindings that use it."""
    from geode.cli._common import load_typed

    settings, _ = load_typed()
    rows = [_agent_row(name, agent, settings) for name, agent in sorted(settings.agents.items())]
    if json_out:
        typer.echo(json.dumps({"agents": rows}, ensure_ascii=False))
        return
    if not rows:
        typer.echo("no named agents ([agents.NAME] in config.toml)")
    for row in rows:
        keys = ", ".join(sorted(row["keys"])) or "no keys"
        used = ", ".join(row["bindings"]) or "no binding"
        typer.echo(f"{row['name']}  sets {keys}\n    used by: {used}")


@agents_app.command("show")
def show_agent(
    name: Annotated[str, typer.Argument(help="The agent's name ([agents.NAME]).")],
    json_out: JsonOpt = False,
) -> None:
    """Show an agent's keys, and for each binding that uses it every behaviour key with
    its value and where it comes from (binding, agent or default)."""
    from geode.cli._common import load_typed
    from geode.errors import ConfigError
    from geode.settings import unknown_key_message

    settings, _ = load_typed()
    agent = settings.agents.get(name)
    if agent is None:
        raise ConfigError(unknown_key_message("geode agents show", name, settings.agents,
                                              what="agent"))
    row = _agent_row(name, agent, settings)
    bindings: list[dict[str, Any]] = []
    for binding in _users(settings, name):
        values = binding.model_dump(mode="json")
        bindings.append({"binding": f"{binding.platform}:{binding.channel}",
                         "keys": {key: {"value": values[key], "from": source}
                                  for key, source in key_sources(binding).items()}})
    if json_out:
        typer.echo(json.dumps({**row, "bindings": bindings}, ensure_ascii=False))
        return
    typer.echo(f"agent {name}")
    for key, value in sorted(row["keys"].items()):
        typer.echo(f"  {key} = {json.dumps(value, ensure_ascii=False)}")
    if not bindings:
        typer.echo("used by no binding")
    for used in bindings:
        typer.echo(f"binding {used['binding']}")
        for key, kv in sorted(used["keys"].items()):
            if kv["from"] != "default":
                typer.echo(f"  {key} = {json.dumps(kv['value'], ensure_ascii=False)}"
                           f"  ({kv['from']})")
