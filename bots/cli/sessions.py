"""What ``geode sessions show`` adds to a session from the channel tables: the attachments
its thread received (saved where, or refused and why)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from geode.store import Store

__all__ = ["session_details"]


async def session_details(store: Store, session_id: str) -> dict[str, Any]:
    """``{"attachments": [...]}``: each attachment's record, oldest first."""
    from bots.store import AttachmentRecords

    attachments = await AttachmentRecords(store=store).for_session(session_id)
    return {"attachments": [a.to_json() for a in attachments]}
