"""The web chat's threads, messages, change log and files (models: ``bots.store.webchat``).

Revision ID: bots_0004
Revises: bots_0003
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bots_0004"
down_revision: str | None = "bots_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "webchat_threads",
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("thread_root", sa.String(length=100), nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("channel", "thread_root", name="pk_webchat_threads"),
    )
    op.create_index("ix_webchat_threads_owner_created_ms", "webchat_threads",
                    ["owner", "created_ms"])
    op.create_table(
        "webchat_messages",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("thread_root", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("sender", sa.String(length=100), nullable=False),
        sa.Column("sender_name", sa.String(length=200), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("short_id", sa.String(length=32), nullable=False),
        sa.Column("buttons", sa.Boolean(), nullable=False),
        sa.Column("reaction", sa.String(length=32), nullable=False),
        sa.Column("file_id", sa.BigInteger(), nullable=True),
        sa.Column("visible_to", sa.String(length=100), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("submitted", sa.Boolean(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_webchat_messages"),
    )
    op.create_index("ix_webchat_messages_channel_thread_root_id", "webchat_messages",
                    ["channel", "thread_root", "id"])
    op.create_index("ix_webchat_messages_submitted", "webchat_messages", ["submitted"])
    op.create_table(
        "webchat_changes",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("thread_root", sa.String(length=100), nullable=False),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_webchat_changes"),
    )
    op.create_index("ix_webchat_changes_channel_thread_root_id", "webchat_changes",
                    ["channel", "thread_root", "id"])
    op.create_table(
        "webchat_files",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("thread_root", sa.String(length=100), nullable=False),
        sa.Column("direction", sa.String(length=8), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("mime", sa.String(length=100), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_webchat_files"),
    )


def downgrade() -> None:
    op.drop_table("webchat_files")
    op.drop_index("ix_webchat_changes_channel_thread_root_id", table_name="webchat_changes")
    op.drop_table("webchat_changes")
    op.drop_index("ix_webchat_messages_submitted", table_name="webchat_messages")
    op.drop_index("ix_webchat_messages_channel_thread_root_id", table_name="webchat_messages")
    op.drop_table("webchat_messages")
    op.drop_index("ix_webchat_threads_owner_created_ms", table_name="webchat_threads")
    op.drop_table("webchat_threads")
