"""Discord: runtime policy per binding, /stop (text and slash), slash-command sync, chunking
of long answers, and fuzzed MESSAGE_CREATE payloads."""

from __future__ import annotations

import asyncio
import copy

from _discord_stack import (  # noqa: F401  (fixtures)
    TOKEN,
    dbinding,
    dfake,
    make_dstack,
    sid,
    texts_in,
    wait_shown,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bots.discord import SLASH_COMMANDS, sync_commands
from bots.discord._convert import convert_message
from bots.render import _fence_step
from geode.providers.scripted import ScriptedProvider
from geode.settings import load_settings
from tests.bots._harness import calls_tool


async def test_binding_without_write_file_denies_it_at_runtime(make_dstack, dfake):  # noqa: F811 (fixtures)
    provider = ScriptedProvider([calls_tool("write_file", {"path": "x.txt", "content": "hi"})],
                                repeat_last=True)
    stack = make_dstack(provider=provider, bindings=[dbinding(dfake, tools=["read_file"])])
    await stack.start()
    mid = await dfake.user_says(dfake.channel_id, "write it", mention_bot=True)
    await wait_shown(dfake, "done")
    rows = await stack.store.timeline.list(sid(dfake, mid))
    assert [r.payload["tool"] for r in rows if r.kind == "tool.denied"] == ["write_file"]
    assert not (stack.home / "ws" / "x.txt").exists()
    assert not list((stack.home / "workspaces").rglob("x.txt"))


class _Slow(ScriptedProvider):
    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def complete(self, request):  # waits until stopped
        self.calls.append(request)
        self.started.set()
        await self.release.wait()
        return self._to_response("late", request.model)


async def test_text_stop_cancels_the_running_turn(make_dstack, dfake):  # noqa: F811 (fixtures)
    provider = _Slow()
    stack = make_dstack(provider=provider)
    await stack.start()
    root = await dfake.user_says(dfake.channel_id, "long job", mention_bot=True)
    await asyncio.wait_for(provider.started.wait(), 10)
    await dfake.user_says(dfake.channel_id, "/status", thread_id=root)
    await dfake.wait_for(lambda: any("running: turn" in t for t in texts_in(dfake, root)),
                         timeout=10)
    await dfake.user_says(dfake.channel_id, "/stop", thread_id=root)
    await dfake.wait_for(lambda: any(t.startswith("⏹ Stopped") for t in texts_in(dfake, root)),
                         timeout=10)
    assert not any("late" in t for t in texts_in(dfake, root))
    provider.release.set()


async def test_slash_stop_cancels_and_answers_through_the_interaction(make_dstack, dfake):  # noqa: F811 (fixtures)
    provider = _Slow()
    stack = make_dstack(provider=provider)
    await stack.start()
    # registered at start (once: the guild's commands are read first), and on request (the
    # CLI), which then finds them unchanged and writes nothing
    await dfake.wait_for(lambda: dfake.command_syncs, timeout=10)
    assert dfake.command_syncs == [(dfake.guild_id, [c["name"] for c in SLASH_COMMANDS])]
    done = await sync_commands(*load_settings(
        env={"GEODE_HOME": str(stack.home), "DISCORD_BOT_TOKEN": TOKEN},
        channels={"discord": {"api_base": dfake.api_base}}, bindings=stack.bindings,
    ), guild_ids=())
    assert done == [f"guild {dfake.guild_id}: unchanged"]
    assert dfake.command_syncs == [(dfake.guild_id, [c["name"] for c in SLASH_COMMANDS])]
    root = await dfake.user_says(dfake.channel_id, "long job", mention_bot=True)
    await asyncio.wait_for(provider.started.wait(), 10)
    await dfake.wait_for(lambda: root in dfake.channels, timeout=5)
    iid = await dfake.slash_command(dfake.guild_id, root, "stop")
    await dfake.wait_for(lambda: any(t.startswith("⏹ Stopped") for t in texts_in(dfake, root)),
                         timeout=10)
    await dfake.wait_for(lambda: any(r.interaction_id == iid and r.kind == "followup"
                                     for r in dfake.interaction_responses), timeout=10)
    kinds = [(r.kind, r.type) for r in dfake.interaction_responses if r.interaction_id == iid]
    assert kinds[0] == ("callback", 5)  # deferred only after the command was recorded
    assert ("followup", None) in kinds
    assert any(r.content and r.content.startswith("Stopping")
               for r in dfake.interaction_responses)
    # a slash command in an unbound channel is refused, ephemerally, with nothing recorded
    iid2 = await dfake.slash_command(dfake.guild_id, dfake.other_channel, "status")
    await dfake.wait_for(lambda: any(r.interaction_id == iid2
                                     for r in dfake.interaction_responses), timeout=5)
    refused = [r for r in dfake.interaction_responses if r.interaction_id == iid2]
    assert refused[0].ephemeral and "not bound" in (refused[0].content or "")
    provider.release.set()


def _balanced(text: str) -> bool:
    marker = None
    for line in text.split("\n"):
        marker, _ = _fence_step(line, marker)
    return marker is None


async def test_long_answer_with_code_block_is_chunked_with_balanced_fences(make_dstack, dfake):  # noqa: F811 (fixtures)
    code = "\n".join(f"    result_{i} = compute({i}, factor=2)  # step {i}" for i in range(70))
    answer = ("Here is the plan.\n\n" + "Some prose. " * 100 + "\n\n```python\n" + code
              + "\n```\n\n" + "Closing words. " * 60)
    assert len(answer) > 5000
    stack = make_dstack(provider=ScriptedProvider([lambda r: answer], repeat_last=True))
    await stack.start()
    root = await dfake.user_says(dfake.channel_id, "big", mention_bot=True)
    await dfake.wait_for(lambda: "Closing words." in "".join(texts_in(dfake, root)), timeout=10)
    await asyncio.sleep(0.2)
    chunks = texts_in(dfake, root)
    assert len(chunks) >= 3
    assert all(len(c) <= 2000 for c in chunks)
    assert all(_balanced(c) for c in chunks)
    # the code survived whole: every line once, the language tag on every reopened fence
    joined = "\n".join(chunks)
    for i in range(70):
        assert joined.count(f"result_{i} = compute({i},") == 1
    opened = [c for c in chunks if "result_" in c]
    assert len(opened) >= 2 and all("```python" in c for c in opened)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=4),
    max_leaves=12,
)
_FIELDS = ["id", "channel_id", "author", "content", "type", "mentions", "message_reference",
           "referenced_message", "attachments", "guild_id", "webhook_id"]


