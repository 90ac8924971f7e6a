"""What the dispatcher reads per event: a new thread needs no thread lookup."""

from __future__ import annotations

from typing import Any

from tests.bots.conftest import CHAT, finals


async def test_a_new_thread_is_not_looked_up_a_follow_up_is(make_stack, fake):
    stack = make_stack()
    connector = await stack.start()
    layer = connector.layer
    looked_up: list[str] = []
    real_get = layer.threads.get

    async def counting_get(thread_key: str) -> Any:
        looked_up.append(thread_key)
        return await real_get(thread_key)

    layer.threads.get = counting_get
    first = fake.message_id_for(fake.user_says(CHAT, "@geode_bot new thread", from_user=42))
    await fake.wait_until(lambda: finals(fake, "answer to: new thread"), within=10)
    assert looked_up == []
    # a reply without a mention is answered because the thread is engaged: that needs the read
    answer = fake.messages_in(CHAT, from_bot=True)[-1].message_id
    fake.user_says(CHAT, "follow-up", from_user=42, reply_to=answer)
    await fake.wait_until(lambda: finals(fake, "answer to: follow-up"), within=10)
    assert looked_up and set(looked_up) == {f"telegram:123456:{CHAT}:{first}"}
