"""The platform registry and the start checks of ``[channels.*]``.

Each platform package declares a :class:`~bots.options.PlatformSpec` in its ``options``
module (its typed ``[channels.<name>]`` options and the secrets it needs); adding a platform
is its folder plus one line in :data:`_PACKAGES`. The checks here iterate the registry and
name no platform: ``geode serve`` runs them before it starts (exit 2 on a failure) and
``geode doctor`` runs the same ones (:mod:`geode.cli.preflight`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic import ValidationError

from bots.options import LayerOptions, PlatformSpec
from geode._imports import missing_extra
from geode.errors import ConfigError
from geode.settings import Secrets, unknown_key_message

__all__ = ["channel_options", "missing_tokens", "platform_specs"]

#: the packages whose ``options`` module holds a ``SPEC``: one line per platform
_PACKAGES = ("bots.telegram", "bots.slack", "bots.discord")


@cache
def platform_specs() -> Mapping[str, PlatformSpec]:
    """Every registered platform's spec, by name (those whose extra is installed)."""
    specs: dict[str, PlatformSpec] = {}
    for package in _PACKAGES:
        try:
            spec = importlib.import_module(f"{package}.options").SPEC
        except ImportError as exc:
            # its SDK's extra is not installed: fine unless [channels.<it>] is configured
            # (channel_options then says which extra to install)
            if missing_extra(exc) is None:
                raise
            _UNAVAILABLE[package.rpartition(".")[2]] = package
            continue
        if not isinstance(spec, PlatformSpec):
            raise TypeError(f"{package}.options.SPEC is not a PlatformSpec")
        specs[spec.name] = spec
    return specs


#: platforms registered in _PACKAGES whose package cannot load without its extra
_UNAVAILABLE: dict[str, str] = {}


def _require_platform(name: str) -> None:
    """Raise the MissingExtraError of a configured platform whose extra is not installed."""
    package = _UNAVAILABLE.get(name)
    if package is None:
        return
    try:
        importlib.import_module(f"{package}.options")
    except ImportError as exc:
        found = missing_extra(exc)
        if found is None:
            raise
        raise found from exc


def channel_options(name: str, raw: Mapping[str, Any]) -> LayerOptions:
    """``[channels.<name>]`` as its platform's typed options.

    Raises:
        ConfigError: an unknown platform or key (with the close match, worded as every
            other unknown name of config.toml), or an invalid value.
    """
    where = f"[channels.{name}]"
    spec = platform_specs().get(name)
    if spec is None:
        _require_platform(name)
        raise ConfigError(unknown_key_message(where, name, platform_specs(), what="platform"))
    try:
        return spec.options.model_validate(dict(raw))
    except ValidationError as exc:
        unknown = [unknown_key_message(where, str(e["loc"][0]), spec.options.model_fields)
                   for e in exc.errors() if e["type"] == "extra_forbidden" and e["loc"]]
        if unknown and len(unknown) == exc.error_count():
            raise ConfigError("\n".join(unknown)) from exc
        raise ConfigError(f"invalid {where}: {exc}") from exc


def missing_tokens(name: str, options: LayerOptions, secrets: Secrets) -> list[str]:
    """What an enabled ``[channels.<name>]`` lacks of the secrets its start needs, each as
    an operator's instruction (empty: all set)."""
    spec = platform_specs()[name]
    out = []
    for token in spec.tokens:
        env = str(getattr(options, token.option))
        if not secrets.get(env):
            out.append(f"[channels.{name}] is configured but ${env} is not set: put "
                       f"{token.what} in the environment or $GEODE_HOME/.env.")
    return out
