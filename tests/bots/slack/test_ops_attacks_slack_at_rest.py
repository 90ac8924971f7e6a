"""Issue #30 finding 9 on Slack: a key pasted in a mention is masked before it is recorded
(``channel_events``) and in the checkpoint chain (``messages``)."""

from __future__ import annotations

from slack_helpers import ALICE, CH, make, mention, visible

from geode.providers.scripted import ScriptedProvider
from tests.security._at_rest import stored_text

PASTED = "sk-ant-api03-PASTEDbyTheUser0123456789abcdefXYZ"


async def test_a_pasted_key_is_masked_at_rest(stacks, home, fake):
    stack = make(stacks, home, fake, provider=ScriptedProvider(["ok"], repeat_last=True))
    await stack.start()
    await fake.user_posts(CH, mention(f"use {PASTED} for the deploy"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "ok"), within=10)
    kept = await stored_text(stack.store)
    assert "channel_events" in kept and PASTED not in kept and "[REDACTED]" in kept
