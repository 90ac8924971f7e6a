"""The model ``/model`` chose for a thread (``channel_threads.model``; "" = the binding's).

Revision ID: bots_0003
Revises: bots_0002
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bots_0003"
down_revision: str | None = "bots_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # nullable: the threads an existing database holds get NULL, their binding's model
    with op.batch_alter_table("channel_threads") as batch:
        batch.add_column(sa.Column("model", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("channel_threads") as batch:
        batch.drop_column("model")
