"""Memory entries (``memory_entries``): what the bot remembers about a person (scope
"user") or for everyone in a channel binding (scope "channel").

Revision ID: geode_0003
Revises: geode_0002
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "geode_0003"
down_revision: str | None = "geode_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "memory_entries",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=300), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("created_by", sa.String(length=300), nullable=False),
        sa.Column("updated_by", sa.String(length=300), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("use_count", sa.BigInteger(), nullable=False),
        sa.Column("last_used_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_memory_entries"),
    )
    op.create_index("ix_memory_entries_scope_owner", "memory_entries", ["scope", "owner"])


def downgrade() -> None:
    op.drop_index("ix_memory_entries_scope_owner", table_name="memory_entries")
    op.drop_table("memory_entries")
