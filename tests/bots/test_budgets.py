"""Spend caps seen from a thread: the mention past a binding's daily token cap gets the cap
message (and the model no request), /status shows today's usage against the cap; SQLite and
PostgreSQL."""

from __future__ import annotations

import pytest

from tests.bots.conftest import CHAT, binding, finals


@pytest.fixture(params=["sqlite", "postgres"])
def store_kw(request: pytest.FixtureRequest) -> dict[str, str]:
    if request.param == "sqlite":
        return {}
    return {"store_url": str(request.getfixturevalue("pg_store_url"))}


async def test_a_binding_over_its_daily_token_cap_answers_with_the_cap(
    store_kw: dict[str, str], make_stack, fake
) -> None:
    stack = make_stack(bindings=[binding(max_tokens_per_day=10)], **store_kw)
    await stack.start()
    fake.user_says(CHAT, "@geode_bot first", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: first"), within=15)
    used = len(stack.provider.calls)
    assert used == 1
    second = fake.message_id_for(fake.user_says(CHAT, "@geode_bot second", from_user=43))

    def capped() -> list[str]:
        return [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)
                if m.reply_to_message_id == second and "spend cap" in m.plain_text]

    await fake.wait_until(capped, within=15)
    text = capped()[0]
    assert text.startswith("⚠️ I could not finish (spend cap: max_tokens_per_day (binding "
                           "telegram:-100123) reached: "), text
    assert "of 10 tokens used today" in text and "resets at" in text and "UTC" in text
    assert len(stack.provider.calls) == used  # the model got no request for the second
    sid = f"telegram:123456:{CHAT}:{second}"
    assert "spend.cap_reached" in [r.kind for r in await stack.store.timeline.list(sid)]

    bot_msg = next(m.message_id for m in fake.messages_in(CHAT, from_bot=True)
                   if m.reply_to_message_id == second and "spend cap" in m.plain_text)
    fake.user_says(CHAT, "/status", from_user=42, reply_to=bot_msg)
    await fake.wait_until(lambda: any("usage today:" in s.plain_text for s in fake.sent),
                          within=10)
    status = next(s.plain_text for s in fake.sent if "usage today:" in s.plain_text)
    assert "tokens of 10 (1 model calls; resets" in status
