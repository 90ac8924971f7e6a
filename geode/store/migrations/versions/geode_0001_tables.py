"""The harness's tables (branch ``geode``): sessions, messages, checkpoints, effect receipts,
timeline events, scheduled jobs, the usage ledger, spend reservations, kept results.

Revision ID: geode_0001
Revises:
Create Date: 2026-12-05

The geode part of the linear chain 0001-0012 (``migrations/legacy``), its operations in
the same order (so the schema is the same to the byte), written out in full: a migration
is a frozen snapshot, the models move on. ``tests/store/test_migrations.py`` proves the
heads == the models.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "geode_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = ("geode",)
depends_on: str | Sequence[str] | None = None
#: the tables this revision makes are the ones the linear chain had made by
#: revision ``0012``: a database at that revision is stamped here, not migrated
#: (``geode.store.schema``)
legacy_head: str = "0012"

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit serial.
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    _up_0001()
    _up_0002()
    _up_0004()
    _up_0005()
    _up_0007()
    _up_0009()
    _up_0011()
    _up_0012()


def downgrade() -> None:
    _down_0012()
    _down_0011()
    _down_0009()
    _down_0007()
    _down_0005()
    _down_0004()
    _down_0002()
    _down_0001()


def _up_0001() -> None:
    # as the legacy revision 0001 did
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("mode", sa.String(length=32), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("parent_session_id", sa.String(length=200), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["parent_session_id"],
            ["sessions.id"],
            name="fk_sessions_parent_session_id_sessions",
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_sessions"),
    )
    op.create_index("ix_sessions_parent_session_id", "sessions", ["parent_session_id"])
    op.create_index("ix_sessions_updated_at", "sessions", ["updated_at"])

    op.create_table(
        "messages",
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name="fk_messages_session_id_sessions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "idx", name="pk_messages"),
    )

    op.create_table(
        "checkpoints",
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("turn_id", sa.String(length=100), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name="fk_checkpoints_session_id_sessions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "seq", name="pk_checkpoints"),
    )

    op.create_table(
        "effect_receipts",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("turn_id", sa.String(length=100), nullable=False),
        sa.Column("call_id", sa.String(length=200), nullable=False),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("args_hash", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_effect_receipts"),
        sa.UniqueConstraint("session_id", "call_id", name="uq_effect_receipts_session_call"),
    )
    op.create_index(
        "ix_effect_receipts_session_id_status", "effect_receipts", ["session_id", "status"]
    )

    op.create_table(
        "timeline_events",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("turn_id", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("correlation_id", sa.String(length=100), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_timeline_events"),
    )
    op.create_index("ix_timeline_events_created_at", "timeline_events", ["created_at"])
    op.create_index("ix_timeline_events_session_id_id", "timeline_events", ["session_id", "id"])


def _down_0001() -> None:
    op.drop_table("timeline_events")
    op.drop_table("effect_receipts")
    op.drop_table("checkpoints")
    op.drop_table("messages")
    op.drop_table("sessions")


def _up_0002() -> None:
    # as the legacy revision 0002 did
    op.create_table(
        "scheduled_jobs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("cron", sa.String(length=200), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=True),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("next_run", sa.BigInteger(), nullable=False),
        sa.Column("last_run", sa.BigInteger(), nullable=True),
        sa.Column("last_status", sa.String(length=32), nullable=False),
        sa.Column("last_session_id", sa.String(length=200), nullable=True),
        sa.Column("claimed_by", sa.String(length=200), nullable=False),
        sa.Column("run_count", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_scheduled_jobs"),
    )
    op.create_index("ix_scheduled_jobs_next_run", "scheduled_jobs", ["next_run"])


def _down_0002() -> None:
    op.drop_index("ix_scheduled_jobs_next_run", table_name="scheduled_jobs")
    op.drop_table("scheduled_jobs")


def _up_0004() -> None:
    # as the legacy revision 0004 did
    # Nullable columns: a plain ADD COLUMN, no table copy on SQLite.
    op.add_column("scheduled_jobs", sa.Column("running_by", sa.String(length=200), nullable=True))
    op.add_column("scheduled_jobs", sa.Column("running_until", sa.BigInteger(), nullable=True))


def _down_0004() -> None:
    with op.batch_alter_table("scheduled_jobs") as batch:
        batch.drop_column("running_until")
        batch.drop_column("running_by")


def _up_0005() -> None:
    # as the legacy revision 0005 did
    op.add_column("scheduled_jobs", sa.Column("tz", sa.String(length=64), nullable=True))


def _down_0005() -> None:
    with op.batch_alter_table("scheduled_jobs") as batch:
        batch.drop_column("tz")


def _up_0007() -> None:
    # as the legacy revision 0007 did
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


def _down_0007() -> None:
    op.drop_index("ix_usage_ledger_thread", table_name="usage_ledger")
    op.drop_index("ix_usage_ledger_binding_at", table_name="usage_ledger")
    op.drop_index("ix_usage_ledger_at", table_name="usage_ledger")
    op.drop_table("usage_ledger")


def _up_0009() -> None:
    # as the legacy revision 0009 did
    op.add_column("effect_receipts",
                  sa.Column("approved_by", sa.String(length=100), nullable=True))
    op.add_column("effect_receipts",
                  sa.Column("approved_by_name", sa.String(length=200), nullable=True))


def _down_0009() -> None:
    with op.batch_alter_table("effect_receipts") as batch:
        batch.drop_column("approved_by_name")
        batch.drop_column("approved_by")


def _up_0011() -> None:
    # as the legacy revision 0011 did
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


def _down_0011() -> None:
    op.drop_table("spend_reservations")


def _up_0012() -> None:
    # as the legacy revision 0012 did
    op.create_table(
        "kept_results",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("turn_id", sa.String(length=100), nullable=False),
        sa.Column("call_id", sa.String(length=200), nullable=False),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("chars", sa.BigInteger(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_kept_results"),
    )
    op.create_index("ix_kept_results_session_id", "kept_results", ["session_id"])


def _down_0012() -> None:
    op.drop_table("kept_results")
