"""Channels: per-thread leases, so that several ``geode serve`` replicas process one bot's
threads at the same time, each thread on one replica at a time (``bots.store.leases``).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
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


def downgrade() -> None:
    op.drop_index("ix_channel_thread_leases_owner", table_name="channel_thread_leases")
    op.drop_table("channel_thread_leases")
