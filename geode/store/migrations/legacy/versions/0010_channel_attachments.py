"""Channels: a durable record of each inbound event's attachments (saved where, size,
sha256, or refused and why), so a recovered turn neither downloads a file twice nor loses
it (``bots.store.attachments``).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "channel_attachments",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("file_ref", sa.Text(), nullable=False),
        sa.Column("name", sa.String(length=300), nullable=False),
        sa.Column("mime", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("path", sa.String(length=1000), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_channel_attachments"),
        sa.UniqueConstraint("event_id", "idx", name="uq_channel_attachments_event_id_idx"),
    )
    op.create_index("ix_channel_attachments_session_id_id", "channel_attachments",
                    ["session_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_channel_attachments_session_id_id", table_name="channel_attachments")
    op.drop_table("channel_attachments")
