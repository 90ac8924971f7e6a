"""Fork: a new session that starts from a checkpoint of another (``geode sessions fork``).

The new session's conversation is the original's at the end of the chosen turn; its
``parent_session_id`` names the original (the lineage a thread's ``/new`` keeps too), its
metadata says from which turn, and a ``session.forked`` row opens its timeline. The original
is not touched. The fork is an ordinary session: ``geode run --session NEW`` continues it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from geode.errors import ConfigError

if TYPE_CHECKING:
    from geode.store import CheckpointRow, Store

__all__ = ["Fork", "fork_session"]


@dataclass(frozen=True, kw_only=True)
class Fork:
    session_id: str
    parent_session_id: str
    #: the turn it starts after: its position (1 = the first) and id
    turn: int
    turn_id: str
    message_count: int


def _finished_turns(checkpoints: list[CheckpointRow]) -> list[CheckpointRow]:
    """The checkpoint that ended each finished turn, in order (a turn resumed after a
    crash ends once; turns a rewind took back are left out)."""
    ends: dict[str, CheckpointRow] = {}
    for cp in checkpoints:
        if cp.kind == "rewind":  # the turns it took back are not the session's any more
            ends = {k: v for k, v in ends.items() if v.message_count <= cp.message_count}
        elif cp.state.get("last_termination"):
            ends[str(cp.state.get("turn_id") or cp.turn_id)] = cp
    return sorted(ends.values(), key=lambda cp: cp.seq)


def _compacted_after(checkpoints: list[CheckpointRow], chosen: CheckpointRow) -> bool:
    """Whether the chain shrank after ``chosen`` (compaction rewrote the messages before)."""
    high = chosen.message_count
    for cp in checkpoints:
        if cp.seq > chosen.seq:
            if cp.kind == "rewind":  # went back to a turn at or after ``chosen``: not a cut
                high = cp.message_count
                continue
            if cp.message_count < high:
                return True
            high = cp.message_count
    return False


def _pick(ends: list[CheckpointRow], at: str | None, session_id: str) -> tuple[int, CheckpointRow]:
    if not ends:
        raise ConfigError(f"Session {session_id!r} has no finished turn to fork from.")
    if at is None:
        return len(ends), ends[-1]
    if at.isdigit() and 1 <= int(at) <= len(ends):
        return int(at), ends[int(at) - 1]
    for n, cp in enumerate(ends, 1):
        if str(cp.state.get("turn_id") or cp.turn_id) == at:
            return n, cp
    raise ConfigError(f"--at {at}: session {session_id!r} has {len(ends)} finished turn(s); "
                      f"give a number from 1 to {len(ends)} or a turn id "
                      "(`geode sessions timeline ID` shows them).")


async def fork_session(store: Store, session_id: str, *, at: str | None = None) -> Fork:
    """Fork ``session_id`` after its turn ``at`` (a 1-based number or a turn id; None: its
    latest finished turn).

    Raises:
        ConfigError: no such session, no such turn, or the chain no longer holds the turn's
            messages (the message says which).
    """
    record = await store.sessions.get(session_id)
    if record is None:
        raise ConfigError(f"No session {session_id!r}; `geode sessions list` shows them.")
    checkpoints = await store.checkpoints.list(session_id, limit=1_000_000)
    n, cp = _pick(_finished_turns(checkpoints), at, session_id)
    restored = await store.checkpointer(session_id).load()
    messages = restored.messages if restored is not None else []
    if _compacted_after(checkpoints, cp):
        raise ConfigError(f"Session {session_id!r}: the conversation was compacted after turn "
                          f"{n}, so the chain no longer holds it as it was; fork at a later "
                          "turn.")
    turn_id = str(cp.state.get("turn_id") or cp.turn_id)
    new_id = uuid.uuid4().hex
    origin = {"session_id": session_id, "turn": n, "turn_id": turn_id, "seq": cp.seq}
    title = f"fork of {record.title or session_id} after turn {n}"
    await store.sessions.create(new_id, mode=record.mode, model=record.model,
                                parent_session_id=session_id, title=title,
                                metadata={**record.metadata, "forked_from": origin})
    await store.checkpointer(new_id).save(
        messages=messages[:cp.message_count], state=dict(cp.state), status="active",
        kind="fork", turn_id=turn_id)
    await store.timeline.append(session_id=new_id, turn_id="", kind="session.forked",
                                payload=origin)
    return Fork(session_id=new_id, parent_session_id=session_id, turn=n, turn_id=turn_id,
                message_count=cp.message_count)
