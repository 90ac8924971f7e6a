"""Scheduled jobs: the time zone a job's cron is read in (None = UTC).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("scheduled_jobs", sa.Column("tz", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scheduled_jobs") as batch:
        batch.drop_column("tz")
