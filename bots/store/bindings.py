"""Stored bindings: the ``geode bindings add/remove`` rows of ``channel_bindings`` (the
lookup over config + stored bindings: ``bots.bindings``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
from sqlalchemy import delete, insert, select
from sqlalchemy.exc import IntegrityError

from bots.store._tables import bindings_table
from geode.errors import ConfigError
from geode.settings import BindingSettings

if TYPE_CHECKING:
    from geode.store.database import Database

__all__ = ["StoredBindings"]

log = structlog.get_logger(__name__)
_B = bindings_table


class StoredBindings:
    """The ``geode bindings add/remove`` rows."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    async def list(self) -> list[BindingSettings]:
        async with self._store.read() as conn:
            rows = (await conn.execute(select(_B).order_by(_B.c.id))).all()
        out = []
        for r in rows:
            data = dict(r.settings)
            if "team" not in data:
                # stored before ``team`` existed: its ``workspace`` was the team / guild
                # (the row's column still is), not a folder
                data["team"] = data.pop("workspace", "") or ""
            try:
                out.append(BindingSettings.model_validate(data))
            except ValueError:
                log.warning("bindings.stored_invalid", platform=r.platform, channel=r.channel)
        return out

    async def add(self, binding: BindingSettings) -> None:
        """Store a binding. Raises ConfigError if that channel is bound already."""
        try:
            async with self._store.write() as conn:
                await conn.execute(
                    insert(_B).values(
                        platform=binding.platform,
                        workspace=binding.team,
                        channel=binding.channel,
                        settings=binding.model_dump(mode="json"),
                    )
                )
        except IntegrityError as exc:
            raise ConfigError(
                f"{binding.platform} channel {binding.channel} is bound already; "
                "`geode bindings remove` it first."
            ) from exc

    async def remove(self, platform: str, channel: str, team: str = "") -> bool:
        async with self._store.write() as conn:
            result = await conn.execute(
                delete(_B).where(
                    _B.c.platform == platform, _B.c.channel == channel,
                    _B.c.workspace == team,
                )
            )
        return bool(result.rowcount)
