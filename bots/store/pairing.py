"""Pairing codes in ``channel_pairing`` (the sender policy: ``bots.router.SenderPolicy``).

An unknown sender who addresses the bot gets one pairing code per hour (never more: a
flood of messages must not become a flood of replies), and the platform as a whole gets
at most ``max_new_per_hour`` new codes. One sender gets at most ``max_per_sender_per_day``
codes in 24 hours, however often its codes expire (issue #30: a pairing code per message
of a sender was a flood lever). ``geode pairing approve CODE`` allows the sender on that
platform for good. A message sent *as a chat* (Telegram's ``sender_chat``: a channel or an
anonymous admin) never gets a code (``bots.router.SenderPolicy``): it names no person to pair.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, insert, select, update

from bots.store._tables import pairing_table
from geode.errors import ConfigError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from geode.store.database import Database

__all__ = ["CODE_TTL_S", "PairingRecord", "PairingStore"]

_P = pairing_table
_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud, typed by hand
CODE_TTL_S = 3600
#: the window of the per-sender limit
SENDER_WINDOW_S = 24 * 3600


@dataclass(frozen=True, kw_only=True)
class PairingRecord:
    code: str
    platform: str
    sender: str
    sender_name: str
    channel: str
    status: str
    issued_at: int
    expires_at: int
    approved_at: int | None


def _record(r: Any) -> PairingRecord:
    return PairingRecord(
        code=r.code, platform=r.platform, sender=r.sender, sender_name=r.sender_name,
        channel=r.channel, status=r.status, issued_at=r.issued_at, expires_at=r.expires_at,
        approved_at=r.approved_at,
    )


class PairingStore:
    """Pairing codes in ``channel_pairing``."""

    def __init__(self, *, store: Database, max_new_per_hour: int = 20,
                 max_per_sender_per_day: int = 3) -> None:
        self._store = store
        self.max_new_per_hour = max_new_per_hour
        self.max_per_sender_per_day = max_per_sender_per_day

    async def is_approved(self, platform: str, sender: str) -> bool:
        async with self._store.read() as conn:
            row = (
                await conn.execute(
                    select(_P.c.code).where(
                        _P.c.platform == platform, _P.c.sender == sender,
                        _P.c.status == "approved",
                    ).limit(1)
                )
            ).first()
        return row is not None

    async def issue(
        self, *, platform: str, sender: str, sender_name: str, channel: str,
        now: int | None = None, conn: AsyncConnection | None = None,
    ) -> str | None:
        """A new code for ``sender``, or None when one is still pending or the cap is hit.

        With ``conn`` the code is written inside the caller's transaction (the layer queues
        the pairing message in the same one, so a code is never issued without its message).
        """
        now = int(time.time()) if now is None else now
        if conn is not None:
            return await self._issue(conn, platform, sender, sender_name, channel, now)
        async with self._store.write() as c:
            return await self._issue(c, platform, sender, sender_name, channel, now)

    async def _issue(
        self, conn: AsyncConnection, platform: str, sender: str, sender_name: str,
        channel: str, now: int,
    ) -> str | None:
        if self._store.is_postgres:
            # The pending check, the hourly count and the insert are separate statements:
            # replicas issuing at once (the same sender in two threads, or two senders at the
            # cap) queue here, per platform, until commit. Issuing is rare (unknown senders,
            # capped per hour), so one queue per platform costs nothing. (SQLite writers are
            # serialised by the database lock already.)
            key = func.hashtextextended(f"geode-pairing:{platform}", 0)
            await conn.execute(select(func.pg_advisory_xact_lock(key)))
        pending = (
            await conn.execute(
                select(_P.c.code).where(
                    _P.c.platform == platform, _P.c.sender == sender,
                    _P.c.status == "pending", _P.c.expires_at > now,
                ).limit(1)
            )
        ).first()
        if pending is not None:
            return None
        mine = (
            await conn.execute(
                select(func.count()).select_from(_P).where(
                    _P.c.platform == platform, _P.c.sender == sender,
                    _P.c.issued_at > now - SENDER_WINDOW_S,
                )
            )
        ).scalar_one()
        if int(mine) >= self.max_per_sender_per_day:
            return None  # this sender had its codes today: quiet until the window moves
        recent = (
            await conn.execute(
                select(func.count()).select_from(_P).where(
                    _P.c.platform == platform, _P.c.issued_at > now - CODE_TTL_S
                )
            )
        ).scalar_one()
        if int(recent) >= self.max_new_per_hour:
            return None
        code = "".join(secrets.choice(_ALPHABET) for _ in range(8))
        await conn.execute(
            insert(_P).values(
                code=code, platform=platform, sender=sender, sender_name=sender_name[:200],
                channel=channel, status="pending", issued_at=now,
                expires_at=now + CODE_TTL_S, approved_at=None,
            )
        )
        return code

    async def list(self, *, status: str | None = None) -> list[PairingRecord]:
        query = select(_P).order_by(_P.c.issued_at.desc())
        if status is not None:
            query = query.where(_P.c.status == status)
        async with self._store.read() as conn:
            return [_record(r) for r in (await conn.execute(query)).all()]

    async def approve(self, code: str, *, now: int | None = None) -> PairingRecord:
        """Approve a pending, unexpired code. Raises ConfigError saying what is wrong."""
        now = int(time.time()) if now is None else now
        code = code.strip().upper()
        async with self._store.write() as conn:
            row = (await conn.execute(select(_P).where(_P.c.code == code))).first()
            if row is None:
                raise ConfigError(f"no pairing code {code!r}; `geode pairing list` shows them.")
            if row.status == "approved":
                return _record(row)
            if row.expires_at <= now:
                raise ConfigError(
                    f"pairing code {code} expired; the sender gets a new one by writing again."
                )
            await conn.execute(
                update(_P).where(_P.c.code == code).values(status="approved", approved_at=now)
            )
            row = (await conn.execute(select(_P).where(_P.c.code == code))).first()
        assert row is not None
        return _record(row)
