"""A real `geode serve` subprocess for the kill -9 scenarios (shared by all platforms)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from bots.testing.discord import FakeDiscord
    from bots.testing.telegram import FakeTelegramServer

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def store_url_for(request: pytest.FixtureRequest, tmp_path: Path, dialect: str) -> str:
    """The store of a scenario's daemon: SQLite in its home (``tmp_path/home``), or the test
    PostgreSQL database."""
    if dialect == "sqlite":
        return f"sqlite:///{tmp_path / 'home' / 'geode.db'}"
    return str(request.getfixturevalue("pg_store_url"))


def write_home(tmp_path: Path, config: str, *, name: str = "home", exist_ok: bool = False) -> Path:
    """A daemon home ``tmp_path/name`` whose config.toml is ``config``."""
    home = tmp_path / name
    home.mkdir(exist_ok=exist_ok)
    (home / "config.toml").write_text(config)
    return home


def telegram_section(fake: FakeTelegramServer, extra: str = "") -> str:
    """``[channels.telegram]`` on ``fake`` with a scenario's short lease and pump, no progress
    edits and no group rate limit (``extra``: more lines of the section)."""
    return f"""
[channels.telegram]
base_url = "{fake.base_url}"
base_file_url = "{fake.base_file_url}"
poll_timeout_s = 1
lease_ttl_s = 1.5
progress_edit_interval_s = 0
stream = false
progress_after_ms = 0
pump_interval_s = 0.2
rate_group_per_min = 0
{extra}
"""


def discord_config(fake: FakeDiscord, binding_extra: str = "") -> str:
    """A config.toml on ``fake``: ``[channels.discord]`` with a scenario's short lease and
    pump, and one binding of its channel for its user (``binding_extra``: more lines of it)."""
    return f"""
[channels.discord]
api_base = "{fake.api_base}"
gateway_url = "{fake.gateway_url}"
lease_ttl_s = 1.5
progress_edit_interval_s = 0
stream = false
progress_after_ms = 0
pump_interval_s = 0.2
guild_ready_timeout_s = 0.2
identify_delay_s = 0

[[bindings]]
platform = "discord"
channel = "{fake.channel_id}"
allow_users = ["{fake.user_id}"]
{binding_extra}
"""


def serve_env(
    home: Path, tmp_path: Path, *, final: str, drop_prefix: str, **extra: str
) -> dict[str, str]:
    """Environment for a daemon on ``home`` whose scripted model answers ``final`` slowly.

    Each turn makes one slow model call (the window the daemon is killed in), then text.
    """
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"latency": 1.0, "script": [final]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEODE_", drop_prefix))}
    env.update(
        GEODE_HOME=str(home),
        GEODE_SCRIPTED_MODEL=str(script),
        GEODE_HEALTH_PORT=str(free_port()),
        # run this checkout's code, whatever `pip install -e` last pointed at
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
        **extra,
    )
    return env


async def start_serve(home: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    log = (home / "serve.log").open("ab")
    try:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "geode", "serve", env=env, cwd=str(home), stdout=log, stderr=log
        )
    finally:
        log.close()


async def kill_9(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL: no drain, no cleanup, the poller lease is left to expire."""
    proc.kill()
    await proc.wait()
    assert proc.returncode == -signal.SIGKILL


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), 20)
    except TimeoutError:
        proc.kill()
        await proc.wait()
