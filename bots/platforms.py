"""The platform registry and the start checks of ``[channels.*]``.

Each platform package declares a :class:`~bots.options.PlatformSpec` (its typed
``[channels.<name>]`` options, secrets and their shapes, connector builder, checks) and
registers it in the ``geode.platforms`` entry point group, one line of its distribution's
metadata (pyproject.toml's ``[project.entry-points."geode.platforms"]``): adding a platform
is its folder plus that line, and an outside package adds one by being installed. The
checks here iterate the registry (:mod:`geode.platforms`) and name no platform: ``geode
serve`` runs them before it starts (exit 2 on a failure) and ``geode doctor`` runs the same
ones (:mod:`geode.cli.preflight`).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from bots.options import LayerOptions, PlatformSpec, TokenSpec
from geode._imports import MissingExtraError, missing_extra
from geode.errors import ConfigError
from geode.platforms import load_platform, platform_names
from geode.settings import Secrets, unknown_key_message

if TYPE_CHECKING:
    from bots.port import TurnHost
    from geode.settings import Settings

__all__ = ["build_connector", "channel_options", "missing_tokens", "platform_spec",
           "platform_specs", "required_secret", "resolve"]


def platform_spec(name: str) -> PlatformSpec | None:
    """The spec of platform ``name``; None when no such platform is registered.

    Raises:
        MissingExtraError: its spec imports its SDK, and the SDK's extra is not installed
            (a ConfigError naming it).
        TypeError: what it registered is not its :class:`PlatformSpec`.
    """
    try:
        spec = load_platform(name)
    except ImportError as exc:
        found = missing_extra(exc)
        if found is None:
            raise
        raise found from exc
    if spec is None:
        return None
    if not isinstance(spec, PlatformSpec) or spec.name != name:
        raise TypeError(f"the geode.platforms entry point {name!r} is not the PlatformSpec "
                        f"of {name!r}")
    return spec


def platform_specs() -> Mapping[str, PlatformSpec]:
    """Every registered platform's spec that imports, by name (for listings)."""
    specs: dict[str, PlatformSpec] = {}
    for name in platform_names():
        try:
            spec = platform_spec(name)
        except MissingExtraError:
            continue  # fine unless [channels.<it>] is configured (channel_options says so)
        if spec is not None:
            specs[name] = spec
    return specs


def _require_sdk(spec: PlatformSpec) -> None:
    """Raise :class:`MissingExtraError` when a module of its SDK is not installed (looked
    up, not imported: the connector builder imports it)."""
    for module in spec.sdk_modules:
        try:
            found = importlib.util.find_spec(module)
        except ModuleNotFoundError as exc:
            raise MissingExtraError(module=module, extra=spec.extra or spec.name) from exc
        if found is None:
            raise MissingExtraError(module=module, extra=spec.extra or spec.name)


def channel_options(name: str, raw: Mapping[str, Any]) -> LayerOptions:
    """``[channels.<name>]`` as its platform's typed options.

    Raises:
        ConfigError: an unknown platform or key (with the close match, worded as every
            other unknown name of config.toml), or an invalid value.
    """
    where = f"[channels.{name}]"
    spec = platform_spec(name)
    if spec is None:
        raise ConfigError(unknown_key_message(where, name, platform_names(), what="platform"))
    _require_sdk(spec)  # a configured platform whose extra is missing: MissingExtraError
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
    out = [_missing(spec, options, token) for token in spec.tokens
           if not secrets.get(str(getattr(options, token.option)))]
    out += [m for check in spec.checks if (m := check(options, secrets))]
    return out


def _missing(spec: PlatformSpec, options: LayerOptions, token: TokenSpec) -> str:
    env = str(getattr(options, token.option))
    return (f"[channels.{spec.name}] is configured but ${env} is not set: put "
            f"{token.what} in the environment or $GEODE_HOME/.env.")


def required_secret(spec: PlatformSpec, options: LayerOptions, secrets: Secrets,
                    token: TokenSpec) -> str:
    """The secret ``token`` of ``options`` names (for a connector builder).

    Raises:
        ConfigError: it is not set (saying what to put where).
    """
    value = secrets.get(str(getattr(options, token.option)))
    if not value:
        raise ConfigError(_missing(spec, options, token))
    return value


def resolve(ref: str) -> Any:
    """The object a spec names as ``"module:attribute"`` (its connector builder, its command
    sync), imported now.

    Raises:
        MissingExtraError: importing it needs an SDK whose extra is not installed.
    """
    module, _, attribute = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except ImportError as exc:
        found = missing_extra(exc)
        if found is None:
            raise
        raise found from exc


def build_connector(name: str, *, host: TurnHost, settings: Settings, secrets: Secrets,
                    raw: Mapping[str, Any]) -> Any:
    """The connector of ``[channels.<name>]`` (a ``BaseConnector``), built by the builder
    its platform's spec names.

    Raises:
        ConfigError: an unknown platform or option, a secret not set, a platform with
            nothing to serve; :class:`MissingExtraError` its SDK is not installed.
    """
    options = channel_options(name, raw)
    spec = platform_spec(name)
    assert spec is not None, name  # channel_options accepted it
    if not spec.connector:
        raise ConfigError(f"[channels.{name}]: the {name} platform has no connector to serve")
    build = resolve(spec.connector)
    try:
        return build(host=host, settings=settings, secrets=secrets, options=options)
    except ImportError as exc:
        found = missing_extra(exc)
        if found is None:
            raise
        raise found from exc
