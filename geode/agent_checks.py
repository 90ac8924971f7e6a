"""The check of a named agent (``[agents.NAME]``) that no binding uses: its keys validated as
a binding holding just them would be, in the words a binding gets. Run by ``geode doctor`` and
at ``geode serve``'s start. Apart from :mod:`geode.agents` because it needs the settings' models,
and the settings import that module to resolve a binding's agent."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, ValidationError

from geode.errors import ConfigError
from geode.settings import BindingSettings

__all__ = ["check_unused_agent"]


@functools.cache
def _as_binding() -> type[BindingSettings]:
    """BindingSettings without the keys that place a binding (defaulted, so not validated):
    an agent's keys alone go through every validator a binding's do, the rules between keys
    included, and a validator added to BindingSettings later too."""
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
