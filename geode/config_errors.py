"""The wording of configuration errors: every unknown name (a section, a key, a platform, an
agent) is refused naming its close match, and a failed validation is turned into one
:class:`~geode.errors.ConfigError` that says where (``[agents.coder]: unknown key 'modle'.
Did you mean model?``). Used by :mod:`geode.settings`, which re-exports
:func:`unknown_key_message`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_settings import SettingsError

from geode.errors import ConfigError

__all__ = ["config_error", "reject_unknown_sections", "unknown_key_message"]


def unknown_key_message(where: str, key: str, known: Iterable[str], *,
                        what: str = "key", hint: str = "{}") -> str:
    """The one wording of every unknown name in the configuration (a section, a key in a
    section, a ``[channels.*]`` platform or one of its options): where, the name, the close
    match and what is known. A misspelt name is refused with this, never ignored."""
    import difflib

    names = sorted(set(known))
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    match = f" Did you mean {hint.format(close[0])}?" if close else ""
    return (f"{where}: unknown {what} {key!r}.{match} Known: {', '.join(names) or 'none'} "
            "(config/config.example.toml shows each).")


def reject_unknown_sections(path: Path, data: Mapping[str, Any], *, root: type[BaseModel],
                            platforms: Sequence[str]) -> None:
    """An unknown top-level key or section is an error, as an unknown key inside a section
    is (``extra="forbid"``): a misspelt ``[modle]`` used to be ignored without a word. So is
    an unknown ``[channels.NAME]``: ``[channels.telegarm]`` used to start no connector.
    (The keys inside ``[channels.NAME]`` are the platform's own options, checked by
    :func:`geode.cli.preflight.preflight`, which imports the platform packages.)"""
    known = [n for n in root.model_fields if n != "home" and not n.startswith("test_")]
    for key in data:
        if key not in root.model_fields:
            raise ConfigError(unknown_key_message(str(path), key, known,
                                                  what="section or key", hint="[{}]"))
    channels = data.get("channels")
    if isinstance(channels, Mapping):
        for name in channels:
            if name not in platforms:
                raise ConfigError(unknown_key_message(
                    f"{path}: [channels.{name}]", name, platforms, what="platform"))


def _loc_model(root: type[BaseModel],
               loc: Sequence[int | str]) -> tuple[str, type[BaseModel] | None]:
    """The section a validation error's location names (``[model]``, ``[[bindings]] #2``)
    and the model whose fields are known there (None: not a model, e.g. a free dict)."""
    model: type[BaseModel] | None = root
    parts: list[str] = []
    keyed = False  # the item before was a table of named tables ([agents.NAME])
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1] if parts else ''} #{item + 1}"]
            continue
        if keyed:
            parts[-1] += f".{item}"
            keyed = False
            continue
        if model is None or item not in model.model_fields:
            return ".".join(parts), None
        parts.append(item)
        annotation = model.model_fields[item].annotation
        keyed = get_origin(annotation) is dict
        model = _inner_model(annotation)
    return ".".join(parts), model


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, directly, as the items of a list (``[[bindings]]``) or as
    the values of a table of named tables (``[agents.NAME]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (list, dict):
        args = get_args(annotation)
        return _inner_model(args[-1]) if args else None
    return None


def config_error(root: type[BaseModel], where: str,
                 exc: ValidationError | SettingsError) -> ConfigError:
    """A ConfigError from a failed ``root`` (Settings) validation: an unknown key is named
    with its close match (:func:`unknown_key_message`); other errors keep pydantic's
    wording."""
    if not isinstance(exc, ValidationError):
        return ConfigError(f"Invalid configuration in {where}:\n{exc}")
    unknown: list[str] = []
    others = 0
    for err in exc.errors():
        loc = err["loc"]
        if err["type"] != "extra_forbidden" or not loc:
            others += 1
            continue
        section, model = _loc_model(root, loc[:-1])
        known = [] if model is None else list(model.model_fields)
        unknown.append(unknown_key_message(f"{where}: [{section}]", str(loc[-1]), known))
    if not unknown:
        return ConfigError(f"Invalid configuration in {where}:\n{exc}")
    rest = f"\n{exc}" if others else ""
    return ConfigError("\n".join(unknown) + rest)
