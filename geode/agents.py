"""Named agents (``[agents.NAME]``): a binding's behaviour keys kept once and taken by every
binding that says ``agent = "NAME"``. The model of an agent is derived from the binding's in
:mod:`geode.settings` (``AgentSettings``: BindingSettings' fields minus :data:`BINDING_ONLY`);
this module holds what resolves a binding's table against its agent, before the binding is
validated. What checks an agent no binding uses is :mod:`geode.agent_checks` (it imports the
settings; this module is imported by them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from geode.config_errors import unknown_key_message

__all__ = ["BINDING_ONLY", "apply_agent"]

#: a binding's keys that say where it is and who may speak there, not how it behaves: a named
#: agent (``[agents.NAME]``) holds every other key of a binding (model, prompt, tools, approval,
#: skills, memory, the caps, ...), so a key added to BindingSettings is an agent key too
BINDING_ONLY = frozenset({"platform", "channel", "team", "workspace", "agent", "require_mention",
                          "allow_users", "allow_bots"})


def apply_agent(raw: Mapping[str, Any], agents: Mapping[str, BaseModel], *,
                where: str) -> tuple[dict[str, Any], frozenset[str]]:
    """A binding's table with its named agent's keys under it: each key the agent
    (an ``AgentSettings``) sets and the binding does not (the binding's own keys win), and the
    keys it took.

    Raises:
        ValueError: the binding names an agent that is not configured (with the close match).
    """
    name = raw.get("agent")
    if name is None:
        return dict(raw), frozenset()
    agent = agents.get(str(name))
    if agent is None:
        raise ValueError(unknown_key_message(f"{where} agent", str(name), agents,
                                             what="agent", hint='"{}"'))
    taken = {key: value for key, value in agent.model_dump(include=agent.model_fields_set).items()
             if key not in raw}
    return {**taken, **raw}, frozenset(taken)
