"""Issue #30 finding 9 on Telegram: a key a user pasted, and one a tool read, are not stored
in clear: ``channel_events`` (the inbound record), ``messages`` (the checkpoint chain), the
approval rows and every other table hold the mask. The model sees the pasted key masked
(the chat is no way to hand GEODE a secret); within the turn it works with what its tool
returned."""

from __future__ import annotations

from bots.workspaces import binding_workspace
from geode.providers.scripted import ScriptedProvider, ToolCall
from tests.bots.conftest import CHAT, binding, finals, last_user_text
from tests.security._at_rest import stored_text

PASTED = "sk-ant-api03-PASTEDbyTheUser0123456789abcdefXYZ"
IN_FILE = "xoxb-1234567890-0987654321-FILEsecretABCDEFghij"


async def test_pasted_and_read_keys_are_masked_at_rest(make_stack, fake):
    steps = [ToolCall("read_file", {"path": "conf.txt"}), "done"]
    provider = ScriptedProvider(steps)
    stack = make_stack(provider=provider, bindings=[binding(tools=["read_file"])])
    await stack.start()
    ws = binding_workspace(stack.home, stack.bindings[0])
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "conf.txt").write_text(f"SLACK_BOT_TOKEN={IN_FILE}\n")
    fake.user_says(CHAT, f"@geode_bot my key is {PASTED}, and check conf.txt", from_user=42)
    await fake.wait_until(lambda: finals(fake, "done"), within=15)
    assert PASTED not in last_user_text(provider.calls[0])  # masked before it was recorded
    assert "[REDACTED]" in last_user_text(provider.calls[0])
    kept = await stored_text(stack.store)
    assert "channel_events" in kept and "messages" in kept
    assert PASTED not in kept and IN_FILE not in kept
    assert "[REDACTED]" in kept


REPEATED = "sk-ant-api03-REPEATEDbyTheModel0123456789abcdefXYZ"


async def test_a_key_the_model_repeats_reaches_neither_the_thread_nor_the_outbox(
        make_stack, fake):
    # the harness masks the answer it hands back; the layer delivers it as it gets it
    stack = make_stack(provider=ScriptedProvider([f"the key is {REPEATED}"]))
    await stack.start()
    fake.user_says(CHAT, "@geode_bot what is the key?", from_user=42)
    await fake.wait_until(lambda: any("[REDACTED]" in s.plain_text for s in fake.sent),
                          within=15)
    assert not any(REPEATED in s.plain_text for s in fake.sent)
    kept = await stored_text(stack.store)
    assert "channel_outbox" in kept and REPEATED not in kept
