"""The store's schema: SQLAlchemy 2 typed declarative models.

One schema for SQLite and PostgreSQL. The migration ``0001_initial`` creates exactly this
(a test compares them with alembic's ``compare_metadata`` on both dialects); any change
here needs a new migration.

Messages are stored one row per message, ``(session_id, idx)``; a checkpoint row records
how many of them it covers (``message_count``). Saving a long session therefore writes
only the new messages, not the whole conversation each round.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "RECEIPT_STATUSES",
    "SESSION_STATUSES",
    "Base",
    "CheckpointModel",
    "EffectReceiptModel",
    "KeptResultModel",
    "MessageModel",
    "ReceiptStatus",
    "ScheduledJobModel",
    "SessionModel",
    "SessionStatus",
    "SpendReservationModel",
    "TimelineEventModel",
    "UsageModel",
    "all_metadata",
    "checkpoints_table",
    "jobs_table",
    "kept_results_table",
    "messages_table",
    "receipts_table",
    "reservations_table",
    "sessions_table",
    "timeline_table",
    "usage_table",
    "utcnow",
]

SessionStatus = Literal["active", "paused", "completed", "error"]
SESSION_STATUSES: tuple[SessionStatus, ...] = ("active", "paused", "completed", "error")
ReceiptStatus = Literal["intended", "done", "failed", "uncertain"]
RECEIPT_STATUSES: tuple[ReceiptStatus, ...] = ("intended", "done", "failed", "uncertain")

# Deterministic constraint names: both dialects get the same names, and SQLite batch
# migrations can address constraints by name later.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit identity.
_BigId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, datetime: DateTime(timezone=True)}


class SessionModel(Base):
    """One conversation (a thread, a REPL, a scheduled task run)."""

    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    status: Mapped[str] = mapped_column(String(16), default="active")
    model: Mapped[str] = mapped_column(String(200), default="")
    mode: Mapped[str] = mapped_column(String(32), default="")
    title: Mapped[str] = mapped_column(Text, default="")
    parent_session_id: Mapped[str | None] = mapped_column(
        ForeignKey("sessions.id", ondelete="SET NULL"), index=True
    )
    # ``metadata`` is reserved on declarative classes; the column keeps the plain name.
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    # Head of the checkpoint chain: the last checkpoint's seq and how many message rows
    # it covers. Read under the row lock to allocate the next seq and to detect that
    # another writer moved the chain since this process last saved.
    last_seq: Mapped[int] = mapped_column(Integer, default=0)
    message_count: Mapped[int] = mapped_column(Integer, default=0)


class MessageModel(Base):
    """One message of a session's conversation, at position ``idx``."""

    __tablename__ = "messages"

    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class CheckpointModel(Base):
    """One link of the checkpoint chain: loop state + guard counters at a point of a turn."""

    __tablename__ = "checkpoints"

    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    turn_id: Mapped[str] = mapped_column(String(100), default="")
    message_count: Mapped[int] = mapped_column(Integer)
    state: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class EffectReceiptModel(Base):
    """The record that an effectful call was about to run, and how it ended.

    No foreign key to ``sessions``: receipts are a separate record, written by the
    executor independently of the checkpoint chain.
    """

    __tablename__ = "effect_receipts"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(200))
    turn_id: Mapped[str] = mapped_column(String(100))
    call_id: Mapped[str] = mapped_column(String(200))
    tool: Mapped[str] = mapped_column(String(200))
    args_hash: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: the channel approver who said yes to the call: platform user id, display name
    #: (NULL: nobody was asked, or a receipt from before they were recorded)
    approved_by: Mapped[str | None] = mapped_column(String(100), default=None)
    approved_by_name: Mapped[str | None] = mapped_column(String(200), default=None)

    __table_args__ = (
        Index(None, "session_id", "status"),
        UniqueConstraint("session_id", "call_id", name="uq_effect_receipts_session_call"),
    )


class TimelineEventModel(Base):
    """An append-only observation row. Never used to rebuild state."""

    __tablename__ = "timeline_events"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(200))
    turn_id: Mapped[str] = mapped_column(String(100), default="")
    kind: Mapped[str] = mapped_column(String(64))
    correlation_id: Mapped[str] = mapped_column(String(100), default="")
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)

    __table_args__ = (Index(None, "session_id", "id"),)


class UsageModel(Base):
    """One model call's usage (the spend ledger, ``geode.store.usage``): who, which model,
    how many tokens, and the cost when the model has a configured price (else NULL).

    ``at`` is integer Unix milliseconds: day windows are exact range compares on both
    dialects (a DateTime round trip through SQLite text could change the spelling).
    """

    __tablename__ = "usage_ledger"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    at: Mapped[int] = mapped_column(BigInteger, index=True)
    session_id: Mapped[str] = mapped_column(String(200))
    turn_id: Mapped[str] = mapped_column(String(100), default="")
    #: ``platform:channel`` of the channel binding, "" outside channels
    binding: Mapped[str] = mapped_column(String(200), default="")
    platform: Mapped[str] = mapped_column(String(32), default="")
    #: the platform user the turn answers, "" when none
    platform_user: Mapped[str] = mapped_column(String(200), default="")
    #: the conversation the per-thread caps count (a channel thread, else the session)
    thread: Mapped[str] = mapped_column(String(300), default="")
    model: Mapped[str] = mapped_column(String(200), default="")
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_usd: Mapped[float | None] = mapped_column(Float)

    __table_args__ = (
        Index(None, "binding", "at"),
        Index(None, "thread"),
    )


