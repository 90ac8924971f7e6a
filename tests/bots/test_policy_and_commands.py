"""Runtime DAEMON policy per binding, and the thread commands."""

from __future__ import annotations

import asyncio

from geode.providers.scripted import ScriptedProvider
from tests.bots._harness import calls_tool
from tests.bots.conftest import CHAT, binding, finals


async def _denials(store, sid: str) -> list[dict]:
    rows = await store.timeline.list(sid)
    return [r.payload for r in rows if r.kind == "tool.denied"]


async def test_binding_without_write_file_denies_it_at_runtime(make_stack, fake):
    provider = ScriptedProvider([calls_tool("write_file", {"path": "x.txt", "content": "hi"})],
                                repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding(tools=["read_file"])])
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot write it", from_user=42))
    await fake.wait_until(lambda: finals(fake, "done"), within=10)
    sid = f"telegram:123456:{CHAT}:{mid}"
    denied = await _denials(stack.store, sid)
    assert [d["tool"] for d in denied] == ["write_file"]
    assert not (stack.home / "ws" / "x.txt").exists()
    assert not list((stack.home / "workspaces").rglob("x.txt"))


async def test_computer_use_string_true_does_not_enable_computer(make_stack, fake):
    provider = ScriptedProvider([calls_tool("computer", {"action": "screenshot"})],
                                repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding(computer_use="true")])
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot click", from_user=42))
    await fake.wait_until(lambda: finals(fake, "done"), within=10)
    denied = await _denials(stack.store, f"telegram:123456:{CHAT}:{mid}")
    assert [d["tool"] for d in denied] == ["computer"]


async def test_stop_status_and_new_lineage(make_stack, fake):
    started = asyncio.Event()
    release = asyncio.Event()

    class Slow(ScriptedProvider):
        async def complete(self, request):  # a model that waits until stopped
            self.calls.append(request)
            started.set()
            await release.wait()
            return self._to_response("late", request.model)

    provider = Slow()
    stack = make_stack(provider=provider)
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot long job", from_user=42))
    await asyncio.wait_for(started.wait(), 10)
    bot_msg = fake.messages_in(CHAT, from_bot=True)[-1].message_id
    fake.user_says(CHAT, "/status", from_user=42, reply_to=bot_msg)
    await fake.wait_until(lambda: any("running: turn" in s.plain_text for s in fake.sent),
                          within=10)
    fake.user_says(CHAT, "/stop", from_user=42, reply_to=bot_msg)
    await fake.wait_until(lambda: any(s.plain_text.startswith("⏹ Stopped") for s in fake.sent),
                          within=10)
    sid = f"telegram:123456:{CHAT}:{mid}"
    fake.user_says(CHAT, "/new", from_user=42, reply_to=bot_msg)
    await fake.wait_until(lambda: any("New session" in s.plain_text for s in fake.sent),
                          within=10)
    new = await stack.store.sessions.get(f"{sid}#1")
    assert new is not None and new.parent_session_id == sid
    fake.user_says(CHAT, "/status", from_user=42, reply_to=bot_msg)
    await fake.wait_until(lambda: any(f"session: {sid}#1" in s.plain_text for s in fake.sent),
                          within=10)
    release.set()
