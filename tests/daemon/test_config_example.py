"""config/config.example.toml, copied as it is, starts `geode serve --demo`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.daemon.conftest import REPO, env_for, start_serve


def test_the_example_config_starts_serve_demo(home: Path) -> None:
    shutil.copy(REPO / "config" / "config.example.toml", home / "config.toml")
    # no token in the environment either: an enabled channel section would need one
    serve = start_serve(home, args=("--demo",), TELEGRAM_BOT_TOKEN="", SLACK_BOT_TOKEN="",
                        DISCORD_BOT_TOKEN="")
    try:
        body = serve.readyz()
        assert body["ready"] is True, body
        # the container's health check finds the port the same way (here GEODE_HEALTH_PORT)
        check = subprocess.run([sys.executable, "-m", "geode.daemon.healthcheck", "/readyz"],
                               env=env_for(home, GEODE_HEALTH_PORT=str(serve.port)),
                               capture_output=True, text=True, timeout=60, check=False)
        assert check.returncode == 0, check.stderr
    finally:
        assert serve.stop() == 0, serve.output()
