"""Everything a store holds, as text: every row of every table (issue #30, finding 9: what a
user or a tool gave must not sit there in clear when it is a credential)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import MetaData, select


async def stored_text(store: Any) -> str:
    """All rows of all tables of ``store`` (a ``geode.store.Store``), as one string."""
    async with store.read() as conn:
        meta = MetaData()
        await conn.run_sync(meta.reflect)
        out = []
        for table in meta.sorted_tables:
            for row in (await conn.execute(select(table))).all():
                out.append(f"{table.name}: {tuple(row)!r}")
    return "\n".join(out)