@st.composite
def _mangled(draw: st.DrawFn, base: dict) -> dict:
    msg = copy.deepcopy(base)
    for key in draw(st.lists(st.sampled_from(_FIELDS), max_size=4, unique=True)):
        if draw(st.booleans()):
            msg.pop(key, None)
        else:
            msg[key] = draw(_json)
    return msg


async def test_fuzzed_message_create_never_stops_the_intake(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack = make_dstack()
    c = await stack.start()
    base = dfake._store_message(dfake.channel_id, dfake.user_id, "x", store=False)
    bad: list[dict] = []

    @settings(max_examples=30, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(_mangled(base))
    def collect(payload: dict) -> None:
        payload["channel_id"] = str(dfake.channel_id) if isinstance(
            payload.get("channel_id"), dict) else payload.get("channel_id")
        if payload.get("id") == base["id"]:  # distinct messages, not one deduplicated id
            payload["id"] = str(dfake._snowflake())
        convert_message(payload, bot_id=c.bot_id, parent_id=None)  # pure: must not raise
        bad.append(payload)

    collect()
    connections = len(dfake.connections)
    for payload in bad:  # through the real gateway, discord.py's parser included
        await dfake._dispatch("MESSAGE_CREATE", payload)
    await dfake.user_says(dfake.channel_id, "still alive?", mention_bot=True)
    await wait_shown(dfake, "answer to: still alive?", timeout=15)
    assert not c._tasks[0].done() and not c._tasks[1].done()
    # discord.py's own parser failing on a payload did not cost the gateway connection
    assert len(dfake.connections) == connections
