"""A voice note's transcript in its attachment record (``channel_attachments.transcript``),
no longer in a file beside the audio that the model's tools could overwrite.

Revision ID: bots_0005
Revises: bots_0004
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bots_0005"
down_revision: str | None = "bots_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # nullable: the rows an existing database holds have none; a recovered turn transcribes
    # such a voice note again (a file left beside it is never read)
    with op.batch_alter_table("channel_attachments") as batch:
        batch.add_column(sa.Column("transcript", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("channel_attachments") as batch:
        batch.drop_column("transcript")
