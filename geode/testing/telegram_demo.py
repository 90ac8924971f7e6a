"""``python -m geode.testing.telegram_demo``: kept for the offline demo's old command line;
the demo lives with the platform fakes in ``bots.testing.telegram_demo`` (run by name here, so
the harness imports without the chat layer)."""

from __future__ import annotations

import runpy

if __name__ == "__main__":
    runpy.run_module("bots.testing.telegram_demo", run_name="__main__", alter_sys=True)
