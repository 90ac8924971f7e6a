"""Lease holders of one ``$GEODE_HOME`` on this host: which of them are dead.

A lease (the bot's intake lease, a thread's lease) names its holder: a replica's connector
(``host:pid:token``). A holder that stops renewing loses its leases after ``lease_ttl_s``;
that wait is what replicas on other hosts must do (nobody there can tell a dead replica from
a slow one). A restart on the same home need not wait for its own dead predecessor: it can
know that process is gone.

How it knows: each process holding leases keeps a lock file in ``$GEODE_HOME/holders/``,
``flock``-ed for its whole life and naming the holders it runs. The kernel releases a
``flock`` when the process dies, by SIGKILL and OOM kill included, so a lock file that can
be locked belongs to a dead process, whatever became of its pid since (no pid check, so pid
reuse and pid namespaces cannot fool it). The first registration of a process collects the
dead files of the home (only those written on this host: a home shared over a network file
system whose locks do not cross hosts must not make a live replica elsewhere look dead),
inherits their names into its own file (a restart that dies before it took everything over
hands them on), and removes them.

Every failure here (no home, a read-only one, a file system without ``flock``) only means
that no predecessor is known: the leases then expire by their TTL, as they always did.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import secrets
import socket
import threading
from pathlib import Path

import structlog

__all__ = ["HolderRegistry", "host_identity", "registry_for"]

log = structlog.get_logger(__name__)

#: the names inherited from dead predecessors kept in a live file (a chain of restarts that
#: each die before taking everything over is bounded; past it, the TTL takes over)
MAX_INHERITED = 64


@functools.cache
def host_identity() -> str:
    """This host: its name and machine id (the boot id where there is no machine id).

    Only lock files written under the same identity are trusted as "dead": a file system
    shared between hosts whose locks do not travel between them is not evidence."""
    machine = ""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id",
                 "/proc/sys/kernel/random/boot_id"):
        with contextlib.suppress(OSError):
            machine = Path(path).read_text().strip()
        if machine:
            break
    return f"{socket.gethostname()}|{machine}"


class HolderRegistry:
    """This process's lock file in a home's ``holders/`` folder, and the dead holders found
    there when it was made.

    Args:
        home: ``$GEODE_HOME``.
        host: this host's identity (:func:`host_identity`; tests give another).
    """

    def __init__(self, *, home: Path, host: str | None = None) -> None:
        self.folder = home / "holders"
        self.host = host if host is not None else host_identity()
        self._fd: int | None = None
        self._names: list[str] = []
        #: holders of this home known dead (their process is gone)
        self.dead: frozenset[str] = frozenset()
        self._opened = False
        self._lock = threading.Lock()

    def register(self, name: str) -> frozenset[str]:
        """Mark ``name`` as a live holder of this process (until it exits); returns the dead
        holders of this home (whose leases ``name`` may take over at once)."""
        with self._lock:
            if not self._opened:
                self._opened = True
                try:
                    self._open()
                except OSError as exc:
                    log.warning("holders.unavailable", folder=str(self.folder), error=str(exc))
            if name not in self._names:
                self._names.append(name)
                self._write()
            return self.dead

    def close(self) -> None:
        """Release this process's file (tests; a process just exits)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    # -- internals ------------------------------------------------------------------------

    def _open(self) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = f"{os.getpid()}-{secrets.token_hex(4)}"
        path = self.folder / f"{name}.lock"
        # Locked and written under a name nobody scans, then renamed: a ``*.lock`` file is
        # never seen unlocked while its process lives.
        tmp = self.folder / f".{name}.tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._fd = fd
            self._write()
            tmp.rename(path)
        except OSError:
            self._fd = None
            os.close(fd)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        # Ours before the others are read: a restart racing another sees this one live.
        dead: set[str] = set()
        for other in sorted(self.folder.glob("*.lock")):
            if other != path:
                dead |= self._collect(other)
        self.dead = frozenset(dead)
        if dead:
            log.info("holders.dead_predecessors", names=sorted(dead))

    def _collect(self, path: Path) -> set[str]:
        """The names in ``path`` if its process is dead (its lock is free) and it was written
        on this host; a dead file is removed (its names live on in this process's file)."""
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            return set()  # removed meanwhile, or not ours to read
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return set()  # held: its process is alive
            try:
                record = json.loads(os.pread(fd, 1 << 20, 0) or b"{}")
            except ValueError:
                record = {}
            if not isinstance(record, dict) or not record.get("host"):
                with contextlib.suppress(OSError):
                    path.unlink()  # unreadable, and dead: nothing in it to take over
                return set()
            if record.get("host") != self.host:
                return set()  # another host's (a shared file system): not evidence here
            names = {str(n) for key in ("names", "inherited") for n in record.get(key) or []}
            with contextlib.suppress(OSError):
                path.unlink()
            return names
        finally:
            os.close(fd)

    def _write(self) -> None:
        if self._fd is None:
            return
        inherited = sorted(self.dead)[:MAX_INHERITED]
        data = json.dumps({"host": self.host, "pid": os.getpid(), "names": self._names,
                           "inherited": inherited}).encode()
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)
        except OSError as exc:
            log.warning("holders.write_failed", error=str(exc))


_registries: dict[tuple[Path, int], HolderRegistry] = {}
_registries_lock = threading.Lock()


def registry_for(home: Path) -> HolderRegistry:
    """The registry of ``home`` for this process (one lock file per process and home: every
    connector of the process registers its name in it and sees the same dead holders)."""
    key = (home.resolve(), os.getpid())
    with _registries_lock:
        found = _registries.get(key)
        if found is None:
            found = _registries[key] = HolderRegistry(home=key[0])
        return found
