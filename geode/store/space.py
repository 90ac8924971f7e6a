"""Free space on the SQLite store's volume: what /readyz and the log say when it is full.

A full volume does not stop reads (the ping still answers), so a store that cannot write
would otherwise look ready. SQLite itself keeps the file consistent when a write fails for
space (the transaction is rolled back, ``PRAGMA integrity_check`` stays ``ok``); the callers
retry their writes, and nothing is acknowledged before it is committed, so the work waits
until space returns. This module only makes the state visible.
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

__all__ = ["FULL_BELOW_BYTES", "volume_problem"]

log = structlog.get_logger(__name__)

#: below this many free bytes the store's volume counts as full (a turn's checkpoint and
#: the WAL's growth need room; 1 MiB is a few turns at most)
FULL_BELOW_BYTES = 1 << 20

#: the folders reported full, so the transitions are logged once each, not every probe
_full: set[str] = set()


def volume_problem(db_path: str) -> str | None:
    """None while the volume of the SQLite file ``db_path`` has room; else what to tell the
    operator (logged once as ``store.volume_full``, and ``store.volume_ok`` when it has room
    again)."""
    folder = str(Path(db_path).parent)
    try:
        st = os.statvfs(folder)
    except OSError:
        return None  # the store's own checks say what is wrong with the path
    # root may write into the blocks the file system keeps back; other users may not
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    free = blocks * st.f_frsize
    if free >= FULL_BELOW_BYTES:
        if folder in _full:
            _full.discard(folder)
            log.info("store.volume_ok", folder=folder, free_bytes=free)
        return None
    problem = (f"the store's volume is full: {free:,} bytes free at {folder}; writes fail "
               "until space is freed there (nothing is lost: work waits in the platform "
               "or the store)")
    if folder not in _full:
        _full.add(folder)
        log.error("store.volume_full", folder=folder, free_bytes=free)
    return problem
