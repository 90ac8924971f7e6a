"""Fixtures for the daemon tests: short GEODE homes, scripted models, daemons in-process and
as real ``geode serve`` subprocesses, and an isolated PostgreSQL schema."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from sqlalchemy.engine import make_url

from geode.daemon import Daemon, IPCClient, scripted_factory
from geode.settings import load_settings

PG_URL = os.environ.get("GEODE_TEST_PG_URL", "")
REPO = Path(__file__).resolve().parents[2]
# The CLI entry as a module call: works whether or not `geode` is installed on PATH.
CLI = [sys.executable, "-c",
       "import sys; from geode.cli import main; "
       "sys.argv[0] = 'geode'; main()"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def home() -> Iterator[Path]:
    """A short GEODE_HOME (tmp_path can exceed the 107-byte socket path limit)."""
    path = Path(tempfile.mkdtemp(prefix="gd-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def write_script(path: Path, items: list[Any], latency: float = 0.0) -> Path:
    path.write_text(json.dumps({"latency": latency, "script": items}), encoding="utf-8")
    return path


def env_for(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEODE_")}
    env.update({"GEODE_HOME": str(home), "GEODE_HEALTH_PORT": str(free_port())})
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    env.update(extra)
    return env


# -- in-process daemons ------------------------------------------------------------------------

DaemonMaker = Callable[..., Awaitable[Daemon]]


@pytest.fixture
async def make_daemon(home: Path) -> AsyncIterator[DaemonMaker]:
    started: list[Daemon] = []

    async def make(
        script: list[Any], *, latency: float = 0.0, home_dir: Path | None = None,
        env: dict[str, str] | None = None, **kw: Any,
    ) -> Daemon:
        h = home_dir or home
        h.mkdir(parents=True, exist_ok=True)
        settings, secrets = load_settings(
            env={"GEODE_HOME": str(h), "GEODE_HEALTH_PORT": str(free_port()), **(env or {})},
            cwd=h,
        )
        factory = kw.pop("provider_factory", None) or scripted_factory(
            write_script(h / f"script-{uuid.uuid4().hex[:6]}.json", script, latency)
        )
        d = Daemon(settings=settings, secrets=secrets, provider_factory=factory, **kw)
        await d.start()
        started.append(d)
        return d

    yield make
    for d in started:
        await d.shutdown()


async def run_ipc(sock: Path, frame: dict[str, Any],
                  answer: Callable[[dict[str, Any]], str | None] | None = None,
                  ) -> list[dict[str, Any]]:
    """Send one run frame; collect every frame up to the result/error (answering approvals)."""
    client = await IPCClient.connect(sock)
    frames: list[dict[str, Any]] = []
    try:
        await client.send(frame)
        while True:
            msg = await client.recv()
            assert msg is not None, f"daemon closed the connection after {frames}"
            frames.append(msg)
            if msg["type"] == "approval_request" and answer is not None:
                reply = answer(msg)
                if reply is not None:
                    await client.send({"type": "approval", "request_id": msg["request_id"],
                                       "answer": reply})
            if msg["type"] in ("result", "error"):
                return frames
    finally:
        await client.close()


# -- geode serve subprocesses ------------------------------------------------------------------


class ServeProcess:
    def __init__(self, proc: subprocess.Popen[bytes], home: Path, port: int, log: Path) -> None:
        self.proc = proc
        self.home = home
        self.port = port
        self.log = log
        self.sock = home / "cli.sock"

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def readyz(self, timeout: float = 30) -> dict[str, Any]:
        """/readyz's body once it says ready. Like a container's start period, this waits: the
        socket line can come a few milliseconds before the last component's first tick (the
        scheduler says "starting" until then), which is a 503 an operator's probe retries."""
        url = f"http://127.0.0.1:{self.port}/readyz"
        deadline = time.monotonic() + timeout
        body: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=10) as r:
                    return dict(json.loads(r.read()))
            except urllib.error.HTTPError as exc:
                body = json.loads(exc.read())
            time.sleep(0.05)
        raise AssertionError(f"/readyz not ready after {timeout}s: {body}\n{self.output()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"geode serve did not stop on {sig}:\n{self.output()}") from None


def start_serve(home: Path, *, script: Path | None = None, args: tuple[str, ...] = (),
                **env_extra: str) -> ServeProcess:
    extra = dict(env_extra)
    if script is not None:
        extra["GEODE_SCRIPTED_MODEL"] = str(script)
    env = env_for(home, **extra)
    log = home / f"serve-{uuid.uuid4().hex[:6]}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*CLI, "serve", *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT, cwd=str(home))
    sp = ServeProcess(proc, home, int(env["GEODE_HEALTH_PORT"]), log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"geode serve exited {proc.returncode}:\n{sp.output()}")
        if sp.sock.exists() and "geode serve: socket" in sp.output():
            return sp
        time.sleep(0.05)
    sp.stop(signal.SIGKILL)
    raise AssertionError(f"geode serve did not come up:\n{sp.output()}")


def geode(home: Path, *args: str, stdin: str = "", timeout: float = 60,
          **env_extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env_for(home, **env_extra), input=stdin,
                          capture_output=True, text=True, timeout=timeout, cwd=str(home))


# -- PostgreSQL --------------------------------------------------------------------------------


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema, dropped after the test."""
    import psycopg

    if not PG_URL:
        if os.environ.get("CI") == "true":
            pytest.fail("GEODE_TEST_PG_URL is not set under CI=true: the PostgreSQL tests must run")
        pytest.skip("GEODE_TEST_PG_URL not set")
    schema = f"d_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq(PG_URL), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with contextlib.suppress(Exception), psycopg.connect(_libpq(PG_URL),
                                                             autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
