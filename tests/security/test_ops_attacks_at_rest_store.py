"""Issue #30 finding 9, the harness' own records: a session's title (its first prompt, from
the terminal or the thin CLI) and an effect's receipt (the tool's error text) keep no
credential in clear."""

from __future__ import annotations

from pathlib import Path

from geode.store import open_store
from geode.store.sessions import short_title
from tests.security._at_rest import stored_text

KEY = "sk-ant-api03-TYPEDinTheRepl0123456789abcdefXYZ"


async def test_titles_and_receipts_are_masked(tmp_path: Path) -> None:
    async with await open_store(f"sqlite:///{tmp_path / 'geode.db'}") as store:
        sid = await store.sessions.create(mode="repl", model="m", title=f"use {KEY} please")
        other = await store.sessions.create(mode="repl", model="m")
        await store.sessions.title_if_untitled(other, short_title(f"deploy with {KEY} now"))
        await store.receipts.intend(session_id=sid, turn_id="t", call_id="c", tool="run_bash",
                                    args_hash="h")
        await store.receipts.finish(session_id=sid, call_id="c", status="failed",
                                    detail=f"curl: (22) 401 for Authorization: Bearer {KEY}")
        kept = await stored_text(store)
    assert "sessions" in kept and "effect_receipts" in kept
    assert "sk-ant-api03-TYPED" not in kept and "[REDACTED]" in kept
