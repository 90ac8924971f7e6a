"""A session's records: its row, its checkpoint chain, and the tool batch a crash left open.

With a store, a session is created or loaded from it and every turn is checkpointed; without
one (``Runtime(store=None)``: tests, one-off runs) it lives in memory and nothing is saved.
The harness port's questions about sessions (a turn's outcome, a session's status) are
answered here too, from the same records.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from geode.daemon.port_values import OpeningNote, SessionStatus, TurnOutcome, WriteFence
from geode.errors import ConfigError
from geode.executor import MemoryReceiptStore, MemoryResults, MemoryTimeline
from geode.loop import Checkpointer, ToolRunner, TurnInfo
from geode.loop.resume import awaits_approval, dangling_calls, repair_dangling
from geode.messages import Message
from geode.secret_redaction import redact_text
from geode.tools.plan import BoundToolPlan

if TYPE_CHECKING:
    from pathlib import Path

    from geode.executor.protocols import ReceiptStore, ResultKeeper
    from geode.store import Store
    from geode.store.timeline import SessionTimeline

__all__ = ["Loaded", "OpenBatch", "Records"]

#: closes an open tool batch: (messages, the turn, ask again?) -> messages with its results
OpenBatch = Callable[[list[Message], TurnInfo, bool], Awaitable[list[Message]]]

log = structlog.get_logger(__name__)


@dataclass(kw_only=True)
class Loaded:
    """A session as its records have it when it is opened."""

    session_id: str
    messages: list[Message] = field(default_factory=list)
    #: receipt status by call id (what ran of an open batch)
    receipts: dict[str, str] = field(default_factory=dict)
    #: the guard counters of the chain's last checkpoint
    state: dict[str, Any] = field(default_factory=dict)


class Records:
    """The records sessions are opened from and checkpointed to; one per process."""

    def __init__(self, *, store: Store | None, rewind_home: Path | None = None) -> None:
        self.store = store
        #: where rewind keeps pre-images (``$GEODE_HOME/rewind``); None: no rewind here
        self.rewind_home = rewind_home
        self.receipts: ReceiptStore
        #: the executor's tool rows and the loop's turn rows go here
        self.timeline: SessionTimeline | MemoryTimeline
        self.results: ResultKeeper
        if store is not None:
            self.receipts, self.timeline, self.results = (store.receipts, store.timeline,
                                                          store.results)
        else:
            self.receipts, self.timeline, self.results = (MemoryReceiptStore(),
                                                          MemoryTimeline(), MemoryResults())

    async def load_or_create(
        self, *, session_id: str | None, mode: str, model: str, parent_session_id: str | None,
        title: str, metadata: Mapping[str, Any],
        read_with: Callable[[Any], None] | None = None,
    ) -> Loaded:
        """The session ``session_id`` names (a thread's fixed id is created when first seen;
        a terminal's must exist), or a new one.

        ``read_with``: a read run in the transaction that creates or finds the session row
        (the session's memory), so it costs no transaction of its own; it gets the store's
        handle of that transaction (opaque here, as a fence's). It is not run when
        there is no store or the session must already exist (a terminal's ``--session``):
        the caller reads on its own then."""
        store = self.store
        if store is None:
            from geode.loop._util import new_id

            return Loaded(session_id=session_id or new_id("s"))
        sessions = store.sessions
        if session_id and self.rewind_home is not None:
            # A rewind a dead process left half done is finished before the session is
            # read: a turn never runs on a half-rewound conversation or workspace.
            from geode.rewind import BlobStore, finish_pending

            await finish_pending(store, BlobStore(self.rewind_home), session_id)
        if session_id:
            if mode in ("HEADLESS", "REPL", "IPC"):
                if not await sessions.exists(session_id):
                    # A user asked to continue a session that does not exist: say so (exit 2).
                    raise ConfigError(f"Session {session_id!r} does not exist. "
                                      "`geode sessions list` shows them.")
            elif await sessions.create_if_missing(
                session_id, mode=mode, model=model, parent_session_id=parent_session_id,
                title=title, metadata=dict(metadata), also=read_with,
            ):
                return Loaded(session_id=session_id)  # a fixed id seen for the first time
            restored = await store.checkpointer(session_id).load()
            _, status = await store.receipts.resume(session_id)
            if restored is None:
                return Loaded(session_id=session_id, receipts=status)
            return Loaded(session_id=session_id, messages=list(restored.messages),
                          receipts=status, state=dict(restored.state))
        sid = await sessions.create(session_id=session_id, mode=mode, model=model,
                                    parent_session_id=parent_session_id, title=title,
                                    metadata=dict(metadata), also=read_with)
        return Loaded(session_id=sid)

    def checkpointer(self, session_id: str, *, fence: WriteFence | None = None,
                     opening_note: OpeningNote | None = None,
                     riders: Sequence[Callable[[Any], None]] = ()
                     ) -> Checkpointer | None:
        """The session's checkpoint chain (None without a store). ``fence`` runs inside each
        save's transaction; ``opening_note`` and ``riders`` (statements needing no
        transaction of their own: memory's use counts) go with the turn's first
        checkpoint."""
        if self.store is None:
            return None
        note = opening_note
        return self.store.checkpointer(
            session_id, fence=fence,
            opening=[(note.kind, note.payload, note.turn_id)] if note is not None else (),
            riders=riders,
        )

    def entitle(self, session_id: str) -> Callable[[str], Awaitable[None]] | None:
        """Gives an untitled session a title (its first prompt); None without a store."""
        store = self.store
        if store is None:
            return None

        async def entitle(title: str) -> None:
            await store.sessions.title_if_untitled(session_id, title)

        return entitle

    async def settle_open_batch(
        self, loaded: Loaded, *, mode: str, runner: ToolRunner,
        plan: Callable[[], BoundToolPlan], checkpointer: Checkpointer | None,
        ask_again: frozenset[str],
    ) -> tuple[list[Message], list[str], OpenBatch | None]:
        """The conversation with a batch a crash left open given its results, the calls
        whose outcome is uncertain, and (a call of the batch waited for a person) the
        closer that keeps the batch open until the turn resumes or a new one starts."""
        messages, receipts, state = loaded.messages, loaded.receipts, loaded.state
        uncertain: list[str] = []
        if not dangling_calls(messages):
            return messages, uncertain, None
        if checkpointer is not None and awaits_approval(messages, receipts, ask_again):
            # A call of the open batch waited for a person when the process stopped: the
            # batch stays open here, and resuming the turn resumes that wait inside the
            # turn (where /stop reaches it); a new turn closes it first (Session.run).
            async def close(batch: list[Message], turn: TurnInfo, ask: bool) -> list[Message]:
                closed, unsure = await repair_dangling(
                    batch, runner=runner, plan=plan(), turn=turn, receipts=receipts,
                    ask_again=ask_again if ask else frozenset(),
                )
                uncertain.extend(unsure)
                return closed

            log.info("resumed a session whose tool batch waits for an approval")
            return messages, uncertain, close
        turn_id = str(state.get("turn_id") or "resume")
        turn = TurnInfo(session_id=loaded.session_id, turn_id=turn_id,
                        round=int(state.get("round", 0)), correlation_id=f"{turn_id}:resume",
                        mode=mode)
        messages, uncertain = await repair_dangling(messages, runner=runner, plan=plan(),
                                                    turn=turn, receipts=receipts)
        if checkpointer is not None:
            # Saved with the turn's own counters: the results above are reported to the
            # model once (a later crash finds no open batch), and a resume continues the
            # turn's rounds, time and spend instead of starting them again.
            await checkpointer.save(messages=messages, state=state, status="active")
        log.warning("resumed a session with an unfinished tool batch", uncertain=uncertain)
        return messages, uncertain, None

    # -- what a host asks about sessions (the harness port) ----------------------------------

    async def turn_outcome(self, session_id: str, turn_id: str) -> TurnOutcome:
        """What the checkpoint chain says about turn ``turn_id`` of ``session_id``.

        Raises:
            StoreError: the chain could not be read.
        """
        if self.store is None or not turn_id:
            return TurnOutcome(state="not_started")
        restored = await self.store.checkpointer(session_id).load()
        if restored is None or restored.state.get("turn_id") != turn_id:
            return TurnOutcome(state="not_started")
        termination = restored.state.get("last_termination")
        if not termination:
            return TurnOutcome(state="started")
        # masked as the turn's own result is (geode.loop.agent_loop): a host delivering a
        # recovered answer gets no credential the model repeated
        return TurnOutcome(state="finished", termination=str(termination),
                           text=redact_text(_last_assistant_text(restored.messages)))

    async def session_status(self, session_id: str) -> SessionStatus:
        """The session's record and the termination of its latest finished turn."""
        if self.store is None:
            return SessionStatus(session_id=session_id, exists=False)
        record = await self.store.sessions.get(session_id)
        if record is None:
            return SessionStatus(session_id=session_id, exists=False)
        last: str | None = None
        rows = await self.store.checkpoints.list(session_id, limit=100)
        for row in sorted(rows, key=lambda r: r.seq, reverse=True):
            term = row.state.get("last_termination")
            if term:
                last = str(term)
                break
        return SessionStatus(session_id=session_id, exists=True, model=record.model or "",
                             parent_session_id=record.parent_session_id,
                             status=record.status, last_termination=last)


def _last_assistant_text(messages: Sequence[Message]) -> str:
    """The last assistant text of the latest turn (after its user message), or ``""``."""
    for m in reversed(messages):
        if m.role == "assistant":
            if m.text:
                return m.text
        elif m.role == "user":
            break
    return ""
