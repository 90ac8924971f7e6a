"""Fifty Discord channels streaming at once meet no 429: discord.py paces each channel's
message bucket by the headers FakeDiscord sends (its window runs faster here than Discord's
5 s, so that it binds in a short test), and the client keeps the whole bot under the global
limit (``rate_global_per_s``), which discord.py learns of only from a 429. Every thread ends
with the exact answer, once."""

from __future__ import annotations

from pathlib import Path

from _discord_stack import DStack, texts_in

from bots.testing.discord import FakeDiscord
from geode.providers.scripted import ScriptedProvider
from geode.settings import BindingSettings

ANSWER = "Streaming " + "word " * 12 + "done."
CHANNELS = 50


async def test_fifty_streaming_channels_get_no_429_and_exact_answers(home: Path) -> None:
    async with FakeDiscord(token="fake-bot-token", heartbeat_interval_ms=500, channel_limit=5,
                           channel_period_s=2.0, global_per_s=50) as fake:
        channels = [fake.channel_id] + [fake.add_text_channel(fake.guild_id, f"c{i}")
                                        for i in range(CHANNELS - 1)]
        provider = ScriptedProvider([ANSWER], repeat_last=True, stream_piece=6,
                                    stream_every_s=0.08)
        stack = DStack(home=home, fake=fake, provider=provider,
                       bindings=[BindingSettings(platform="discord", channel=str(c),
                                                 allow_users=[str(fake.user_id)])
                                 for c in channels],
                       # the stack's edits go as often as a text delta comes (no interval)
                       options={"stream": True, "progress_after_ms": 0})
        try:
            await stack.start()
            roots = [await fake.user_says(c, f"go {i}", mention_bot=True)
                     for i, c in enumerate(channels)]
            await fake.wait_for(lambda: all(texts_in(fake, r) == [ANSWER] for r in roots),
                                timeout=60)
        finally:
            await stack.stop()
        assert fake.limited == 0
        assert all(texts_in(fake, r) == [ANSWER] for r in roots)
        drafts = [c for _, _, c in fake.edits if c and c.startswith("⏳ Working")]
        assert drafts, "nothing streamed"
