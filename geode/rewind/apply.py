"""Run a planned rewind, and finish one a dead process left half done.

Order (so a rewind happens whole or not at all, across processes and replicas):

1. the plan is written as the session's intent (:meth:`RewindStore.write_intent`), refused if
   the session moved since it was planned;
2. the files are put back from their pre-images, newest call first — idempotent, so doing
   it again after a crash ends in the same files;
3. one transaction moves the head (:meth:`RewindStore.commit`): the conversation as it was is
   kept in an archive session, the chain gets a ``rewind`` link with the target's state,
   the intent is cleared and the ``session.rewound`` timeline row written.

A process that finds an intent (:func:`finish_pending`: when a session is opened, when
``geode serve`` starts, when a rewind is asked for) does 2 and 3 again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from geode.errors import ConfigError
from geode.rewind._blobs import BlobStore
from geode.rewind._files import remove_empty_dirs, restore
from geode.store.rewinds import RewindStore

if TYPE_CHECKING:
    from geode.rewind.plan import RewindPlan
    from geode.store import Store

__all__ = ["RewindResult", "finish_all_pending", "finish_pending", "rewind"]

log = structlog.get_logger(__name__)

#: a test's hook, called with the name of each point a rewind passes ("confirmed",
#: "intent_written", "file_restored" (each file), "files_restored"); installed only by the
#: test suite's launcher (tests/rewind/_paused_rewind.py), never by a config or environment
PAUSE: Callable[[str], None] | None = None


def _point(name: str) -> None:
    if PAUSE is not None:
        PAUSE(name)


@dataclass(frozen=True, kw_only=True)
class RewindResult:
    session_id: str
    turns: list[int]
    #: workspace files put back (relative paths), and those already as they were
    restored: list[str] = field(default_factory=list)
    irreversible: list[str] = field(default_factory=list)
    archive_session_id: str = ""
    #: False: another process finished this rewind first
    applied: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "turns": self.turns, "restored": self.restored,
                "irreversible": self.irreversible,
                "archive_session_id": self.archive_session_id, "applied": self.applied}


async def rewind(store: Store, blobs: BlobStore, plan: RewindPlan, *, by: str,
                 by_name: str = "") -> RewindResult:
    """Rewind as ``plan`` says; ``by`` / ``by_name`` name who asked (and confirmed).

    Raises:
        ConfigError: the plan has blockers (the message lists them).
        RewindConflictError: the session moved since the plan was made, or another rewind
            is in progress.
    """
    if plan.blockers:
        raise ConfigError("This rewind cannot run: " + "; ".join(plan.blockers))
    intent = plan.intent(intent_id=uuid.uuid4().hex, by=by, by_name=by_name)
    _point("confirmed")
    await RewindStore(store=store).write_intent(plan.session_id, intent)
    _point("intent_written")
    result = await _finish(store, blobs, plan.session_id, intent)
    assert result is not None
    return result


async def finish_pending(store: Store, blobs: BlobStore, session_id: str) -> RewindResult | None:
    """Finish the session's unfinished rewind, if it has one (None when it has none)."""
    intent = await RewindStore(store=store).pending(session_id)
    if intent is None:
        return None
    log.warning("rewind.resumed", session_id=session_id, intent_id=intent.get("id"))
    return await _finish(store, blobs, session_id, intent)


async def finish_all_pending(store: Store, blobs: BlobStore) -> list[RewindResult]:
    """Finish every unfinished rewind of the store (a process starting)."""
    done = []
    for session_id in await RewindStore(store=store).sessions_pending():
        try:
            result = await finish_pending(store, blobs, session_id)
        except Exception:
            log.exception("rewind.resume_failed", session_id=session_id)
            continue
        if result is not None:
            done.append(result)
    return done


async def _finish(store: Store, blobs: BlobStore, session_id: str,
                  intent: dict[str, Any]) -> RewindResult | None:
    restored = await asyncio.to_thread(_restore_files, blobs, session_id, intent)
    _point("files_restored")
    committed = await RewindStore(store=store).commit(
        session_id, str(intent["id"]),
        timeline={"by": intent.get("by", ""), "by_name": intent.get("by_name", ""),
                  "turns": intent.get("numbers", []), "turn_ids": intent.get("turns", []),
                  "files": restored, "irreversible": intent.get("irreversible", []),
                  "to_seq": intent["target"]["seq"]})
    log.info("rewind.done", session_id=session_id, turns=intent.get("numbers"),
             files=len(restored), applied=committed.applied)
    return RewindResult(session_id=session_id, turns=list(intent.get("numbers", [])),
                        restored=restored, irreversible=list(intent.get("irreversible", [])),
                        archive_session_id=committed.archive_id, applied=committed.applied)


def _restore_files(blobs: BlobStore, session_id: str, intent: dict[str, Any]) -> list[str]:
    """Put back every file of the intent's calls, newest call first (blocking)."""
    touched: set[str] = set()
    for call_id in intent.get("calls", []):
        record = blobs.load_record(session_id, call_id)
        if record is None or record.state != "complete":
            raise ConfigError(f"the pre-images of call {call_id} are gone; the rewind of "
                              f"session {session_id!r} cannot finish")
        root = Path(record.root)
        for rel, state in record.files.items():
            restore(blobs, root, rel, state)
            touched.add(rel)
            _point("file_restored")
        remove_empty_dirs(root, record.dirs)
    return sorted(touched)
