"""A recorded session as replay reads it: its turns, each with the user's input, the model's
responses in order, the tools' recorded results and the timeline's decisions.

Built from the store (:func:`load_recording`: the checkpoint chain's messages, the timeline,
the effect receipts) or from an export (:func:`read_jsonl`); :func:`to_jsonl` writes the
export. Every record goes through the records' redaction on the way out: a secret that
reached a record is masked there already, and masked again here with what the process knows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from geode.errors import ConfigError
from geode.messages import Message, ToolResultBlock
from geode.store.record_redaction import redact

if TYPE_CHECKING:
    from geode.store import CheckpointRow, Store

__all__ = [
    "FORMAT", "RecordedTurn", "Recording", "binding_of", "load_recording", "read_jsonl",
    "to_jsonl",
]

#: the export's format version (the header's ``format``); a reader refuses a newer one
FORMAT = 1

#: the timeline rows a replay compares or reads (the others are observation of the host)
_DECISION_KINDS = ("tool.", "approval.", "verify", "turn.finished", "model.call", "loop.guard")


@dataclass(frozen=True, kw_only=True)
class RecordedTurn:
    """One user turn as it was recorded."""

    turn_id: str
    #: the user's message the turn started with (its text; images are not replayed)
    input: str
    #: the model's responses, in the order the loop received them
    responses: tuple[Message, ...] = ()
    #: the results the tools gave, by call id
    results: Mapping[str, ToolResultBlock] = field(default_factory=dict)
    #: the turn's timeline rows a replay reads: ``{"kind", "payload"}``, in order
    rows: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, kw_only=True)
class Recording:
    """A session's recorded turns and what they ran under."""

    session_id: str
    mode: str
    model: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    parent_session_id: str | None = None
    created_at: str = ""
    turns: tuple[RecordedTurn, ...] = ()
    #: the session's effect receipts (``call_id``, ``tool``, ``status``, ``detail``, ...)
    receipts: tuple[Mapping[str, Any], ...] = ()

    @property
    def workspace(self) -> str | None:
        where = self.metadata.get("workspace")
        return str(where) if where else None

    @property
    def policy(self) -> Mapping[str, Any]:
        """The tool policy the session was opened with beyond its mode (may be empty)."""
        policy = self.metadata.get("policy")
        return policy if isinstance(policy, Mapping) else {}

    @property
    def binding(self) -> str:
        """The channel binding (``PLATFORM:CHANNEL``) the session ran under, or "".

        Recorded with its policy; a channel session from before that is told by its id
        (``platform:workspace:channel:thread``)."""
        return binding_of(self.session_id, self.mode, self.metadata)


def binding_of(session_id: str, mode: str, metadata: Mapping[str, Any]) -> str:
    """:attr:`Recording.binding` of a session row."""
    policy = metadata.get("policy")
    if isinstance(policy, Mapping) and policy.get("binding"):
        return str(policy["binding"])
    parts = session_id.split(":")
    if mode == "DAEMON" and len(parts) >= 4:
        return f"{parts[0]}:{parts[2]}"
    return ""


def _turn_bounds(checkpoints: Iterable[CheckpointRow]) -> list[tuple[str, int, int]]:
    """``(turn_id, first message index, end index)`` per turn, in order, from the chain.

    A turn's first save holds its user message last; its final save closes it. A chain
    that shrank (compaction rewrote the conversation) no longer holds the turns before: they
    are left out."""
    bounds: dict[str, list[int]] = {}
    lost: set[str] = set()
    high = 0
    for cp in checkpoints:
        turn_id = str(cp.state.get("turn_id") or cp.turn_id or "")
        if cp.kind == "rewind":  # the turns past this point were taken back (geode.rewind)
            for gone in [t for t, (_, end) in bounds.items() if end > cp.message_count]:
                del bounds[gone]
            high = cp.message_count
            continue
        if cp.message_count < high:  # compacted: the messages of the turns so far are gone
            lost.update(bounds, [turn_id])
            bounds.clear()
        high = cp.message_count
        if not turn_id or turn_id in lost:
            continue  # a save outside any turn (an open batch closed before a new turn)
        if turn_id not in bounds:
            bounds[turn_id] = [max(0, cp.message_count - 1), cp.message_count]
        else:
            bounds[turn_id][1] = max(bounds[turn_id][1], cp.message_count)
    return [(t, start, end) for t, (start, end) in bounds.items()]


