"""Issue #30 finding 9 on Discord: a key pasted in a mention is masked before it is recorded
(``channel_events``) and in the checkpoint chain (``messages``)."""

from __future__ import annotations

from _discord_stack import dbinding, dfake, make_dstack, shown  # noqa: F401  (fixtures)

from geode.providers.scripted import ScriptedProvider
from tests.security._at_rest import stored_text

PASTED = "sk-ant-api03-PASTEDbyTheUser0123456789abcdefXYZ"


async def test_a_pasted_key_is_masked_at_rest(make_dstack, dfake):  # noqa: F811
    stack = make_dstack(provider=ScriptedProvider(["ok"], repeat_last=True))
    await stack.start()
    await dfake.user_says(dfake.channel_id, f"use {PASTED} for the deploy", mention_bot=True)
    await dfake.wait_for(lambda: shown(dfake, "ok"), timeout=10)
    kept = await stored_text(stack.store)
    assert "channel_events" in kept and PASTED not in kept and "[REDACTED]" in kept
