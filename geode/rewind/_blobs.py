"""Where rewind keeps what it needs to put files back: content-addressed blobs and one
record per effectful call (``$GEODE_HOME/rewind/``).

A blob is named by the SHA-256 of its bytes, so a file captured by many calls is kept
once. A call record is JSON, written atomically (temporary file, fsync, rename): it is
either there whole or not at all, and a crash never leaves half of one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = ["BlobStore", "CallRecord", "PreState", "RecordState"]

#: ``complete``: every file the call could change has its pre-image; ``pending``: the
#: call's snapshot was taken but its end was not recorded (the process died while it ran);
#: ``over_bound``: it changed more than ``[rewind] max_snapshot_mb``; ``failed``: the
#: pre-image could not be recorded. Only ``complete`` can be rewound.
RecordState = Literal["complete", "pending", "over_bound", "failed"]


@dataclass(frozen=True, kw_only=True)
class PreState:
    """A path as it was before a call: a file (its blob and mode), a symlink, or absent."""

    kind: Literal["file", "link", "absent"]
    blob: str = ""
    mode: int = 0o644
    target: str = ""
    size: int = 0

    def to_json(self) -> dict[str, Any]:
        if self.kind == "file":
            return {"kind": "file", "blob": self.blob, "mode": self.mode, "size": self.size}
        if self.kind == "link":
            return {"kind": "link", "target": self.target}
        return {"kind": "absent"}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PreState:
        return cls(kind=data["kind"], blob=str(data.get("blob", "")),
                   mode=int(data.get("mode", 0o644)), target=str(data.get("target", "")),
                   size=int(data.get("size", 0)))


@dataclass(kw_only=True)
class CallRecord:
    """What one effectful call changed in its workspace, as it was before the call."""

    session_id: str
    turn_id: str
    call_id: str
    tool: str
    #: the workspace's real path; ``files`` and ``dirs`` are relative to it
    root: str
    state: RecordState
    reason: str = ""
    files: dict[str, PreState] = field(default_factory=dict)
    #: directories the call created (removed on rewind when they are empty again)
    dirs: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"v": 1, "session_id": self.session_id, "turn_id": self.turn_id,
                "call_id": self.call_id, "tool": self.tool, "root": self.root,
                "state": self.state, "reason": self.reason,
                "files": {k: v.to_json() for k, v in self.files.items()}, "dirs": self.dirs}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CallRecord:
        return cls(session_id=data["session_id"], turn_id=data["turn_id"],
                   call_id=data["call_id"], tool=data["tool"], root=data["root"],
                   state=data["state"], reason=str(data.get("reason", "")),
                   files={k: PreState.from_json(v) for k, v in data.get("files", {}).items()},
                   dirs=list(data.get("dirs", [])))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


def write_atomic(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` whole, or what it held before (never a torn write)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # unique per writer: two calls of one batch may keep the same blob at the same time
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class BlobStore:
    """Blobs and call records under one directory (``$GEODE_HOME/rewind``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _blob_path(self, sha: str) -> Path:
        return self.root / "blobs" / sha[:2] / sha[2:]

    def put(self, data: bytes) -> str:
        """Keep ``data``; returns its name. A blob already kept is not written again."""
        sha = hashlib.sha256(data).hexdigest()
        path = self._blob_path(sha)
        if not path.exists():
            write_atomic(path, data)
        return sha

    def has(self, sha: str) -> bool:
        return self._blob_path(sha).exists()

    def get(self, sha: str) -> bytes:
        data = self._blob_path(sha).read_bytes()
        if hashlib.sha256(data).hexdigest() != sha:
            raise OSError(f"rewind blob {sha[:12]} is damaged")
        return data

    def _record_path(self, session_id: str, call_id: str) -> Path:
        return self.root / "calls" / _digest(session_id) / f"{_digest(call_id)}.json"

    def save_record(self, record: CallRecord) -> None:
        text = json.dumps(record.to_json(), ensure_ascii=False, sort_keys=True)
        write_atomic(self._record_path(record.session_id, record.call_id), text.encode())

    def load_record(self, session_id: str, call_id: str) -> CallRecord | None:
        path = self._record_path(session_id, call_id)
        try:
            return CallRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            return CallRecord(session_id=session_id, turn_id="", call_id=call_id, tool="",
                              root="", state="failed", reason="its record is unreadable")
