"""Channels: durable approval requests (a binding's ``approve`` tools wait for a named
approver; the wait survives a restart, a decision applies once: ``bots.store.approvals``).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
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


def downgrade() -> None:
    op.drop_index("ix_channel_approvals_platform_workspace_channel_message_id",
                  table_name="channel_approvals")
    op.drop_index("ix_channel_approvals_status_expires_at", table_name="channel_approvals")
    op.drop_table("channel_approvals")
