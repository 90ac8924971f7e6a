"""Initial schema: sessions, messages, checkpoints, effect receipts, timeline events.

Revision ID: 0001
Revises:
Create Date: 2026-12-02

Written out in full (not imported from ``geode.store.models``): a migration is a frozen
snapshot, the models move on. ``tests/store/test_migrations.py`` proves head == models.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit serial.
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("mode", sa.String(length=32), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("parent_session_id", sa.String(length=200), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["parent_session_id"],
            ["sessions.id"],
            name="fk_sessions_parent_session_id_sessions",
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_sessions"),
    )
    op.create_index("ix_sessions_parent_session_id", "sessions", ["parent_session_id"])
    op.create_index("ix_sessions_updated_at", "sessions", ["updated_at"])

    op.create_table(
        "messages",
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name="fk_messages_session_id_sessions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "idx", name="pk_messages"),
    )

    op.create_table(
        "checkpoints",
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("turn_id", sa.String(length=100), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name="fk_checkpoints_session_id_sessions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "seq", name="pk_checkpoints"),
    )

    op.create_table(
        "effect_receipts",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("turn_id", sa.String(length=100), nullable=False),
        sa.Column("call_id", sa.String(length=200), nullable=False),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("args_hash", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_effect_receipts"),
        sa.UniqueConstraint("session_id", "call_id", name="uq_effect_receipts_session_call"),
    )
    op.create_index(
        "ix_effect_receipts_session_id_status", "effect_receipts", ["session_id", "status"]
    )

    op.create_table(
        "timeline_events",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("turn_id", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("correlation_id", sa.String(length=100), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_timeline_events"),
    )
    op.create_index("ix_timeline_events_created_at", "timeline_events", ["created_at"])
    op.create_index("ix_timeline_events_session_id_id", "timeline_events", ["session_id", "id"])


def downgrade() -> None:
    op.drop_table("timeline_events")
    op.drop_table("effect_receipts")
    op.drop_table("checkpoints")
    op.drop_table("messages")
    op.drop_table("sessions")