async def load_recording(store: Store, session_id: str) -> Recording:
    """The recording of ``session_id`` from the store.

    Raises:
        ConfigError: no such session.
    """
    record = await store.sessions.get(session_id)
    if record is None:
        raise ConfigError(f"No session {session_id!r}; `geode sessions list` shows them.")
    restored = await store.checkpointer(session_id).load()
    messages = restored.messages if restored is not None else []
    checkpoints = await store.checkpoints.list(session_id, limit=1_000_000)
    rows = await store.timeline.list(session_id, limit=10_000_000)
    receipts = await store.receipts.list_for(session_id)
    by_turn: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.kind.startswith(_DECISION_KINDS):
            by_turn.setdefault(r.turn_id, []).append({"kind": r.kind, "payload": r.payload})
    turns = []
    for turn_id, start, end in _turn_bounds(checkpoints):
        part = messages[start:end]
        if not part or part[0].role != "user" or part[0].tool_results:
            continue  # the chain no longer holds this turn's messages (compacted since)
        results = {res.tool_use_id: res for m in part[1:] if m.role == "user"
                   for res in m.tool_results}
        turns.append(RecordedTurn(
            turn_id=turn_id, input=part[0].text,
            responses=tuple(m for m in part[1:] if m.role == "assistant"),
            results=results, rows=tuple(by_turn.get(turn_id, ()))))
    return Recording(
        session_id=record.id, mode=record.mode, model=record.model,
        metadata=dict(record.metadata), parent_session_id=record.parent_session_id,
        created_at=record.created_at.isoformat(), turns=tuple(turns),
        receipts=tuple({"call_id": r.call_id, "tool": r.tool, "status": r.status,
                        "detail": r.detail, "turn_id": r.turn_id} for r in receipts),
    )


def to_jsonl(recording: Recording, secrets: Iterable[str] = ()) -> Iterator[str]:
    """The export: one JSON record per line, each redacted.

    Lines, in order: the session header; per turn its ``turn`` line (the user's input),
    each ``model_response``, each ``tool_result`` (with its ``receipt`` where the call had
    one) and each ``decision`` (a timeline row); last, a ``receipt`` line for each effect
    receipt whose call has no result in the chain."""
    keys = tuple(secrets)

    def line(obj: Mapping[str, Any]) -> str:
        return json.dumps(redact(dict(obj), keys), ensure_ascii=False, default=str)

    yield line({"type": "session", "format": FORMAT, "id": recording.session_id,
                "mode": recording.mode, "model": recording.model,
                "metadata": dict(recording.metadata),
                "parent_session_id": recording.parent_session_id,
                "created_at": recording.created_at})
    receipts = {str(r["call_id"]): r for r in recording.receipts}
    shown: set[str] = set()
    for n, turn in enumerate(recording.turns, 1):
        yield line({"type": "turn", "turn": n, "turn_id": turn.turn_id, "input": turn.input})
        for i, msg in enumerate(turn.responses):
            yield line({"type": "model_response", "turn": n, "index": i,
                        "message": msg.model_dump(mode="json")})
        for call_id, res in turn.results.items():
            receipt = receipts.get(call_id)
            shown.add(call_id)
            yield line({"type": "tool_result", "turn": n, "call_id": call_id,
                        "result": res.model_dump(mode="json"),
                        "receipt": dict(receipt) if receipt is not None else None})
        for row in turn.rows:
            yield line({"type": "decision", "turn": n, "kind": row["kind"],
                        "payload": row["payload"]})
    for call_id, receipt in receipts.items():
        if call_id not in shown:  # an effect with no result in the chain (a crash, say)
            yield line({"type": "receipt", **dict(receipt)})


def read_jsonl(lines: Iterable[str], *, where: str = "the export") -> Recording:
    """A recording from an export's lines (:func:`to_jsonl`).

    Raises:
        ConfigError: not an export this version reads (the message says which line).
    """
    header: dict[str, Any] | None = None
    turns: list[dict[str, Any]] = []
    receipts: list[Mapping[str, Any]] = []
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            rec = json.loads(text)
            kind = rec["type"]
            if kind == "session":
                if int(rec.get("format", 0)) > FORMAT:
                    raise ConfigError(f"{where}: format {rec['format']} is newer than this "
                                      f"build reads ({FORMAT}); replay it with a newer geode.")
                header = rec
                continue
            if header is None:
                raise ValueError("the first record must be the session header")
            if kind == "receipt":
                receipts.append({k: v for k, v in rec.items() if k != "type"})
                continue
            if kind == "turn":
                turns.append({"turn_id": str(rec["turn_id"]), "input": str(rec["input"]),
                              "responses": [], "results": {}, "rows": []})
                continue
            turn = turns[int(rec["turn"]) - 1]
            if kind == "model_response":
                turn["responses"].append(Message.model_validate(rec["message"]))
            elif kind == "tool_result":
                turn["results"][str(rec["call_id"])] = ToolResultBlock.model_validate(
                    rec["result"])
                if rec.get("receipt"):
                    receipts.append(rec["receipt"])
            elif kind == "decision":
                turn["rows"].append({"kind": str(rec["kind"]), "payload": rec["payload"]})
        except ConfigError:
            raise
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ConfigError(f"{where}, line {number}: not a session export record "
                              f"({type(exc).__name__}: {exc}); `geode sessions export ID` "
                              "writes one.") from exc
    if header is None:
        raise ConfigError(f"{where} holds no session header; `geode sessions export ID` "
                          "writes one.")
    return Recording(
        session_id=str(header["id"]), mode=str(header["mode"]), model=str(header["model"]),
        metadata=dict(header.get("metadata") or {}),
        parent_session_id=header.get("parent_session_id"),
        created_at=str(header.get("created_at") or ""),
        turns=tuple(RecordedTurn(turn_id=t["turn_id"], input=t["input"],
                                 responses=tuple(t["responses"]), results=t["results"],
                                 rows=tuple(t["rows"])) for t in turns),
        receipts=tuple(receipts),
    )
