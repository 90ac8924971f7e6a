"""Reminders: a scheduled job bound to a chat thread (``scheduled_jobs.thread``, ``target``,
``created_by``) and one-time jobs (``once``).

Revision ID: geode_0002
Revises: geode_0001
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "geode_0002"
down_revision: str | None = "geode_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # nullable: the jobs an existing database holds are `geode schedule` jobs (no thread,
    # cron); a plain ADD COLUMN, no table copy on SQLite
    op.add_column("scheduled_jobs", sa.Column("thread", sa.String(length=400), nullable=True))
    op.add_column("scheduled_jobs", sa.Column("target", sa.Text(), nullable=True))
    op.add_column("scheduled_jobs",
                  sa.Column("created_by", sa.String(length=200), nullable=True))
    op.add_column("scheduled_jobs", sa.Column("once", sa.Boolean(), nullable=True))
    op.create_index("ix_scheduled_jobs_thread", "scheduled_jobs", ["thread"])


def downgrade() -> None:
    op.drop_index("ix_scheduled_jobs_thread", table_name="scheduled_jobs")
    with op.batch_alter_table("scheduled_jobs") as batch:
        batch.drop_column("once")
        batch.drop_column("created_by")
        batch.drop_column("target")
        batch.drop_column("thread")
