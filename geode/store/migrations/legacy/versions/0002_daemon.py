"""Daemon: the scheduled_jobs table (``geode schedule``), see ``geode.daemon._tables``.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

Written out in full, like 0001: a migration is a frozen snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "scheduled_jobs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("cron", sa.String(length=200), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=True),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("next_run", sa.BigInteger(), nullable=False),
        sa.Column("last_run", sa.BigInteger(), nullable=True),
        sa.Column("last_status", sa.String(length=32), nullable=False),
        sa.Column("last_session_id", sa.String(length=200), nullable=True),
        sa.Column("claimed_by", sa.String(length=200), nullable=False),
        sa.Column("run_count", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_scheduled_jobs"),
    )
    op.create_index("ix_scheduled_jobs_next_run", "scheduled_jobs", ["next_run"])


def downgrade() -> None:
    op.drop_index("ix_scheduled_jobs_next_run", table_name="scheduled_jobs")
    op.drop_table("scheduled_jobs")
