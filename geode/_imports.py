"""Importing a library without the optional extras it loads at import time and GEODE never uses.

structlog imports rich (and pygments through it) when installed, for pretty tracebacks that
GEODE's renderers do not use (:mod:`geode.logging` renders plain ones), and colorama, for
colours on a Windows console (GEODE's console renderer has colours off); python-telegram-bot
imports cryptography for Telegram Passport decryption, which no GEODE connector asks for, and
tornado for its own webhook server (GEODE's webhook is an aiohttp endpoint). The libraries
guard those imports with ``try: ... except ImportError`` and work without them. Loaded anyway
they cost every process ~4 MB and ~50 ms (rich, pygments), and a Telegram daemon ~7 MB
(cryptography) and ~2 MB (tornado), before it does anything.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

__all__ = ["import_without"]


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
