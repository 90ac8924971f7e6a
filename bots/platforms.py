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
from geode._imports import MissingExtraError, missing_extra
from geode.errors import ConfigError
from geode.settings import Secrets, unknown_key_message

__all__ = ["channel_options", "missing_tokens", "platform_spec", "platform_specs"]

#: each platform's package, whose ``options`` module holds its ``SPEC``: one line per
#: platform. A spec is imported only when it is asked for: importing a platform package
#: loads its SDK, and a Telegram-only serve loads no Slack or Discord SDK.
_PACKAGES = {"telegram": "bots.telegram", "slack": "bots.slack", "discord": "bots.discord"}


@cache
def platform_spec(name: str) -> PlatformSpec | None:
    """The spec of platform ``name``; None when no such platform is registered.

    Raises:
        MissingExtraError: its SDK's extra is not installed (a ConfigError naming it).
    """
    package = _PACKAGES.get(name)
    if package is None:
        return None
    try:
        spec = importlib.import_module(f"{package}.options").SPEC
    except ImportError as exc:
        found = missing_extra(exc)
        if found is None:
            raise
        raise found from exc
    if not isinstance(spec, PlatformSpec) or spec.name != name:
        raise TypeError(f"{package}.options.SPEC is not the PlatformSpec of {name!r}")
    return spec


def platform_specs() -> Mapping[str, PlatformSpec]:
    """Every registered platform's spec whose extra is installed, by name (imports every
    platform package: for listings, not for a start)."""
    specs: dict[str, PlatformSpec] = {}
    for name in _PACKAGES:
        try:
            spec = platform_spec(name)
        except MissingExtraError:
            continue  # fine unless [channels.<it>] is configured (channel_options says so)
        if spec is not None:
            specs[name] = spec
    return specs


def channel_options(name: str, raw: Mapping[str, Any]) -> LayerOptions:
    """``[channels.<name>]`` as its platform's typed options.

    Raises:
        ConfigError: an unknown platform or key (with the close match, worded as every
            other unknown name of config.toml), or an invalid value.
    """
    where = f"[channels.{name}]"
    spec = platform_spec(name)  # a platform whose extra is missing: MissingExtraError
    if spec is None:
        raise ConfigError(unknown_key_message(where, name, _PACKAGES, what="platform"))
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
    spec = platform_spec(name)
    assert spec is not None, name  # channel_options accepted it
    out = []
    for token in spec.tokens:
        env = str(getattr(options, token.option))
        if not secrets.get(env):
            out.append(f"[channels.{name}] is configured but ${env} is not set: put "
                       f"{token.what} in the environment or $GEODE_HOME/.env.")
    return out
