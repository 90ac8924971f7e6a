"""Importing a library without the optional extras it loads at import time and GEODE never uses.

structlog imports rich (and pygments through it) when installed, for pretty tracebacks that
GEODE's renderers do not use (:mod:`geode.logging` renders plain ones), and colorama, for
colours on a Windows console (GEODE's console renderer has colours off); a platform's SDK may
import more of the kind (its package says which, with :func:`import_without`). The libraries
guard those imports with ``try: ... except ImportError`` and work without them. Loaded anyway
they cost every process ~4 MB and ~50 ms (rich, pygments) before it does anything.

It also knows which extra of ``geode-agent`` installs each optional SDK
(:data:`EXTRA_OF`: the harness's own, and each registered chat platform's, from its spec): a
configured platform whose SDK is missing is exit 2 naming the extra to install
(:func:`missing_extra`), never an ImportError's traceback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from geode.errors import ConfigError

__all__ = ["MissingExtraError", "extra_of", "import_without", "install_hint", "lazy_attributes",
           "missing_extra", "require"]

#: the top-level module of each optional SDK of the harness, and the extra of geode-agent
#: that installs it (a chat platform's come from its spec: :func:`extra_of`)
_OWN_EXTRAS = {
    "psycopg": "postgres",
    "psycopg_binary": "postgres",
    "opentelemetry": "otel",
}


def extra_of() -> dict[str, str]:
    """Every optional SDK's top-level module and the extra that installs it: the harness's
    and each registered platform's (:mod:`geode.platforms`)."""
    from geode.platforms import platform_infos

    found = {m: info.extra or info.name for info in platform_infos() for m in info.sdk_modules}
    return {**found, **_OWN_EXTRAS}


def __getattr__(name: str) -> object:
    # ``EXTRA_OF``: the mapping as it is now (platforms are registered, not listed here)
    if name == "EXTRA_OF":
        return extra_of()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def lazy_attributes(
    package: str, where: Mapping[str, str], *, before: Callable[[], object] | None = None
) -> Callable[[str], Any]:
    """A package's module ``__getattr__`` (PEP 562): each name of ``where`` imported from its
    module on first use (``before`` runs first: an SDK's import settings), any other name an
    AttributeError. A package's names then cost nothing until asked for."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if before is not None:
            before()
        return getattr(importlib.import_module(module), name)

    return __getattr__


def import_without(name: str, *extras: str) -> ModuleType:
    """Import ``name`` with the top-level packages ``extras`` unimportable while it loads.

    An extra that is already loaded stays (and ``name`` sees it); afterwards every extra is
    importable again for whoever needs it (``typer`` renders help with rich).
    """
    if name in sys.modules:
        return sys.modules[name]
    hidden = [m for m in extras if m not in sys.modules]
    for m in hidden:
        sys.modules[m] = None  # type: ignore[assignment]  # "import m" raises ImportError
    try:
        return importlib.import_module(name)
    finally:
        for m in hidden:
            if m in sys.modules and sys.modules[m] is None:
                del sys.modules[m]


def install_hint(extra: str) -> str:
    """How to install ``extra``: from the package (once published) and from a checkout."""
    return f"install geode-agent[{extra}] (from a checkout: pip install -e '.[{extra}]')"


class MissingExtraError(ConfigError):
    """An optional SDK GEODE needs for what is configured is not installed.

    A configuration error like any other (the operator fixes it; ``geode serve`` and
    ``geode doctor`` report it): its message names the extra that installs it.
    """

    def __init__(self, *, module: str, extra: str) -> None:
        super().__init__(f"the {extra} extra is not installed (no module {module!r}), and the "
                         f"configuration needs it: "
                         f"{install_hint(extra)}")
        self.module = module
        self.extra = extra


def missing_extra(exc: BaseException) -> MissingExtraError | None:
    """The :class:`MissingExtraError` behind ``exc`` when it (or an exception it was raised
    from) is a missing optional SDK of :data:`EXTRA_OF`; None for any other error (a missing
    module of GEODE itself is a bug, not a missing extra)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MissingExtraError):
            return current
        if isinstance(current, ModuleNotFoundError) and current.name:
            top = current.name.split(".", 1)[0]
            extra = _OWN_EXTRAS.get(top) or extra_of().get(top)
            if extra is not None:
                return MissingExtraError(module=top, extra=extra)
        current = current.__cause__ or current.__context__
    return None


def require(module: str) -> ModuleType:
    """Import ``module`` (an optional SDK of :data:`EXTRA_OF`), or raise
    :class:`MissingExtraError` naming its extra."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        found = missing_extra(exc)
        if found is None:
            raise
        raise found from exc
