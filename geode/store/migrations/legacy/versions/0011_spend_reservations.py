"""Spend reservations: the most each model call in flight can spend, held in the store
before the call starts and settled into ``usage_ledger`` after it, so parallel threads,
restarts and replicas cannot overshoot a spend cap together (``geode.store.usage``).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "spend_reservations",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=300), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("turn_id", sa.String(length=100), nullable=False),
        sa.Column("binding", sa.String(length=200), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("platform_user", sa.String(length=200), nullable=False),
        sa.Column("thread", sa.String(length=300), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_spend_reservations"),
    )


def downgrade() -> None:
    op.drop_table("spend_reservations")
