"""Channels: inbound events, outbox, threads, message index, pairing, bindings, cursors, leases.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02

Written out in full, like 0001: a migration is a frozen snapshot (models: ``bots.store._tables``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
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


def downgrade() -> None:
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
