"""A real `geode serve` subprocess for the kill -9 scenarios (shared by all platforms)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
