"""The usage ledger: one row per model call (tokens, cost when priced), which the spend caps
of ``[budgets]`` and the bindings are checked against before every model call.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "usage_ledger",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
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
        sa.PrimaryKeyConstraint("id", name="pk_usage_ledger"),
    )
    op.create_index("ix_usage_ledger_at", "usage_ledger", ["at"])
    op.create_index("ix_usage_ledger_binding_at", "usage_ledger", ["binding", "at"])
    op.create_index("ix_usage_ledger_thread", "usage_ledger", ["thread"])


def downgrade() -> None:
    op.drop_index("ix_usage_ledger_thread", table_name="usage_ledger")
    op.drop_index("ix_usage_ledger_binding_at", table_name="usage_ledger")
    op.drop_index("ix_usage_ledger_at", table_name="usage_ledger")
    op.drop_table("usage_ledger")
