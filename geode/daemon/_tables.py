"""The daemon's store table: scheduled jobs (migration ``0002_daemon``).

``next_run`` is integer Unix seconds, not a DateTime: the claim is an exact-match
``UPDATE ... WHERE next_run = :due`` and integers compare exactly on both dialects
(SQLite stores DateTime as text, where a round trip could change the spelling).
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import BigInteger, Boolean, Integer, String, Table, Text
from sqlalchemy.orm import Mapped, mapped_column

from geode.store.models import Base, utcnow

__all__ = ["ScheduledJobModel", "jobs_table"]


class ScheduledJobModel(Base):
    """A prompt run by ``geode serve`` in SCHEDULER mode on a cron expression."""

    __tablename__ = "scheduled_jobs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    cron: Mapped[str] = mapped_column(String(200))
    prompt: Mapped[str] = mapped_column(Text)
    #: run every time in this session; None = a fresh session per run
    session_id: Mapped[str | None] = mapped_column(String(200))
    model: Mapped[str | None] = mapped_column(String(200))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    #: the due time (Unix seconds) the next claim must match; advanced by the claim itself
    next_run: Mapped[int] = mapped_column(BigInteger, index=True)
    last_run: Mapped[int | None] = mapped_column(BigInteger)
    last_status: Mapped[str] = mapped_column(String(32), default="")
    last_session_id: Mapped[str | None] = mapped_column(String(200))
    claimed_by: Mapped[str] = mapped_column(String(200), default="")
    run_count: Mapped[int] = mapped_column(Integer, default=0)
    #: the daemon running the job now (None when none) and until when its lease holds
    #: (Unix seconds; renewed while the run lasts, so a dead daemon's lease runs out)
    running_by: Mapped[str | None] = mapped_column(String(200))
    running_until: Mapped[int | None] = mapped_column(BigInteger)
    #: IANA time zone the cron is read in (None = UTC); next_run stays Unix seconds
    tz: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


jobs_table = cast(Table, ScheduledJobModel.__table__)
