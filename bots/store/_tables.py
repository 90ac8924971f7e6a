"""The channel layer's store tables (migration ``0003_channels``), on their own
:data:`CHANNEL_METADATA`: the harness store does not import them; the composition root
hands this metadata to whoever needs the whole schema (``geode.store.models.all_metadata``).

Times that are compared inside a claim (``UPDATE ... WHERE expires_at < :now``) are integer
milliseconds / seconds, not DateTime: integers compare exactly on both dialects (SQLite
keeps DateTime as text). ``created_at`` / ``updated_at`` are for people and ordering.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from geode.store.models import NAMING_CONVENTION, utcnow
from geode.store.models import Base as HarnessBase

__all__ = [
    "CHANNEL_METADATA",
    "ChannelApprovalModel",
    "ChannelAttachmentModel",
    "ChannelBindingModel",
    "ChannelCursorModel",
    "ChannelEventModel",
    "ChannelLeaseModel",
    "ChannelMessageModel",
    "ChannelOutboxModel",
    "ChannelPairingModel",
    "ChannelThreadLeaseModel",
    "ChannelThreadModel",
    "approvals_table",
    "attachments_table",
    "bindings_table",
    "cursors_table",
    "events_table",
    "leases_table",
    "messages_table",
    "outbox_table",
    "pairing_table",
    "thread_leases_table",
    "threads_table",
]

CHANNEL_METADATA = MetaData(naming_convention=NAMING_CONVENTION)


class Base(DeclarativeBase):
    """The channel tables' declarative base (the harness store's conventions and types)."""

    metadata = CHANNEL_METADATA
    type_annotation_map = HarnessBase.type_annotation_map


_BigId = BigInteger().with_variant(Integer(), "sqlite")


class ChannelEventModel(Base):
    """One accepted platform event, recorded before its cursor advances or it is acked.

    ``dedupe_key`` is unique: a redelivered event (webhook retry, replayed poll, second
    replica) is refused by the database itself, so nothing is processed twice.
    """

    __tablename__ = "channel_events"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    dedupe_key: Mapped[str] = mapped_column(String(300), unique=True)
    platform: Mapped[str] = mapped_column(String(32))
    workspace: Mapped[str] = mapped_column(String(100), default="")
    channel: Mapped[str] = mapped_column(String(100), default="")
    thread_root: Mapped[str] = mapped_column(String(100), default="")
    message_id: Mapped[str] = mapped_column(String(100), default="")
    sender: Mapped[str] = mapped_column(String(100), default="")
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: received -> processing -> running -> done | ignored | expired | failed
    status: Mapped[str] = mapped_column(String(16))
    decision: Mapped[str] = mapped_column(String(64), default="")
    session_id: Mapped[str | None] = mapped_column(String(200))
    owner: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        Index(None, "platform", "workspace", "status", "id"),
        Index(None, "platform", "workspace", "channel", "thread_root", "id"),
    )


class ChannelOutboxModel(Base):
    """One reply owed to a thread, keyed by (session, turn); written before any send."""

    __tablename__ = "channel_outbox"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    session_key: Mapped[str] = mapped_column(String(300))
    turn_key: Mapped[str] = mapped_column(String(300))
    event_id: Mapped[int | None] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(16))  # turn | notice
    platform: Mapped[str] = mapped_column(String(32))
    workspace: Mapped[str] = mapped_column(String(100), default="")
    channel: Mapped[str] = mapped_column(String(100), default="")
    thread_root: Mapped[str] = mapped_column(String(100), default="")
    target: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: pending -> ready -> sent | uncertain | failed (``sending`` while a notice is in flight)
    status: Mapped[str] = mapped_column(String(16))
    loop_turn_id: Mapped[str] = mapped_column(String(100), default="")
    #: the progress message: the handle that makes the final send reconcilable
    progress_message_id: Mapped[str | None] = mapped_column(String(100))
    progress_state: Mapped[str] = mapped_column(String(16), default="")  # "" | sending | sent
    message_ids: Mapped[list[Any]] = mapped_column(JSON)
    chunks: Mapped[list[Any]] = mapped_column(JSON)
    edited: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        UniqueConstraint("session_key", "turn_key"),
        Index(None, "platform", "workspace", "status"),
    )


class ChannelThreadModel(Base):
    """A thread the bot engaged in, and the session it is bound to now."""

    __tablename__ = "channel_threads"

    thread_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    platform: Mapped[str] = mapped_column(String(32))
    workspace: Mapped[str] = mapped_column(String(100), default="")
    channel: Mapped[str] = mapped_column(String(100), default="")
    thread_root: Mapped[str] = mapped_column(String(100), default="")
    session_id: Mapped[str] = mapped_column(String(200))
    generation: Mapped[int] = mapped_column(Integer, default=0)
    engaged: Mapped[bool] = mapped_column(Boolean, default=True)
    #: the model ``/model`` chose for the thread's next turns ("" or NULL = the binding's;
    #: NULL in the rows of a database from before the column)
    model: Mapped[str | None] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ChannelMessageModel(Base):
    """Which thread a platform message belongs to (reply chains are resolved through it)."""

    __tablename__ = "channel_messages"

    platform: Mapped[str] = mapped_column(String(32), primary_key=True)
    workspace: Mapped[str] = mapped_column(String(100), primary_key=True)
    channel: Mapped[str] = mapped_column(String(100), primary_key=True)
    message_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    thread_root: Mapped[str] = mapped_column(String(100))
    from_bot: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ChannelPairingModel(Base):
    """A pairing code issued to an unknown sender; ``geode pairing approve CODE`` allows them."""

    __tablename__ = "channel_pairing"

    code: Mapped[str] = mapped_column(String(16), primary_key=True)
    platform: Mapped[str] = mapped_column(String(32))
    sender: Mapped[str] = mapped_column(String(100))
    sender_name: Mapped[str] = mapped_column(String(200), default="")
    channel: Mapped[str] = mapped_column(String(100), default="")
    status: Mapped[str] = mapped_column(String(16))  # pending | approved | expired
    issued_at: Mapped[int] = mapped_column(BigInteger)  # unix seconds
    expires_at: Mapped[int] = mapped_column(BigInteger)
    approved_at: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index(None, "platform", "sender"),)


class ChannelBindingModel(Base):
    """A binding added with ``geode bindings add`` (config.toml bindings are not stored)."""

    __tablename__ = "channel_bindings"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    platform: Mapped[str] = mapped_column(String(32))
    workspace: Mapped[str] = mapped_column(String(100), default="")
    channel: Mapped[str] = mapped_column(String(100))
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (UniqueConstraint("platform", "workspace", "channel"),)


class ChannelCursorModel(Base):
    """A connector's durable read position (Telegram ``offset``, a history cursor)."""

    __tablename__ = "channel_cursors"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    value: Mapped[str] = mapped_column(String(200))
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ChannelLeaseModel(Base):
    """A time-bounded lease (one poller per bot token across replicas)."""

    __tablename__ = "channel_leases"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    expires_at: Mapped[int] = mapped_column(BigInteger)  # unix milliseconds
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ChannelThreadLeaseModel(Base):
    """Which replica processes a thread now (per-thread lease: replicas run active-active).

    A row exists while its thread is held: taken by the claim of the thread's first event,
    renewed in bulk by the holder's heartbeat, deleted when the thread has been idle for a
    TTL with nothing unfinished, and taken over (its unfinished work recovered) by another
    replica once it expires.
    """

    __tablename__ = "channel_thread_leases"

    platform: Mapped[str] = mapped_column(String(32), primary_key=True)
    workspace: Mapped[str] = mapped_column(String(100), primary_key=True)
    channel: Mapped[str] = mapped_column(String(100), primary_key=True)
    thread_root: Mapped[str] = mapped_column(String(100), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    expires_at: Mapped[int] = mapped_column(BigInteger)  # unix milliseconds
    #: when the holder last claimed an event of the thread (unix milliseconds)
    touched_at: Mapped[int] = mapped_column(BigInteger)
    #: Stop asked (in the console, possibly of another replica) for the turn of this
    #: inbound event, and by whom; the holder's heartbeat reads it (``bots.lease_keeper``)
    stop_event: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    stop_by: Mapped[str | None] = mapped_column(String(200), nullable=True)

    __table_args__ = (Index(None, "owner"),)


class ChannelApprovalModel(Base):
    """An approval request for one proposed tool call (a binding's ``approve`` tools), written
    before the request message is posted so that a restart finds the wait and resumes it.

    One row per (session, call): the same proposed call asked again after a restart gets the
    same row back. A decision is one conditional ``UPDATE ... WHERE status = 'pending'``, so a
    double click or a redelivered interaction decides once.
    """

    __tablename__ = "channel_approvals"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    #: what people type: ``/approve K7Q2``
    short_id: Mapped[str] = mapped_column(String(16), unique=True)
    session_id: Mapped[str] = mapped_column(String(200))
    turn_id: Mapped[str] = mapped_column(String(100))
    call_id: Mapped[str] = mapped_column(String(200))
    thread_key: Mapped[str] = mapped_column(String(300))
    platform: Mapped[str] = mapped_column(String(32))
    workspace: Mapped[str] = mapped_column(String(100), default="")
    channel: Mapped[str] = mapped_column(String(100), default="")
    thread_root: Mapped[str] = mapped_column(String(100), default="")
    tool: Mapped[str] = mapped_column(String(200))
    args: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: the request as posted (plain words, diff or command)
    summary: Mapped[str] = mapped_column(Text, default="")
    requested_by: Mapped[str] = mapped_column(String(100), default="")
    requested_by_name: Mapped[str] = mapped_column(String(200), default="")
    approvers: Mapped[list[Any]] = mapped_column(JSON)
    #: pending -> approved | denied | expired | cancelled
    status: Mapped[str] = mapped_column(String(16))
    #: the posted request message (None until it is sent)
    message_id: Mapped[str | None] = mapped_column(String(100))
    decided_by: Mapped[str] = mapped_column(String(100), default="")
    decided_by_name: Mapped[str] = mapped_column(String(200), default="")
    requested_at: Mapped[int] = mapped_column(BigInteger)  # unix milliseconds
    expires_at: Mapped[int] = mapped_column(BigInteger)  # unix milliseconds
    decided_at: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        UniqueConstraint("session_id", "call_id"),
        Index(None, "status", "expires_at"),
        Index(None, "platform", "workspace", "channel", "message_id"),
    )


