"""A stop request on a thread's lease (``channel_thread_leases.stop_event``, ``stop_by``):
Stop clicked in the console of one replica for a turn another replica runs. The holder's
heartbeat, which renews the row anyway, reads it and stops the turn of that event.

Revision ID: bots_0006
Revises: bots_0005
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bots_0006"
down_revision: str | None = "bots_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # nullable: no request is the common case (and every existing row's)
    with op.batch_alter_table("channel_thread_leases") as batch:
        batch.add_column(sa.Column("stop_event", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("stop_by", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("channel_thread_leases") as batch:
        batch.drop_column("stop_by")
        batch.drop_column("stop_event")
