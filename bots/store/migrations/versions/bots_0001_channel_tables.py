"""The channel layer's tables (branch ``bots``): inbound events, outbox, threads, message
index, pairing, bindings, cursors, leases, thread leases, approvals, attachments.

Revision ID: bots_0001
Revises:
Depends on: geode_0001 (the rows name geode's sessions)
Create Date: 2026-12-05

The channel part of geode's former linear chain 0001-0012
(``geode/store/migrations/legacy``), its operations in the same order, written out in full
(models: ``bots.store._tables``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bots_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = ("bots",)
depends_on: str | Sequence[str] | None = "geode_0001"
#: the tables this revision makes are the ones the linear chain had made by
#: revision ``0012``: a database at that revision is stamped here, not migrated
#: (``geode.store.schema``)
legacy_head: str = "0012"

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit serial.
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    _up_0003()
    _up_0006()
    _up_0008()
    _up_0010()


def downgrade() -> None:
    _down_0010()
    _down_0008()
    _down_0006()
    _down_0003()


def _up_0003() -> None:
    # as the legacy revision 0003 did
    op.create_table(
        "channel_events",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("dedupe_key", sa.String(length=300), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("workspace", sa.String(length=100), nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("thread_root", sa.String(length=100), nullable=False),
        sa.Column("message_id", sa.String(length=100), nullable=False),
        sa.Column("sender", sa.String(length=100), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("decision", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=True),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_channel_events"),
        sa.UniqueConstraint("dedupe_key", name="uq_channel_events_dedupe_key"),
    )
    op.create_index(
        "ix_channel_events_platform_workspace_status_id",
        "channel_events",
        ["platform", "workspace", "status", "id"],
    )
    op.create_index(
        "ix_channel_events_platform_workspace_channel_thread_root_id",
        "channel_events",
        ["platform", "workspace", "channel", "thread_root", "id"],
    )

    op.create_table(
        "channel_outbox",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("session_key", sa.String(length=300), nullable=False),
        sa.Column("turn_key", sa.String(length=300), nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("workspace", sa.String(length=100), nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("thread_root", sa.String(length=100), nullable=False),
        sa.Column("target", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("loop_turn_id", sa.String(length=100), nullable=False),
        sa.Column("progress_message_id", sa.String(length=100), nullable=True),
        sa.Column("progress_state", sa.String(length=16), nullable=False),
        sa.Column("message_ids", sa.JSON(), nullable=False),
        sa.Column("chunks", sa.JSON(), nullable=False),
        sa.Column("edited", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_channel_outbox"),
        sa.UniqueConstraint(
            "session_key", "turn_key", name="uq_channel_outbox_session_key_turn_key"
        ),
    )
    op.create_index(
        "ix_channel_outbox_platform_workspace_status",
        "channel_outbox",
        ["platform", "workspace", "status"],
    )

    op.create_table(
        "channel_threads",
        sa.Column("thread_key", sa.String(length=300), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("workspace", sa.String(length=100), nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("thread_root", sa.String(length=100), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("engaged", sa.Boolean(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("thread_key", name="pk_channel_threads"),
    )

    op.create_table(
        "channel_messages",
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("workspace", sa.String(length=100), nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("message_id", sa.String(length=100), nullable=False),
        sa.Column("thread_root", sa.String(length=100), nullable=False),
        sa.Column("from_bot", sa.Boolean(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint(
            "platform", "workspace", "channel", "message_id", name="pk_channel_messages"
        ),
    )

    op.create_table(
        "channel_pairing",
        sa.Column("code", sa.String(length=16), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("sender", sa.String(length=100), nullable=False),
        sa.Column("sender_name", sa.String(length=200), nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("issued_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("approved_at", sa.BigInteger(), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("code", name="pk_channel_pairing"),
    )
    op.create_index(
        "ix_channel_pairing_platform_sender", "channel_pairing", ["platform", "sender"]
    )

    op.create_table(
        "channel_bindings",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("workspace", sa.String(length=100), nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_channel_bindings"),
        sa.UniqueConstraint(
            "platform",
            "workspace",
            "channel",
            name="uq_channel_bindings_platform_workspace_channel",
        ),
    )

    op.create_table(
        "channel_cursors",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("value", sa.String(length=200), nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_channel_cursors"),
    )

    op.create_table(
        "channel_leases",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_channel_leases"),
    )


def _down_0003() -> None:
    op.drop_table("channel_leases")
    op.drop_table("channel_cursors")
    op.drop_table("channel_bindings")
    op.drop_index("ix_channel_pairing_platform_sender", table_name="channel_pairing")
    op.drop_table("channel_pairing")
    op.drop_table("channel_messages")
    op.drop_table("channel_threads")
    op.drop_index("ix_channel_outbox_platform_workspace_status", table_name="channel_outbox")
    op.drop_table("channel_outbox")
    op.drop_index(
        "ix_channel_events_platform_workspace_channel_thread_root_id", table_name="channel_events"
    )
    op.drop_index("ix_channel_events_platform_workspace_status_id", table_name="channel_events")
    op.drop_table("channel_events")


def _up_0006() -> None:
    # as the legacy revision 0006 did
    op.create_table(
        "channel_thread_leases",
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("workspace", sa.String(length=100), nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("thread_root", sa.String(length=100), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("touched_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("platform", "workspace", "channel", "thread_root",
                                name="pk_channel_thread_leases"),
    )
    op.create_index("ix_channel_thread_leases_owner", "channel_thread_leases", ["owner"])


def _down_0006() -> None:
    op.drop_index("ix_channel_thread_leases_owner", table_name="channel_thread_leases")
    op.drop_table("channel_thread_leases")


def _up_0008() -> None:
    # as the legacy revision 0008 did
    op.create_table(
        "channel_approvals",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("short_id", sa.String(length=16), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("turn_id", sa.String(length=100), nullable=False),
        sa.Column("call_id", sa.String(length=200), nullable=False),
        sa.Column("thread_key", sa.String(length=300), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("workspace", sa.String(length=100), nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("thread_root", sa.String(length=100), nullable=False),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("requested_by", sa.String(length=100), nullable=False),
        sa.Column("requested_by_name", sa.String(length=200), nullable=False),
        sa.Column("approvers", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("message_id", sa.String(length=100), nullable=True),
        sa.Column("decided_by", sa.String(length=100), nullable=False),
        sa.Column("decided_by_name", sa.String(length=200), nullable=False),
        sa.Column("requested_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("decided_at", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_channel_approvals"),
        sa.UniqueConstraint("short_id", name="uq_channel_approvals_short_id"),
        sa.UniqueConstraint("session_id", "call_id",
                            name="uq_channel_approvals_session_id_call_id"),
    )
    op.create_index("ix_channel_approvals_status_expires_at", "channel_approvals",
                    ["status", "expires_at"])
    op.create_index("ix_channel_approvals_platform_workspace_channel_message_id",
                    "channel_approvals", ["platform", "workspace", "channel", "message_id"])


def _down_0008() -> None:
    op.drop_index("ix_channel_approvals_platform_workspace_channel_message_id",
                  table_name="channel_approvals")
    op.drop_index("ix_channel_approvals_status_expires_at", table_name="channel_approvals")
    op.drop_table("channel_approvals")


def _up_0010() -> None:
    # as the legacy revision 0010 did
    op.create_table(
        "channel_attachments",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("file_ref", sa.Text(), nullable=False),
        sa.Column("name", sa.String(length=300), nullable=False),
        sa.Column("mime", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("path", sa.String(length=1000), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_channel_attachments"),
        sa.UniqueConstraint("event_id", "idx", name="uq_channel_attachments_event_id_idx"),
    )
    op.create_index("ix_channel_attachments_session_id_id", "channel_attachments",
                    ["session_id", "id"])


def _down_0010() -> None:
    op.drop_index("ix_channel_attachments_session_id_id", table_name="channel_attachments")
    op.drop_table("channel_attachments")