class ChannelAttachmentModel(Base):
    """One attachment of an inbound event, as the layer received it: ``saved`` (complete,
    fsynced and renamed into the thread's folder before this row is written) or ``refused``
    (with the reason told to the user). A recovered turn reads it instead of downloading
    again; ``geode sessions show`` lists a session's rows.
    """

    __tablename__ = "channel_attachments"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    event_id: Mapped[int] = mapped_column(BigInteger)
    #: the attachment's position in the event's list
    idx: Mapped[int] = mapped_column(Integer)
    session_id: Mapped[str] = mapped_column(String(200), default="")
    platform: Mapped[str] = mapped_column(String(32))
    #: the platform's file id (Telegram file_id, Slack file id, Discord attachment URL)
    file_ref: Mapped[str] = mapped_column(Text, default="")
    name: Mapped[str] = mapped_column(String(300), default="")
    mime: Mapped[str] = mapped_column(String(200), default="")
    status: Mapped[str] = mapped_column(String(16))  # saved | refused
    reason: Mapped[str] = mapped_column(Text, default="")
    #: where it was saved, relative to the binding's workspace ("" when refused)
    path: Mapped[str] = mapped_column(String(1000), default="")
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    sha256: Mapped[str] = mapped_column(String(64), default="")
    #: a voice note's transcript, written once after the file's row (NULL: not transcribed,
    #: or transcribed before this column: a recovered turn transcribes it again). Kept here,
    #: not beside the file: the thread's folder is writable by the model's tools
    transcript: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        UniqueConstraint("event_id", "idx"),
        Index(None, "session_id", "id"),
    )


events_table = cast(Table, ChannelEventModel.__table__)
outbox_table = cast(Table, ChannelOutboxModel.__table__)
threads_table = cast(Table, ChannelThreadModel.__table__)
messages_table = cast(Table, ChannelMessageModel.__table__)
pairing_table = cast(Table, ChannelPairingModel.__table__)
bindings_table = cast(Table, ChannelBindingModel.__table__)
cursors_table = cast(Table, ChannelCursorModel.__table__)
leases_table = cast(Table, ChannelLeaseModel.__table__)
thread_leases_table = cast(Table, ChannelThreadLeaseModel.__table__)
approvals_table = cast(Table, ChannelApprovalModel.__table__)
attachments_table = cast(Table, ChannelAttachmentModel.__table__)
