"""Effect receipts name the channel approver who said yes to the call (platform user id and
display name): the audit of who allowed an effect.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("effect_receipts",
                  sa.Column("approved_by", sa.String(length=100), nullable=True))
    op.add_column("effect_receipts",
                  sa.Column("approved_by_name", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("effect_receipts") as batch:
        batch.drop_column("approved_by_name")
        batch.drop_column("approved_by")
