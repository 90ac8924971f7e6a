"""Test-only launcher: ``python _paused_geode.py POINT MARKER ARGS...`` runs ``geode ARGS...``
with a crash pause (geode.testing.crashpoints) installed on its runtime.

The pause is reachable only through this file of the test suite: no config key or
environment variable of GEODE can install it (a project's ``.geode/config.toml`` once could,
and made ``geode run`` overwrite a file and hang).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from geode.daemon import runtime
from geode.testing.crashpoints import install_pause


def main() -> None:
    point, marker, *args = sys.argv[1:]
    original = runtime.Runtime.__init__

    def init(self: runtime.Runtime, *a: Any, **kw: Any) -> None:
        original(self, *a, **kw)
        install_pause(self.observers, point, Path(marker))

    runtime.Runtime.__init__ = init  # type: ignore[method-assign]
    sys.argv = ["geode", *args]
    from geode.cli import main as geode_main

    geode_main()


if __name__ == "__main__":
    main()
