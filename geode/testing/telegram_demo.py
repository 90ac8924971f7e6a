"""``python -m geode.testing.telegram_demo``: kept for the offline demo's old command line;
the demo lives with the platform fakes in :mod:`bots.testing.telegram_demo`."""

from __future__ import annotations

from bots.testing.telegram_demo import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
