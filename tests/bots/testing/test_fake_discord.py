"""The fake Discord, driven by the real discord.py client."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import discord
import pytest
from discord import app_commands

from bots.testing.discord import FakeDiscord

WAIT = 10.0


class Bot(discord.Client):
    """A minimal discord.py bot that records what it sees."""

    def __init__(self, *, message_content: bool = True, **kwargs: Any) -> None:
        intents = discord.Intents.default()
        intents.message_content = message_content
        # A short guild_ready_timeout only shortens discord.py's wait for more GUILD_CREATEs.
        super().__init__(intents=intents, guild_ready_timeout=0.05, **kwargs)
        self.ready_evt = asyncio.Event()
        self.resumed_evt = asyncio.Event()
        self.inbox: asyncio.Queue[discord.Message] = asyncio.Queue()
        self.own: asyncio.Queue[discord.Message] = asyncio.Queue()
        self.threads: asyncio.Queue[discord.Thread] = asyncio.Queue()

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        # discord.py sleeps 5 s before every non-initial IDENTIFY (Discord's identify rate limit);
        # the fake has no such limit, so the scenarios skip the wait.
        return None

    async def on_ready(self) -> None:
        self.ready_evt.set()

    async def on_resumed(self) -> None:
        self.resumed_evt.set()

    async def on_message(self, message: discord.Message) -> None:
        (self.own if message.author == self.user else self.inbox).put_nowait(message)

    async def on_thread_create(self, thread: discord.Thread) -> None:
        self.threads.put_nowait(thread)

    async def next_message(self) -> discord.Message:
        return await asyncio.wait_for(self.inbox.get(), WAIT)


@pytest.fixture
async def srv() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord(heartbeat_interval_ms=1000) as fake:
        with fake.patch_discord():
            yield fake


@contextlib.asynccontextmanager
async def running(srv: FakeDiscord, bot: Bot | None = None) -> AsyncIterator[Bot]:
    bot = bot or Bot()
    task = asyncio.create_task(bot.start(srv.token))
    try:
        await asyncio.wait_for(bot.ready_evt.wait(), WAIT)
        yield bot
    finally:
        await bot.close()
        await asyncio.wait_for(task, WAIT)


def ids(messages: list[discord.Message]) -> list[int]:
    return [m.id for m in messages]


async def test_patch_discord_points_and_restores() -> None:
    before_base = discord.http.Route.BASE
    before_gw = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    async with FakeDiscord() as fake:
        with fake.patch_discord():
            assert discord.http.Route.BASE == fake.api_base
            assert str(discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY) == fake.gateway_url
        assert discord.http.Route.BASE == before_base
    assert discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY == before_gw


async def test_mention_reply_is_recorded_and_echoed_to_bot(srv: FakeDiscord) -> None:
    async with running(srv) as bot:
        assert bot.user is not None and bot.user.id == srv.bot_id
        shards, url, _limits = await bot.http.get_bot_gateway()
        assert (shards, url) == (1, srv.gateway_url)
        channel = bot.get_channel(srv.channel_id)
        assert isinstance(channel, discord.TextChannel)
        mid = await srv.user_says(srv.channel_id, "hello", mention_bot=True)
        got = await bot.next_message()
        assert got.id == mid
        assert got.content == f"<@{srv.bot_id}> hello"
        assert bot.user in got.mentions
        assert got.author.id == srv.user_id
        assert isinstance(got.author, discord.Member)

        reply = await got.reply("hi there")
        assert reply.reference is not None and reply.reference.message_id == mid
        # Discord echoes the bot's own message on the gateway; a bot must ignore itself.
        echoed = await asyncio.wait_for(bot.own.get(), WAIT)
        assert echoed.id == reply.id

    assert [(s.channel_id, s.content, s.reference) for s in srv.sent] == [
        (srv.channel_id, "hi there", mid)
    ]
    assert [m["content"] for m in srv.messages_in(srv.channel_id)] == [
        f"<@{srv.bot_id}> hello",
        "hi there",
    ]
    first = srv.connections[0]
    assert (first["path"], first["v"]) == ("/gateway", "10")
    # discord.py asks for zstd-stream when `zstandard` is importable, else zlib-stream; the
    # fake compresses zlib-stream and answers anything else uncompressed, which both accept.
    assert first["compress"] in ("zlib-stream", "zstd-stream")
    assert srv.identifies == 1 and srv.heartbeats >= 1


async def test_thread_from_message_and_send_in_it(srv: FakeDiscord) -> None:
    async with running(srv) as bot:
        mid = await srv.user_says(srv.channel_id, "start", mention_bot=True)
        got = await bot.next_message()
        thread = await got.create_thread(name="geode session")
        assert thread.id == mid  # Discord: a thread started on a message takes its id
        announced = await asyncio.wait_for(bot.threads.get(), WAIT)
        assert announced.id == mid and announced.parent_id == srv.channel_id
        assert bot.get_channel(mid) is not None

        await thread.send("working on it")
        await srv.user_says(srv.channel_id, "follow-up", thread_id=mid)
        follow = await bot.next_message()
        assert isinstance(follow.channel, discord.Thread) and follow.channel.id == mid

        active = await thread.guild.active_threads()
        assert [t.id for t in active] == [mid]
        with pytest.raises(discord.HTTPException) as exc:
            await got.create_thread(name="again")
        assert exc.value.code == 160004

    assert [(t["id"], t["parent_id"]) for t in srv.threads_created] == [
        (str(mid), str(srv.channel_id))
    ]
    assert [(s.channel_id, s.content) for s in srv.sent] == [(mid, "working on it")]
    assert [m["content"] for m in srv.messages_in(mid)] == ["working on it", "follow-up"]


async def test_threads_denied_where_channel_forbids_them(srv: FakeDiscord) -> None:
    closed = srv.add_text_channel(srv.guild_id, "no-threads", threads_allowed=False)
    async with running(srv) as bot:
        mid = await srv.user_says(closed, "hi", mention_bot=True)
        got = await bot.next_message()
        assert got.id == mid
        assert isinstance(got.channel, discord.TextChannel)
        assert not got.channel.permissions_for(got.channel.guild.me).create_public_threads
        with pytest.raises(discord.Forbidden) as exc:
            await got.create_thread(name="t")
        assert exc.value.code == 50013
    assert srv.threads_created == []


async def test_drop_then_resume_replays_missed_message_once(srv: FakeDiscord) -> None:
    async with running(srv) as bot:
        srv.hold_gateway()  # the reconnect waits, so the next message is surely missed
        await srv.drop_connection()
        await srv.wait_for(lambda: srv.live_connections == 0)
        missed = await srv.user_says(srv.channel_id, "while down", mention_bot=True)
        srv.release_gateway()

        await asyncio.wait_for(bot.resumed_evt.wait(), WAIT)
        assert (await bot.next_message()).id == missed
        marker = await srv.user_says(srv.channel_id, "after resume", mention_bot=True)
        assert (await bot.next_message()).id == marker
        assert bot.inbox.empty()

    assert (srv.identifies, srv.resumes) == (1, 1)
    assert srv.connections[1]["path"] == "/resume-gateway"


async def test_reconnect_request_resumes(srv: FakeDiscord) -> None:
    async with running(srv) as bot:
        await srv.request_reconnect()
        await asyncio.wait_for(bot.resumed_evt.wait(), WAIT)
        mid = await srv.user_says(srv.channel_id, "x", mention_bot=True)
        assert (await bot.next_message()).id == mid
    assert (srv.identifies, srv.resumes) == (1, 1)


async def test_invalid_session_forces_fresh_identify(srv: FakeDiscord) -> None:
    async with running(srv) as bot:
        bot.ready_evt.clear()
        await srv.invalidate_session(resumable=False)
        await asyncio.wait_for(bot.ready_evt.wait(), WAIT)
        assert (srv.identifies, srv.resumes) == (2, 0)
        assert srv.active_sessions == 1  # the invalidated one is gone
        # The new session works; the cache was rebuilt from the new GUILD_CREATE.
        assert bot.get_channel(srv.channel_id) is not None
        mid = await srv.user_says(srv.channel_id, "again", mention_bot=True)
        assert (await bot.next_message()).id == mid


async def test_resume_of_ended_session_is_refused_then_identify(srv: FakeDiscord) -> None:
    async with running(srv) as bot:
        srv.hold_gateway()
        await srv.drop_connection()
        await srv.wait_for(lambda: srv.live_connections == 0)
        srv.expire_sessions()  # Discord forgot the session while the bot was away
        bot.ready_evt.clear()
        srv.release_gateway()
        await asyncio.wait_for(bot.ready_evt.wait(), WAIT)
    assert (srv.identifies, srv.resumes) == (2, 0)


async def test_rate_limited_send_is_retried(srv: FakeDiscord) -> None:
    async with running(srv) as bot:
        channel = bot.get_channel(srv.channel_id)
        assert isinstance(channel, discord.TextChannel)
        srv.fail_next(f"POST /channels/{srv.channel_id}/messages", retry_after=0.2)
        sent = await channel.send("after 429")
    posts = [r for r in srv.requests if r == ("POST", f"/channels/{srv.channel_id}/messages")]
    assert len(posts) == 2
    assert [(s.message_id, s.content) for s in srv.sent] == [(sent.id, "after 429")]


async def test_history_after_before_and_latest(srv: FakeDiscord) -> None:
    # Posted while no client is connected: only history can return them.
    posted = [await srv.user_says(srv.channel_id, f"m{i}") for i in range(5)]
    async with running(srv) as bot:
        channel = bot.get_channel(srv.channel_id)
        assert isinstance(channel, discord.TextChannel)
        after = [m async for m in channel.history(after=discord.Object(id=posted[1]))]
        assert ids(after) == posted[2:]  # discord.py yields oldest first for `after`
        paged = [m async for m in channel.history(after=discord.Object(id=posted[0]), limit=None)]
        assert ids(paged) == posted[1:]
        latest = [m async for m in channel.history(limit=2)]
        assert ids(latest) == posted[:2:-1][:2]
        before = [m async for m in channel.history(before=discord.Object(id=posted[2]))]
        assert ids(before) == [posted[1], posted[0]]
        assert [m.content for m in after] == ["m2", "m3", "m4"]
    assert bot.inbox.empty()


async def test_edit_delete_react_typing(srv: FakeDiscord) -> None:
    async with running(srv) as bot:
        channel = bot.get_channel(srv.channel_id)
        assert isinstance(channel, discord.TextChannel)
        mid = await srv.user_says(srv.channel_id, "please", mention_bot=True)
        got = await bot.next_message()
        await got.add_reaction("👀")
        async with channel.typing():
            progress = await channel.send("thinking…")
        edited = await progress.edit(content="done")
        assert edited.content == "done" and edited.edited_at is not None
        scratch = await channel.send("scratch")
        await scratch.delete()
        with pytest.raises(discord.HTTPException) as exc:
            await got.edit(content="not mine")
        assert exc.value.code == 50005

    assert srv.reactions == [(srv.channel_id, mid, "👀")]
    assert srv.typing and set(srv.typing) == {srv.channel_id}
    assert srv.edits == [(srv.channel_id, progress.id, "done")]
    assert srv.deleted == [(srv.channel_id, scratch.id)]
    final = srv.messages_in(srv.channel_id)
    assert [m["content"] for m in final] == [f"<@{srv.bot_id}> please", "done"]
    assert final[0]["reactions"][0]["emoji"]["name"] == "👀"


async def test_discord_validation_errors(srv: FakeDiscord) -> None:
    async with running(srv) as bot:
        channel = bot.get_channel(srv.channel_id)
        assert isinstance(channel, discord.TextChannel)
        with pytest.raises(discord.HTTPException) as exc:
            await channel.send("x" * 2001)
        assert (exc.value.status, exc.value.code) == (400, 50035)
        ok = await channel.send("x" * 2000)
        with pytest.raises(discord.NotFound):
            await channel.fetch_message(1)
        with_file = await channel.send("report", file=discord.File(io.BytesIO(b"x"), "a.txt"))
        assert [a.filename for a in with_file.attachments] == ["a.txt"]
    assert [(s.message_id, s.attachments) for s in srv.sent] == [
        (ok.id, ()),
        (with_file.id, ("a.txt",)),
    ]


async def test_without_message_content_intent_content_is_blank(srv: FakeDiscord) -> None:
    async with running(srv, Bot(message_content=False)) as bot:
        await srv.user_says(srv.channel_id, "secret")
        assert (await bot.next_message()).content == ""
        await srv.user_says(srv.channel_id, "for you", mention_bot=True)
        assert (await bot.next_message()).content == f"<@{srv.bot_id}> for you"


async def test_bad_token_is_login_failure(srv: FakeDiscord) -> None:
    bot = Bot()
    try:
        with pytest.raises(discord.LoginFailure):
            await bot.login("wrong-token")
    finally:
        await bot.close()
    assert srv.identifies == 0


async def test_slash_command_sync_and_interaction_reply(srv: FakeDiscord) -> None:
    bot = Bot()
    tree = app_commands.CommandTree(bot)
    invoked: list[int] = []

    @tree.command(name="status", description="Show status")
    async def status(interaction: discord.Interaction) -> None:
        invoked.append(interaction.user.id)
        await interaction.response.send_message("idle")

    @tree.command(name="new", description="New session")
    async def new(interaction: discord.Interaction) -> None:
        await interaction.response.defer(thinking=True)
        await interaction.edit_original_response(content="new session started")
        await interaction.followup.send("previous session archived", ephemeral=True)

    async with running(srv, bot):
        guild = discord.Object(id=srv.guild_id)
        tree.copy_global_to(guild=guild)
        synced = await tree.sync(guild=guild)
        assert sorted(c.name for c in synced) == ["new", "status"]
        iid = await srv.slash_command(srv.guild_id, srv.channel_id, "status", srv.user_id)
        await srv.wait_for(lambda: len(srv.interaction_responses) == 1)
        iid2 = await srv.slash_command(srv.guild_id, srv.channel_id, "new", srv.user_id)
        await srv.wait_for(lambda: len(srv.interaction_responses) == 4)

    assert [(g, sorted(names)) for g, names in srv.command_syncs] == [
        (srv.guild_id, ["new", "status"])
    ]
    assert invoked == [srv.user_id]
    got = [
        (r.interaction_id, r.kind, r.type, r.content, r.ephemeral)
        for r in srv.interaction_responses
    ]
    assert got == [
        (iid, "callback", 4, "idle", False),
        (iid2, "callback", 5, None, False),
        (iid2, "edit_original", None, "new session started", False),
        (iid2, "followup", None, "previous session archived", True),
    ]
    assert [m["content"] for m in srv.messages_in(srv.channel_id)] == [
        "idle",
        "new session started",
    ]


async def test_zombie_connection_is_resumed(srv: FakeDiscord) -> None:
    srv.heartbeat_interval_ms = 100
    async with running(srv, Bot(heartbeat_timeout=0.5)) as bot:
        srv.ack_heartbeats = False
        await asyncio.wait_for(bot.resumed_evt.wait(), WAIT)
        srv.ack_heartbeats = True
        mid = await srv.user_says(srv.channel_id, "still there?", mention_bot=True)
        assert (await bot.next_message()).id == mid
    assert srv.identifies == 1 and srv.resumes >= 1


async def _raw_identify(ws: aiohttp.ClientWebSocketResponse, token: str) -> dict[str, Any]:
    hello = await ws.receive_json(timeout=WAIT)
    assert hello["op"] == 10 and hello["d"]["heartbeat_interval"] == 1000
    await ws.send_json({"op": 2, "d": {"token": token, "intents": 1 << 9, "properties": {}}})
    ready = await ws.receive_json(timeout=WAIT)
    assert (ready["op"], ready["t"], ready["s"]) == (0, "READY", 1)
    guild = await ws.receive_json(timeout=WAIT)
    assert (guild["t"], guild["s"]) == ("GUILD_CREATE", 2)
    return dict(ready["d"])


async def test_raw_gateway_close_codes_and_resume(srv: FakeDiscord) -> None:
    async with aiohttp.ClientSession() as http:
        # A client closing with 1000 ends its session (Discord semantics).
        async with http.ws_connect(srv.gateway_url + "?v=10&encoding=json") as ws:
            await _raw_identify(ws, srv.token)
            await ws.close(code=1000)
        await srv.wait_for(lambda: srv.live_connections == 0)
        assert srv.active_sessions == 0

        # Any other close keeps it: a RESUME replays what was dispatched meanwhile, in order.
        async with http.ws_connect(srv.gateway_url) as ws:
            ready = await _raw_identify(ws, srv.token)
            await ws.send_json({"op": 1, "d": 2})
            assert (await ws.receive_json(timeout=WAIT))["op"] == 11
            await ws.close(code=4000)
        await srv.wait_for(lambda: srv.live_connections == 0)
        m1 = await srv.user_says(srv.channel_id, "one")
        m2 = await srv.user_says(srv.channel_id, "two")
        async with http.ws_connect(ready["resume_gateway_url"]) as ws:
            assert (await ws.receive_json(timeout=WAIT))["op"] == 10
            resume = {"token": srv.token, "session_id": ready["session_id"], "seq": 2}
            await ws.send_json({"op": 6, "d": resume})
            frames = [await ws.receive_json(timeout=WAIT) for _ in range(3)]
            assert [(f["t"], f["s"]) for f in frames] == [
                ("MESSAGE_CREATE", 3),
                ("MESSAGE_CREATE", 4),
                ("RESUMED", 5),
            ]
            assert [f["d"]["id"] for f in frames[:2]] == [str(m1), str(m2)]
            # No MESSAGE_CONTENT intent and no mention: content blanked.
            assert frames[0]["d"]["content"] == ""
            # A second IDENTIFY on an authenticated connection is refused (4005).
            await ws.send_json({"op": 2, "d": {"token": srv.token, "intents": 0}})
            closing = await ws.receive(timeout=WAIT)
            assert closing.type is aiohttp.WSMsgType.CLOSE and closing.data == 4005

        # Bad token on IDENTIFY: 4004; unknown session on RESUME: INVALID_SESSION(false).
        async with http.ws_connect(srv.gateway_url) as ws:
            await ws.receive_json(timeout=WAIT)
            await ws.send_json({"op": 2, "d": {"token": "nope", "intents": 0}})
            closing = await ws.receive(timeout=WAIT)
            assert closing.type is aiohttp.WSMsgType.CLOSE and closing.data == 4004
        async with http.ws_connect(srv.gateway_url) as ws:
            await ws.receive_json(timeout=WAIT)
            await ws.send_json({"op": 6, "d": {"token": srv.token, "session_id": "x", "seq": 1}})
            assert await ws.receive_json(timeout=WAIT) == {"op": 9, "d": False}
    assert (srv.identifies, srv.resumes) == (2, 1)