class SpendReservationModel(Base):
    """A model call in flight: the most it can spend (its input estimate + its max output
    tokens, and that at the model's price), held before the call starts and settled into
    ``usage_ledger`` after it (``geode.store.usage``). ``holder`` names the process
    (``host:pid:start``); a reservation past ``expires_at`` or of a dead holder on this host
    is settled at its reserved size by the next reservation. The table holds only the calls
    in flight: a few rows."""

    __tablename__ = "spend_reservations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(300))
    at: Mapped[int] = mapped_column(BigInteger)
    expires_at: Mapped[int] = mapped_column(BigInteger)
    session_id: Mapped[str] = mapped_column(String(200))
    turn_id: Mapped[str] = mapped_column(String(100), default="")
    binding: Mapped[str] = mapped_column(String(200), default="")
    platform: Mapped[str] = mapped_column(String(32), default="")
    platform_user: Mapped[str] = mapped_column(String(200), default="")
    thread: Mapped[str] = mapped_column(String(300), default="")
    model: Mapped[str] = mapped_column(String(200), default="")
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_usd: Mapped[float | None] = mapped_column(Float)


class KeptResultModel(Base):
    """The whole (redacted) text of a tool result that was over the size limit: the model got
    its head and tail and reads the rest with ``read_result`` (``geode.store.results``), only
    from its own session. ``at`` is Unix milliseconds."""

    __tablename__ = "kept_results"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(200), index=True)
    turn_id: Mapped[str] = mapped_column(String(100), default="")
    call_id: Mapped[str] = mapped_column(String(200), default="")
    tool: Mapped[str] = mapped_column(String(200), default="")
    at: Mapped[int] = mapped_column(BigInteger)
    chars: Mapped[int] = mapped_column(BigInteger)
    text: Mapped[str] = mapped_column(Text)


class ScheduledJobModel(Base):
    """A prompt run by ``geode serve`` in SCHEDULER mode on a cron expression
    (:class:`geode.store.jobs.ScheduledJobStore`).

    ``next_run`` is integer Unix seconds, not a DateTime: the claim is an exact-match
    ``UPDATE ... WHERE next_run = :due`` and integers compare exactly on both dialects
    (SQLite stores DateTime as text, where a round trip could change the spelling).
    """

    __tablename__ = "scheduled_jobs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    cron: Mapped[str] = mapped_column(String(200))
    prompt: Mapped[str] = mapped_column(Text)
    #: run every time in this session; None = a fresh session per run
    session_id: Mapped[str | None] = mapped_column(String(200))
    model: Mapped[str | None] = mapped_column(String(200))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    #: the due time (Unix seconds) the next claim must match; advanced by the claim itself
    next_run: Mapped[int] = mapped_column(BigInteger, index=True)
    last_run: Mapped[int | None] = mapped_column(BigInteger)
    last_status: Mapped[str] = mapped_column(String(32), default="")
    last_session_id: Mapped[str | None] = mapped_column(String(200))
    claimed_by: Mapped[str] = mapped_column(String(200), default="")
    run_count: Mapped[int] = mapped_column(Integer, default=0)
    #: the daemon running the job now (None when none) and until when its lease holds
    #: (Unix seconds; renewed while the run lasts, so a dead daemon's lease runs out)
    running_by: Mapped[str | None] = mapped_column(String(200))
    running_until: Mapped[int | None] = mapped_column(BigInteger)
    #: IANA time zone the cron is read in (None = UTC); next_run stays Unix seconds
    tz: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: a reminder's thread (the channel layer's thread key); None: a ``geode schedule``
    #: job, run by the daemon's scheduler in SCHEDULER mode. Reminders are fired by the
    #: layer that serves the thread, never by that scheduler.
    thread: Mapped[str | None] = mapped_column(String(400), index=True)
    #: what the layer needs to fire a reminder into its thread (JSON, opaque to the harness)
    target: Mapped[str | None] = mapped_column(Text)
    #: who created it (a platform user id; None for ``geode schedule add``)
    created_by: Mapped[str | None] = mapped_column(String(200))
    #: a one-time job (``cron`` empty): disabled once it fired; None/False: cron
    once: Mapped[bool | None] = mapped_column(Boolean)


# Core handles for the hot paths (plain INSERT/UPDATE statements, no ORM unit of work).
sessions_table = cast(Table, SessionModel.__table__)
messages_table = cast(Table, MessageModel.__table__)
checkpoints_table = cast(Table, CheckpointModel.__table__)
receipts_table = cast(Table, EffectReceiptModel.__table__)
timeline_table = cast(Table, TimelineEventModel.__table__)
usage_table = cast(Table, UsageModel.__table__)
reservations_table = cast(Table, SpendReservationModel.__table__)
kept_results_table = cast(Table, KeptResultModel.__table__)
jobs_table = cast(Table, ScheduledJobModel.__table__)


# Packages outside the harness (the channel layer) keep their tables on metadata of their
# own, which the composition root hands to ``all_metadata``: the harness never imports them.
def all_metadata(*extra: MetaData) -> MetaData:
    """The whole schema: the harness's tables plus ``extra`` (e.g. the channel layer's
    ``bots.store.CHANNEL_METADATA``), for Alembic's autogenerate and the migrations test."""
    if not extra:
        return Base.metadata
    combined = MetaData(naming_convention=NAMING_CONVENTION)
    for metadata in (Base.metadata, *extra):
        for table in metadata.tables.values():
            table.to_metadata(combined)
    return combined
