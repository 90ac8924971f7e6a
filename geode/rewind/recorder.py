"""The executor's pre-image recorder: what an effectful call may change in its workspace
is kept before the call runs, so a rewind can put it back.

Called after the checks allowed the call and its resource locks are held, right before
dispatch (where the timeline's ``tool.started`` is written). A file tool's pre-images are
whole when :meth:`PreImageRecorder.before` returns; ``run_bash`` gets a snapshot of the
workspace before and the diff after (:meth:`PreImageRecorder.after`), so only files the
command changed are referenced. A record that could not be made whole leaves the call
(and its turn) not rewindable, which a rewind says up front; the call itself still runs.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from geode.rewind._blobs import BlobStore, CallRecord
from geode.rewind._files import Snapshot, StatKey, capture, diff, missing_dirs, snapshot
from geode.tools.base import ToolContext, ToolDef

__all__ = ["PreImageRecorder"]

log = structlog.get_logger(__name__)

MB = 1024 * 1024
#: stat identities remembered between snapshots (a file unchanged since is not read again)
_KNOWN_MAX = 200_000


@dataclass(frozen=True)
class _Pending:
    record: CallRecord
    before: Snapshot
    skip: tuple[Path, ...]


class PreImageRecorder:
    """Keeps pre-images of workspace files in ``blobs`` before write / dangerous calls."""

    def __init__(self, *, blobs: BlobStore, max_snapshot_mb: int) -> None:
        self.blobs = blobs
        self.max_bytes = max_snapshot_mb * MB
        self._known: dict[StatKey, str] = {}

    async def before(self, *, ctx: ToolContext, tool: ToolDef,
                     keys: Sequence[str]) -> object | None:
        """Record the pre-images of what the call may change; returns what :meth:`after`
        needs (a snapshot to diff), or None. Never raises: a failure is recorded."""
        if tool.safety not in ("write", "dangerous"):
            return None  # external effects: nothing in the workspace to keep
        try:
            return await asyncio.to_thread(self._before, ctx, tool, keys)
        except Exception as exc:
            log.warning("rewind.preimage_failed", tool=tool.name, call_id=ctx.call_id,
                        exc_info=True)
            self._save_quietly(self._record(ctx, tool, "", state="failed",
                                            reason=f"its pre-image failed ({type(exc).__name__})"))
            return None

    async def after(self, token: object | None) -> None:
        """Diff the workspace against the snapshot taken before the call."""
        if not isinstance(token, _Pending):
            return
        try:
            await asyncio.to_thread(self._after, token)
        except Exception as exc:
            log.warning("rewind.snapshot_diff_failed", call_id=token.record.call_id,
                        exc_info=True)
            token.record.state, token.record.reason = (
                "failed", f"its changes could not be compared ({type(exc).__name__})")
            self._save_quietly(token.record)

    # -- blocking parts (worker thread) -----------------------------------------------------

    def _record(self, ctx: ToolContext, tool: ToolDef, root: str, *, state: str = "complete",
                reason: str = "") -> CallRecord:
        return CallRecord(session_id=ctx.session_id, turn_id=ctx.turn_id, call_id=ctx.call_id,
                          tool=tool.name, root=root, state=state,  # type: ignore[arg-type]
                          reason=reason)

    def _save_quietly(self, record: CallRecord) -> None:
        try:
            self.blobs.save_record(record)
        except OSError:
            log.warning("rewind.record_failed", call_id=record.call_id, exc_info=True)

    def _skip(self, ctx: ToolContext, root: Path) -> tuple[Path, ...]:
        """GEODE's own files the tools cannot reach from ``root`` (a protected directory
        that holds the workspace, ``$GEODE_HOME/workspaces``, is not one), and the blobs."""
        from geode.tools.builtin._workspace import protected_paths

        return (*protected_paths(ctx, root), Path(os.path.realpath(self.blobs.root)))

    def _before(self, ctx: ToolContext, tool: ToolDef, keys: Sequence[str]) -> object | None:
        root = Path(os.path.realpath(ctx.workspace))
        files: list[str] = []
        whole = False
        outside: list[str] = []
        for key in keys:
            kind, _, value = key.partition(":")
            if kind not in ("file", "dir"):
                continue
            path = Path(os.path.normpath(value))
            if path != root and root not in path.parents:
                outside.append(value)
            elif kind == "dir":
                whole = True
            else:
                files.append(os.path.relpath(path, root))
        if not files and not whole and not outside:
            return None  # touches nothing on disk we know of (e.g. the desktop)
        record = self._record(ctx, tool, str(root))
        if outside:
            record.state, record.reason = "failed", f"it may change {outside[0]}, outside " \
                "the workspace"
            self.blobs.save_record(record)
            return None
        if whole:
            skip = self._skip(ctx, root)
            if len(self._known) > _KNOWN_MAX:
                self._known.clear()
            snap = snapshot(self.blobs, root, max_bytes=self.max_bytes, skip=skip,
                            known=self._known)
            record.state = "pending"
            record.reason = "the command's end was not recorded"
            self.blobs.save_record(record)  # before dispatch: a crash leaves it pending
            return _Pending(record, snap, skip)
        for rel in files:
            state = capture(self.blobs, root, rel, max_bytes=self.max_bytes)
            if state is None:
                record.state = "over_bound"
                record.reason = f"{rel} is a directory or larger than the snapshot bound"
                break
            record.files[rel] = state
            if state.kind == "absent":
                record.dirs += missing_dirs(root, rel)
        self.blobs.save_record(record)
        return None

    def _after(self, pending: _Pending) -> None:
        record = pending.record
        changes = diff(pending.before, skip=pending.skip)
        if changes.lost or changes.kept_bytes > self.max_bytes:
            record.state = "over_bound"
            mb = self.max_bytes // MB
            record.reason = (f"it changed {changes.lost[0]}, which the {mb} MB snapshot bound "
                             "left out" if changes.lost else
                             f"it changed {changes.kept_bytes / MB:.1f} MB of files, over the "
                             f"{mb} MB snapshot bound")
        else:
            record.state, record.reason = "complete", ""
            record.files = changes.files
            record.dirs = changes.dirs
        self.blobs.save_record(record)
