"""Named agents (``[agents.NAME]``): a binding's behaviour keys kept once and taken by every
binding that says ``agent = "NAME"``. The model of an agent is derived from the binding's in
:mod:`geode.settings` (``AgentSettings``: BindingSettings' fields minus :data:`BINDING_ONLY`);
this module holds what resolves a binding's table against its agent, before the binding is
validated, and what checks an agent no binding uses as fully as a binding's keys are checked
(:func:`check_unused_agent`, run by ``geode doctor`` and at ``geode serve``'s start)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from geode.config_errors import unknown_key_message
from geode.errors import ConfigError

if TYPE_CHECKING:
    from geode.settings import BindingSettings

__all__ = ["BINDING_ONLY", "apply_agent", "check_unused_agent"]

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


@functools.cache
def _as_binding() -> type[BindingSettings]:
    """BindingSettings without the keys that place a binding (defaulted, so not validated):
    an agent's keys alone go through every validator a binding's do, the rules between keys
    included, and a validator added to BindingSettings later too."""
    from geode.settings import BindingSettings

    class AgentAsBinding(BindingSettings):
        platform: str = ""
        channel: str = ""

    return AgentAsBinding


def _reason(err: Any) -> str:
    msg = str(err["msg"]).removeprefix("Value error, ")
    loc = ".".join(str(x) for x in err["loc"])
    return f"{loc}: {msg}" if loc else msg


def check_unused_agent(name: str, agent: BaseModel) -> BindingSettings:
    """``[agents.NAME]`` (an ``AgentSettings``) that no binding names, validated as a
    binding holding just its keys would be: the values and the rules between keys
    (``run_bash`` only in ``approve``, a tool not in both ``tools`` and ``approve``,
    ``computer`` in ``approve`` only with ``computer_use = true``, ...), in the words a
    binding gets. An agent a binding uses is checked in that binding, after the binding's
    own keys (which may lift a rule: ``computer_use = true`` on the binding) are applied.

    Returns the binding its keys make (for the model and tool names' check).

    Raises:
        ConfigError: ``[agents.NAME]: <what is wrong>``, one line per problem.
    """
    try:
        return _as_binding().model_validate(agent.model_dump(include=agent.model_fields_set))
    except ValidationError as exc:
        raise ConfigError("\n".join(f"[agents.{name}]: {_reason(err)}"
                                     for err in exc.errors())) from None
