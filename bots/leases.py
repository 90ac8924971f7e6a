"""Leases in the store: one poller (and one event processor) per bot token across replicas.

Telegram allows one ``getUpdates`` caller per token; a second one gets 409 and the two
knock each other out (the peers' supervisor-restart 409 storms). Here a second
``geode serve`` on the same token finds the lease held and waits as a standby; it takes
over when the holder stops renewing (crash) or releases it (clean stop).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sqlalchemy import select, update

from bots._tables import leases_table
from bots.inbound import _insert_ignore
from geode.store.models import utcnow

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store import Store

__all__ = ["Lease"]

_L = leases_table


def _now_ms() -> int:
    return int(time.time() * 1000)


class Lease:
    """A named lease held by ``owner`` for ``ttl_s`` at a time; renew well before expiry."""

    def __init__(self, *, store: Store, name: str, owner: str, ttl_s: float = 30.0) -> None:
        self._store = store
        self.name = name
        self.owner = owner
        self.ttl_ms = int(ttl_s * 1000)
        self.held = False

    async def try_acquire(self) -> bool:
        """Take or renew the lease; False while another live owner holds it."""
        now = _now_ms()
        seed = _insert_ignore(self._store, _L, ["name"]).values(
            name=self.name, owner="", expires_at=0, updated_at=utcnow()
        )
        # Compare-and-set: ours already, or expired. Integer ms compare exactly.
        take = update(_L).where(
            _L.c.name == self.name,
            (_L.c.owner == self.owner) | (_L.c.expires_at < now),
        ).values(owner=self.owner, expires_at=now + self.ttl_ms, updated_at=utcnow())

        def tx(conn: Connection) -> bool:
            conn.execute(seed)
            return bool(conn.execute(take).rowcount)

        self.held = await self._store.run_write(tx)
        return self.held

    async def release(self) -> None:
        stmt = (update(_L).where(_L.c.name == self.name, _L.c.owner == self.owner)
                .values(expires_at=0, updated_at=utcnow()))
        await self._store.run_write(lambda conn: conn.execute(stmt))
        self.held = False

    async def holder(self) -> tuple[str, int] | None:
        query = select(_L).where(_L.c.name == self.name)
        row = await self._store.run_read(lambda conn: conn.execute(query).first())
        return None if row is None else (str(row.owner), int(row.expires_at))
