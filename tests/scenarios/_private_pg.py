"""A private PostgreSQL cluster for a test that restarts or stops the database (never the
shared one in GEODE_TEST_PG_URL): the same steps as ``.ci/pg.sh``, from Python.

As root the server runs as the ``postgres`` user (``runuser``), which owns the cluster's
directory; otherwise as the current user. fsync is off: a test cluster, fast to start.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

__all__ = ["PrivatePostgres", "pg_bin"]


def pg_bin() -> Path | None:
    """The newest /usr/lib/postgresql/*/bin with initdb and pg_ctl (None: not installed)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: [int(x) for x in p.parent.parent.name.split(".") if x.isdigit()])
    return found[-1].parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    """One cluster in a fresh directory on a free loopback port; :meth:`close` removes it."""

    def __init__(self, *, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="geode-chaos-pg-", dir="/tmp"))
        self.port = _free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            if subprocess.run(["id", "postgres"], capture_output=True).returncode != 0:
                subprocess.run(["useradd", "-r", "-m", "postgres"], check=True)
            self._as = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.dir, user="postgres")
        self.url = f"postgresql+psycopg://geode@127.0.0.1:{self.port}/geode_chaos"

    def _ctl(self, *args: str) -> None:
        subprocess.run([*self._as, str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"),
                        *args], check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        subprocess.run([*self._as, str(self.bin / "initdb"), "-D", str(self.dir / "data"),
                        "-U", "geode", "--auth=trust"], check=True, capture_output=True,
                       timeout=120)
        self.start()
        subprocess.run([str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                        "-U", "geode", "geode_chaos"], check=True, capture_output=True,
                       timeout=60)

    def start(self) -> None:
        self._ctl("-l", str(self.dir / "log"), "-w", "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                  "-c max_connections=200", "start")

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection is cut, the server is back at once."""
        self._ctl("-l", str(self.dir / "log"), "-w", "-m", "fast", "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                  "-c max_connections=200", "restart")

    def stop(self) -> None:
        self._ctl("-w", "-m", "fast", "stop")

    async def arun(self, what: str) -> None:
        """:meth:`start` / :meth:`stop` / :meth:`restart` off the event loop."""
        await asyncio.to_thread(getattr(self, what))

    def close(self) -> None:
        try:
            self._ctl("-m", "immediate", "stop")
        except Exception:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
