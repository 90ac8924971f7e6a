"""GEODE's durable records: one SQL database (SQLite or PostgreSQL) plus the JSONL ledger.

* :func:`open_database` -> :class:`Database` (engines, transactions, dialect facts), from
  which each record store is built;
* :func:`open_store` -> :class:`Store`: the database with the harness's record stores
  ``sessions``, ``checkpoints``, ``receipts``, ``timeline``, ``usage``, ``results`` and
  ``checkpointer(session_id)`` (the loop's ``Checkpointer``);
* :func:`upgrade` / :func:`status` apply / report the Alembic migration branches, one per
  package that owns tables (``geode db upgrade`` / ``geode db status``, :mod:`.schema`);
* ``usage`` (:class:`UsageLedger`): one row per model call, what the spend caps count;
* :class:`EvidenceLedger` writes redacted JSONL under ``$GEODE_HOME/ledger/``.

The records are separate: checkpoint, receipts, timeline and ledger never share a
transaction (ARCHITECTURE.md, "Records").
"""

from __future__ import annotations

from geode.store._engines import normalize_url
from geode.store.checkpoint import CheckpointRow, CheckpointStore, Restored, SessionCheckpointer
from geode.store.database import Database, open_database
from geode.store.ledger import EvidenceLedger, payload_hash
from geode.store.memory import MemoryStore
from geode.store.receipts import (
    DuplicateReceiptError,
    Receipt,
    ReceiptStore,
    UnknownReceiptError,
)
from geode.store.record_redaction import redact
from geode.store.schema import BranchStatus, branch_heads, heads, status, upgrade
from geode.store.sessions import (
    IllegalTransitionError,
    SessionExistsError,
    SessionNotFoundError,
    SessionRecord,
    SessionStore,
)
from geode.store.stores import Store, open_store
from geode.store.timeline import SessionTimeline, TimelineRow
from geode.store.usage import UsageFilter, UsageLedger, UsageRecord, UsageTotals

__all__ = [
    "BranchStatus",
    "CheckpointRow",
    "CheckpointStore",
    "Database",
    "DuplicateReceiptError",
    "EvidenceLedger",
    "IllegalTransitionError",
    "MemoryStore",
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
    "branch_heads",
    "heads",
    "normalize_url",
    "open_database",
    "open_store",
    "payload_hash",
    "redact",
    "status",
    "upgrade",
]
