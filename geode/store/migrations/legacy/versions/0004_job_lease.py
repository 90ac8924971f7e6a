"""Scheduled jobs: a run lease, so that a run still going in one daemon is not started
again by another when the job is due again (``geode.daemon.scheduler``).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable columns: a plain ADD COLUMN, no table copy on SQLite.
    op.add_column("scheduled_jobs", sa.Column("running_by", sa.String(length=200), nullable=True))
    op.add_column("scheduled_jobs", sa.Column("running_until", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scheduled_jobs") as batch:
        batch.drop_column("running_until")
        batch.drop_column("running_by")
