"""The chat platforms installed alongside the harness, found through an entry point group.

A platform package registers its spec as one line of its distribution's metadata::

    [project.entry-points."geode.platforms"]
    NAME = "PACKAGE.options:SPEC"

so an outside package adds a platform by being installed. The harness names no platform: it
asks this registry for their names (a ``[[bindings]]`` ``platform``, a ``[channels.NAME]``
table), and reads of each spec only what it needs itself (:class:`PlatformInfo`: its secrets'
shapes for redaction, its SDK's extra, its channel-only tools). The full spec (options,
connector builder, doctor checks, init lines) is the channel layer's (``bots.platforms``).

The names come from the metadata alone; a spec is imported when it is asked for. A spec's
module imports no SDK (a platform's ``options`` module), so reading every spec stays cheap
and a ``geode serve`` with one platform configured loads no other platform's SDK: the SDK
is imported by the spec's connector builder.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = ["GROUP", "PlatformInfo", "load_platform", "platform_infos", "platform_names",
           "reset_platforms"]

#: the entry point group each platform package registers its spec under
GROUP = "geode.platforms"


class PlatformInfo(Protocol):
    """What the harness itself reads of a platform's spec (``bots.options.PlatformSpec``)."""

    @property
    def name(self) -> str: ...
    @property
    def extra(self) -> str:
        """The extra of geode-agent that installs its SDK ("" none)."""
    @property
    def sdk_modules(self) -> tuple[str, ...]:
        """The top-level modules of its SDK (a missing one names :attr:`extra`)."""
    @property
    def secret_shapes(self) -> tuple[str, ...]:
        """Regular expressions of its secrets, masked in every output even when not loaded."""
    @property
    def chat_tools(self) -> frozenset[str]:
        """Tools only its channel sessions have (the layer adds them)."""


_lock = threading.Lock()


@cache
def _entry_points() -> dict[str, EntryPoint]:
    # the first distribution on sys.path that names a platform wins (as importlib does)
    from geode.hooks.registry import entry_points  # parses only the dists naming GROUP

    found: dict[str, EntryPoint] = {}
    for ep in entry_points(GROUP):
        found.setdefault(ep.name, ep)
    return found


def platform_names() -> tuple[str, ...]:
    """Every registered platform's name, sorted (from the metadata: nothing is imported)."""
    return tuple(sorted(_entry_points()))


_loaded: dict[str, object] = {}


def load_platform(name: str) -> object | None:
    """The spec platform ``name`` registered (imported once); None when none is registered.

    Raises:
        ImportError: its module (or a module it imports) cannot be imported.
    """
    with _lock:
        if name in _loaded:
            return _loaded[name]
    ep = _entry_points().get(name)
    if ep is None:
        return None
    spec = ep.load()
    with _lock:
        _loaded.setdefault(name, spec)
        return _loaded[name]


def platform_infos() -> list[PlatformInfo]:
    """What the harness reads of every registered platform that imports; a platform whose
    spec does not import (a broken outside package) is left out here and reported where it
    is configured (``geode doctor``, ``geode serve``)."""
    out: list[PlatformInfo] = []
    for name in platform_names():
        try:
            spec = load_platform(name)
        except ImportError:
            continue
        if _is_info(spec):
            out.append(spec)  # type: ignore[arg-type]  # checked by _is_info
    return out


def _is_info(spec: object) -> bool:
    return all(hasattr(spec, a) for a in ("name", "extra", "sdk_modules", "secret_shapes",
                                            "chat_tools"))


@cache
def secret_shapes() -> tuple[re.Pattern[str], ...]:
    """Every registered platform's secret shapes, compiled (for :mod:`geode.secret_redaction`)."""
    return tuple(re.compile(s) for info in platform_infos() for s in info.secret_shapes)


#: called after the registry is reset (tests that install a platform): caches built on it
_on_reset: list[Callable[[], None]] = []


def on_reset(fn: Callable[[], None]) -> Callable[[], None]:
    """Register ``fn`` to run when :func:`reset_platforms` runs (returns it unchanged)."""
    _on_reset.append(fn)
    return fn


def reset_platforms() -> None:
    """Forget the registry (a distribution was installed or removed: tests, plugins)."""
    _entry_points.cache_clear()
    secret_shapes.cache_clear()
    with _lock:
        _loaded.clear()
    for fn in _on_reset:
        fn()
