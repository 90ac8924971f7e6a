"""What a rewind of a session's last N turns would do, worked out before anything moves.

The plan names the checkpoint the session goes back to (the end of the turn before the
rewound ones, or the empty conversation), the calls whose files are put back (newest
first), the effects that cannot be undone (every effectful call with no pre-image: a
message or file sent, an MCP or web call, a change outside the workspace) and the reasons
a rewind is refused (a turn running, a compaction since, a call whose pre-image is not
whole, such as a ``run_bash`` that changed more than ``[rewind] max_snapshot_mb``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geode.errors import ConfigError
from geode.rewind._blobs import BlobStore, CallRecord

if TYPE_CHECKING:
    from geode.store import CheckpointRow, Store

__all__ = ["Irreversible", "RewindPlan", "TurnRef", "finished_turns", "plan_rewind"]


@dataclass(frozen=True, kw_only=True)
class TurnRef:
    #: 1 = the session's first turn still on its chain
    number: int
    turn_id: str


@dataclass(frozen=True, kw_only=True)
class Irreversible:
    """An effect of a rewound turn that a rewind cannot undo."""

    turn: int
    call_id: str
    tool: str
    status: str

    def describe(self) -> str:
        return f"turn {self.turn}: {self.tool} ({self.status})"


@dataclass(frozen=True, kw_only=True)
class RewindPlan:
    session_id: str
    turns: list[TurnRef]
    #: the head the plan was made at (the rewind is refused if it moved)
    head_seq: int
    target_seq: int
    target_count: int
    target_state: dict[str, Any]
    target_turn_id: str
    #: the records of the calls whose files are put back, newest first
    records: list[CallRecord] = field(default_factory=list)
    irreversible: list[Irreversible] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    #: the tools of the rewound turns' effectful calls (who must confirm may depend on them)
    tools: list[str] = field(default_factory=list)

    @property
    def files(self) -> list[str]:
        """The workspace files put back (as the model sees them: relative paths)."""
        return sorted({rel for r in self.records for rel in r.files})

    def to_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id,
                "turns": [{"number": t.number, "turn_id": t.turn_id} for t in self.turns],
                "files": self.files, "tools": self.tools,
                "irreversible": [{"turn": i.turn, "call_id": i.call_id, "tool": i.tool,
                                  "status": i.status} for i in self.irreversible],
                "blockers": self.blockers, "rewindable": not self.blockers}

    def intent(self, *, intent_id: str, by: str, by_name: str) -> dict[str, Any]:
        """What the intent record keeps: enough to finish the rewind in any process."""
        return {"id": intent_id, "seq": self.head_seq, "by": by, "by_name": by_name,
                "turns": [t.turn_id for t in self.turns],
                "numbers": [t.number for t in self.turns],
                "calls": [r.call_id for r in self.records],
                "files": self.files,
                "irreversible": [i.describe() for i in self.irreversible],
                "target": {"seq": self.target_seq, "message_count": self.target_count,
                           "state": self.target_state, "turn_id": self.target_turn_id}}


def finished_turns(checkpoints: list[CheckpointRow]) -> list[CheckpointRow]:
    """The checkpoint that ended each turn still on the session's chain, in order: a turn
    resumed after a crash ends once; turns a rewind took back are left out."""
    ends: dict[str, CheckpointRow] = {}
    for cp in checkpoints:
        if cp.kind == "rewind":
            ends = {k: v for k, v in ends.items() if v.message_count <= cp.message_count}
        elif cp.state.get("last_termination"):
            ends[str(cp.state.get("turn_id") or cp.turn_id)] = cp
    return sorted(ends.values(), key=lambda cp: cp.seq)


async def plan_rewind(store: Store, blobs: BlobStore, session_id: str, *,
                      turns: int) -> RewindPlan:
    """Plan the rewind of the last ``turns`` turns of ``session_id``.

    Raises:
        ConfigError: no such session, or fewer turns than asked (the message says how many).
    """
    record = await store.sessions.get(session_id)
    if record is None:
        raise ConfigError(f"No session {session_id!r}; `geode sessions list` shows them.")
    checkpoints = await store.checkpoints.list(session_id, limit=1_000_000)
    ends = finished_turns(checkpoints)
    if turns < 1 or turns > len(ends):
        raise ConfigError(f"Session {session_id!r} has {len(ends)} turn(s) to rewind; "
                          f"give a number from 1 to {len(ends)}." if ends else
                          f"Session {session_id!r} has no finished turn to rewind.")
    head = checkpoints[-1]
    blockers: list[str] = []
    if head.seq != ends[-1].seq and head.kind != "rewind":
        blockers.append("a turn is running or was interrupted; wait for it or stop it first")
    rewound = ends[len(ends) - turns:]
    target = ends[len(ends) - turns - 1] if turns < len(ends) else None
    count = target.message_count if target is not None else 0
    if any(cp.kind != "rewind" and cp.seq > (target.seq if target else 0)
           and cp.message_count < count for cp in checkpoints):
        blockers.append("the conversation was compacted since; it no longer holds those "
                        "turns as they were")
    refs = [TurnRef(number=len(ends) - turns + i + 1,
                    turn_id=str(cp.state.get("turn_id") or cp.turn_id))
            for i, cp in enumerate(rewound)]
    number = {t.turn_id: t.number for t in refs}
    receipts = [r for r in await store.receipts.list_for(session_id) if r.turn_id in number]
    records: list[CallRecord] = []
    irreversible: list[Irreversible] = []
    loaded = await asyncio.gather(*(asyncio.to_thread(blobs.load_record, session_id, r.call_id)
                                    for r in receipts))
    for receipt, kept in zip(receipts, loaded, strict=True):
        if kept is None:
            irreversible.append(Irreversible(turn=number[receipt.turn_id], call_id=receipt.call_id,
                                             tool=receipt.tool, status=receipt.status))
        elif kept.state != "complete":
            blockers.append(f"turn {number[receipt.turn_id]}: {receipt.tool} cannot be undone: "
                            f"{kept.reason or kept.state}")
        elif kept.files or kept.dirs:
            if not await asyncio.to_thread(Path(kept.root).is_dir):
                blockers.append(f"turn {number[receipt.turn_id]}: the workspace {kept.root} "
                                "is gone")
            records.append(kept)
    records.reverse()  # newest first: each file ends as it was before the oldest change
    return RewindPlan(
        session_id=session_id, turns=refs, head_seq=head.seq,
        target_seq=target.seq if target is not None else 0, target_count=count,
        target_state=dict(target.state) if target is not None else {},
        target_turn_id=str(target.state.get("turn_id") or target.turn_id) if target else "",
        records=records, irreversible=irreversible, blockers=blockers,
        tools=sorted({r.tool for r in receipts}))
