"""EvidenceLedger: redacted JSONL diagnostic rows with content hashes, one file per UTC day.

``<root>/ledger/<YYYY-MM-DD>.jsonl``, append-only; each row is ``{seq, ts, session_id,
turn_id, kind, summary, payload_hash, payload}``. The payload is redacted before it is
hashed and written, so ``payload_hash`` (sha256 of its canonical JSON) can be checked by
anyone holding the file, and correlates with timeline rows carrying the same payload.

One file per day, not per session: a chat daemon opens a session for every new thread,
and a file per session created (and later pruned) one file per thread for what is often a
single row. Homes written before keep their ``<session>.jsonl`` files; :meth:`read` still
returns their rows first.

Appends run in a thread under an exclusive ``flock`` on the file, so several processes
(``geode serve`` replicas sharing a home) keep one monotonic ``seq`` per file. The process
remembers the file's end after its own last append (inode, size, seq): finding the file
still ending there under the lock, the next append takes the seq from it without reading
the file's tail back; any other writer (another process, a torn line, a removed file)
changes the end and the tail is read as before. Within one
process, :meth:`EvidenceLedger.read` waits for the appends already under way, so a reader
sees every row whose append started before its read (observers append in fire-and-forget
tasks; without this a read right after a run raced the last row).
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import re
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from geode.store.record_redaction import bound, canonical_json, redact, redact_text

__all__ = ["EvidenceLedger", "payload_hash"]

log = structlog.get_logger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_DAY_FILE = re.compile(r"^\d{4}-\d{2}-\d{2}\.jsonl$")
_SUMMARY_MAX = 500


def payload_hash(payload: Any) -> str:
    """sha256 (hex) of the canonical JSON of ``payload``."""
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


class EvidenceLedger:
    """Append-only, redacted JSONL rows under ``<root>/ledger/``, one file per UTC day.

    Args:
        root: the GEODE home (``$GEODE_HOME``); files go to ``root / "ledger"``.
        secrets: literal secret values to mask wherever they occur.
    """

    def __init__(self, root: Path, *, secrets: Iterable[str] = ()) -> None:
        self.dir = Path(root) / "ledger"
        self._secrets = tuple(secrets)
        self._inflight: dict[Path, set[asyncio.Future[dict[str, Any]]]] = {}
        #: per file, where this process's last append left it: (inode, size, seq)
        self._ends: dict[Path, tuple[int, int, int]] = {}

    def path_for(self, session_id: str) -> Path:
        """The file a row of ``session_id`` appended now goes to: today's (UTC)."""
        return self.dir / f"{datetime.now(UTC).date().isoformat()}.jsonl"

    def _legacy_path(self, session_id: str) -> Path:
        """Where a ledger before day files kept the session's rows (read, never written).
        Ids with unsafe characters got a hash suffix (no collisions)."""
        safe = _UNSAFE.sub("_", session_id)[:120]
        if safe != session_id:
            safe += "-" + hashlib.sha256(session_id.encode()).hexdigest()[:10]
        return self.dir / f"{safe}.jsonl"

    async def append(
        self,
        *,
        session_id: str,
        kind: str,
        turn_id: str = "",
        summary: str = "",
        payload: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Append one row and return it as written."""
        fut = self.submit(session_id=session_id, kind=kind, turn_id=turn_id, summary=summary,
                          payload=payload)
        # Shielded: a cancelled caller must not hide a row still being written from read().
        return await asyncio.shield(fut)

    def submit(
        self,
        *,
        session_id: str,
        kind: str,
        turn_id: str = "",
        summary: str = "",
        payload: dict[str, Any] | None = None,
    ) -> asyncio.Future[dict[str, Any]]:
        """Start appending one row (on the running loop's executor) and return its future,
        the row as written: :meth:`append` for a caller that does not wait (an observer),
        without a task of its own. :meth:`read` waits for it like for any append."""
        clean = bound(redact(payload or {}, self._secrets))
        short = redact_text(summary, self._secrets)[:_SUMMARY_MAX]
        row: dict[str, Any] = {
            "seq": 0,  # assigned under the file lock
            "ts": datetime.now(UTC).isoformat(),
            "session_id": session_id,
            "turn_id": turn_id,
            "kind": kind,
            "summary": short,
            "payload_hash": payload_hash(clean),
            "payload": clean,
        }
        path = self.path_for(session_id)
        # a future of the executor's, not a task: nothing runs on the loop meanwhile
        fut = asyncio.get_running_loop().run_in_executor(None, self._append_sync, path, row)
        pending = self._inflight.setdefault(path, set())
        pending.add(fut)

        def _done(f: asyncio.Future[dict[str, Any]]) -> None:
            pending.discard(f)
            if not pending and self._inflight.get(path) is pending:
                del self._inflight[path]

        fut.add_done_callback(_done)
        return fut

    def _append_sync(self, path: Path, row: dict[str, Any]) -> dict[str, Any]:
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:  # the first row of this home (or the folder was removed)
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            end = self._ends.get(path)
            known = end is not None and end[:2] == (st.st_ino, st.st_size)
            # Known: the file ends where this process's last row did, that row is the last.
            row["seq"] = (end[2] if known and end is not None else _last_seq(fd)) + 1
            line = (json.dumps(row, ensure_ascii=False, default=str) + "\n").encode()
            if not known and st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
                line = b"\n" + line  # a previous writer died mid-line: keep rows apart
            written = os.write(fd, line)
            if written == len(line):
                self._ends[path] = (st.st_ino, st.st_size + written, row["seq"])
            else:  # a short write (disk full): the next append reads the tail again
                self._ends.pop(path, None)
        finally:
            os.close(fd)  # also releases the flock
        return row

    async def read(self, session_id: str) -> list[dict[str, Any]]:
        """Every row of the session, in order: its pre-day-file rows, then day by day.

        Waits first for this process's appends that are under way.
        """
        pending = [f for futs in self._inflight.values() for f in futs]
        if pending:
            await asyncio.wait(pending)
        return await asyncio.to_thread(self._read_sync, session_id)

    def _read_sync(self, session_id: str) -> list[dict[str, Any]]:
        days = sorted(p for p in self.dir.glob("*.jsonl") if _DAY_FILE.match(p.name)) \
            if self.dir.is_dir() else []
        legacy = self._legacy_path(session_id)
        # A row is parsed only if its line names the session (a day file holds every one).
        needle = json.dumps(session_id, ensure_ascii=False)
        rows = []
        for path in [legacy, *days] if legacy.exists() and legacy not in days else days:
            with path.open(encoding="utf-8") as fh:
                for line in fh:
                    if needle in line and line.strip():
                        try:
                            row = json.loads(line)
                        except ValueError:
                            continue  # a line torn by a writer that died
                        if row.get("session_id") == session_id:
                            rows.append(row)
        return rows

    async def prune(self, older_than_days: float) -> int:
        """Delete ledger files not written for ``older_than_days``; returns how many."""
        return await asyncio.to_thread(self._prune_sync, older_than_days)

    def _prune_sync(self, older_than_days: float) -> int:
        if not self.dir.exists():
            return 0
        cutoff = time.time() - older_than_days * 86_400
        removed = 0
        for path in self.dir.glob("*.jsonl"):
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
            except FileNotFoundError:
                continue
        log.info("ledger.pruned", removed=removed, older_than_days=older_than_days)
        return removed


def _last_seq(fd: int) -> int:
    """The seq of the file's last row (0 if empty), reading only the file's tail."""
    size = os.lseek(fd, 0, os.SEEK_END)
    if size == 0:
        return 0
    chunk = min(size, 1 << 16)
    while True:
        tail = os.pread(fd, chunk, size - chunk)
        lines = [ln for ln in tail.split(b"\n") if ln.strip()]
        # The first line of a partial chunk may be cut; only trust it if we read from 0.
        complete = lines if chunk == size else lines[1:]
        for raw in reversed(complete):
            try:
                return int(json.loads(raw)["seq"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn or foreign line: look further back
        if chunk == size:
            return 0
        chunk = min(size, chunk * 4)
