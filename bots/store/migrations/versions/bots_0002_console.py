"""The operator console's sign-in links and browser sessions (models:
``bots.store.console``).

Revision ID: bots_0002
Revises: bots_0001
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bots_0002"
down_revision: str | None = "bots_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "console_links",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=100), nullable=False),
        sa.Column("via", sa.String(length=16), nullable=False),
        sa.Column("issued_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("used_at", sa.BigInteger(), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("token_hash", name="pk_console_links"),
    )
    op.create_index("ix_console_links_platform_user_id_issued_at", "console_links",
                    ["platform", "user_id", "issued_at"])
    op.create_table(
        "console_sessions",
        sa.Column("id", sa.String(length=16), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=100), nullable=False),
        sa.Column("signed_in_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("revoked_at", sa.BigInteger(), nullable=True),
        sa.Column("remote", sa.String(length=100), nullable=False),
        sa.Column("user_agent", sa.String(length=200), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_console_sessions"),
        sa.UniqueConstraint("token_hash", name="uq_console_sessions_token_hash"),
    )
    op.create_index("ix_console_sessions_expires_at", "console_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_console_sessions_expires_at", table_name="console_sessions")
    op.drop_table("console_sessions")
    op.drop_index("ix_console_links_platform_user_id_issued_at", table_name="console_links")
    op.drop_table("console_links")
