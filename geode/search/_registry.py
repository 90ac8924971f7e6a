"""The search backends by name: GEODE's own, and any an installed package registers as one
line of its metadata::

    [project.entry-points."geode.search_backends"]
    NAME = "PACKAGE.MODULE:SPEC"

The tool and the settings ask this registry; neither names a backend."""

from __future__ import annotations

import importlib
import threading
from functools import cache

from geode.search._spec import SearchBackendSpec

__all__ = ["GROUP", "backend_names", "load_backend"]

GROUP = "geode.search_backends"

#: GEODE's own backends, one line each (an outside one comes through GROUP)
_OWN = {
    "brave": "geode.search.brave:SPEC",
    "tavily": "geode.search.tavily:SPEC",
    "searxng": "geode.search.searxng:SPEC",
}

_lock = threading.Lock()
_loaded: dict[str, SearchBackendSpec] = {}


@cache
def _targets() -> dict[str, str]:
    from geode.hooks.registry import entry_points  # parses only the dists naming GROUP

    found = dict(_OWN)
    for ep in entry_points(GROUP):
        found.setdefault(ep.name, ep.value)  # GEODE's own names cannot be taken over
    return found


def backend_names() -> tuple[str, ...]:
    """Every registered backend's name, sorted (nothing is imported)."""
    return tuple(sorted(_targets()))


def load_backend(name: str) -> SearchBackendSpec | None:
    """The spec registered as ``name`` (imported once); None when there is none.

    Raises:
        ImportError: its module cannot be imported.
        TypeError: what it names is not a :class:`SearchBackendSpec`.
    """
    with _lock:
        if name in _loaded:
            return _loaded[name]
    target = _targets().get(name)
    if target is None:
        return None
    module, _, attr = target.partition(":")
    spec = getattr(importlib.import_module(module), attr)
    if not isinstance(spec, SearchBackendSpec):
        raise TypeError(f"search backend {name!r} ({target}) is not a SearchBackendSpec")
    with _lock:
        return _loaded.setdefault(name, spec)
