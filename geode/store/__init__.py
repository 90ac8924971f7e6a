"""GEODE's durable records: one SQL store (SQLite or PostgreSQL) plus the JSONL ledger.

* :func:`open_store` -> :class:`Store` with ``sessions``, ``checkpoints``, ``receipts``,
  ``timeline`` and ``checkpointer(session_id)`` (the loop's ``Checkpointer``);
* :func:`upgrade` applies the Alembic migrations (``geode db upgrade``);
* ``usage`` (:class:`UsageLedger`): one row per model call, what the spend caps count;
* :class:`EvidenceLedger` writes redacted JSONL under ``$GEODE_HOME/ledger/``.

The records are separate: checkpoint, receipts, timeline and ledger never share a
transaction (ARCHITECTURE.md, "Records").
"""

from __future__ import annotations

from geode.store.checkpoint import CheckpointRow, CheckpointStore, Restored, SessionCheckpointer
from geode.store.engine import Store, head_revision, normalize_url, open_store, upgrade
from geode.store.ledger import EvidenceLedger, payload_hash
from geode.store.receipts import (
    DuplicateReceiptError,
    Receipt,
    ReceiptStore,
    UnknownReceiptError,
)
from geode.store.redact import redact
from geode.store.sessions import (
    IllegalTransitionError,
    SessionExistsError,
    SessionNotFoundError,
    SessionRecord,
    SessionStore,
)
from geode.store.timeline import SessionTimeline, TimelineRow
from geode.store.usage import UsageFilter, UsageLedger, UsageRecord, UsageTotals

__all__ = [
    "CheckpointRow",
    "CheckpointStore",
    "DuplicateReceiptError",
    "EvidenceLedger",
    "IllegalTransitionError",
    "Receipt",
    "ReceiptStore",
    "Restored",
    "SessionCheckpointer",
    "SessionExistsError",
    "SessionNotFoundError",
    "SessionRecord",
    "SessionStore",
    "SessionTimeline",
    "Store",
    "TimelineRow",
    "UnknownReceiptError",
    "UsageFilter",
    "UsageLedger",
    "UsageRecord",
    "UsageTotals",
    "head_revision",
    "normalize_url",
    "open_store",
    "payload_hash",
    "redact",
    "upgrade",
]
