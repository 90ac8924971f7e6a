"""The floor bot of ``bench_blackbox.py``: the platform's own SDK, one ``AsyncOpenAI`` call
and one message per mention, nothing else (no store, no progress, no pacing): what any
model-backed bot on that SDK pays at least.

    python benchmarks/_floor_bot.py [--visible] telegram TELEGRAM_URL MODEL_URL
    python benchmarks/_floor_bot.py [--visible] slack SLACK_URL MODEL_URL BOT_TOKEN APP_TOKEN
    python benchmarks/_floor_bot.py [--visible] discord API_BASE MODEL_URL GATEWAY_URL BOT_TOKEN

``--visible``: the same SDK and model call, but the platform calls a GEODE reply makes, in
its order, still with no store: the 👀 reaction on the mention, (Discord: the mention's
thread,) a "⏳ Working…" message, the answer as that message's edit. What a bot that shows
GEODE's progress pays for those calls alone, so that GEODE's own cost (durability, policy,
the loop) can be told from the cost of what users see.

Telegram: python-telegram-bot long polling, ``reply_text``. Slack: slack-bolt ``AsyncApp`` in
Socket Mode, ``say`` in the mention's thread. Discord: discord.py ``Client`` on the gateway,
``channel.send``. Prints ``{"ready": true, "pid": N}`` once
listening, runs until SIGTERM / SIGINT.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import openai

TOKEN = "123456:BENCH-TOKEN"


async def _ask(client: openai.AsyncOpenAI, text: str) -> str:
    completion = await client.chat.completions.create(
        model="bench-model", messages=[{"role": "user", "content": text}], max_tokens=256)
    return completion.choices[0].message.content or ""


WORKING = "⏳ Working…"


async def _until_stopped() -> None:
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    await stop.wait()


async def telegram(client: openai.AsyncOpenAI, base_url: str, visible: bool) -> None:
    from telegram import Update
    from telegram.ext import Application, ContextTypes, MessageHandler, filters

    async def answer(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        msg = update.effective_message
        if msg is None or not msg.text:
            return
        if not visible:
            await msg.reply_text(await _ask(client, msg.text))
            return
        await msg.set_reaction("👀")
        working = await msg.reply_text(WORKING)
        await working.edit_text(await _ask(client, msg.text))

    app = (Application.builder().token(TOKEN).base_url(base_url).concurrent_updates(True)
           .connection_pool_size(128).build())
    app.add_handler(MessageHandler(filters.TEXT, answer))
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(poll_interval=0.0, timeout=1)
        await _until_stopped()
        await app.updater.stop()
        await app.stop()


async def slack(client: openai.AsyncOpenAI, base_url: str, visible: bool, bot_token: str,
                app_token: str) -> None:
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_bolt.app.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    model = client
    app = AsyncApp(client=AsyncWebClient(token=bot_token, base_url=base_url),
                   request_verification_enabled=False)

    @app.event("app_mention")
    async def mention(event: dict[str, Any], say: Any, client: AsyncWebClient) -> None:
        thread = event.get("thread_ts") or event["ts"]
        if not visible:
            await say(text=await _ask(model, event.get("text", "")), thread_ts=thread)
            return
        await client.reactions_add(channel=event["channel"], timestamp=event["ts"],
                                   name="eyes")
        working = await say(text=WORKING, thread_ts=thread)
        await client.chat_update(channel=event["channel"], ts=working["ts"],
                                 text=await _ask(model, event.get("text", "")))

    @app.event("message")
    async def message(event: dict[str, Any]) -> None:
        return None  # the mention's twin ``message`` event: acknowledged, not answered

    handler = AsyncSocketModeHandler(app, app_token,
                                     web_client=AsyncWebClient(base_url=base_url))
    await handler.connect_async()  # type: ignore[no-untyped-call]
    await _until_stopped()
    await handler.close_async()  # type: ignore[no-untyped-call]


async def discord_bot(client: openai.AsyncOpenAI, api_base: str, visible: bool,
                      gateway_url: str, token: str) -> None:
    import discord
    import discord.gateway
    import discord.http
    import yarl

    # this process talks to the fake only
    discord.http.Route.BASE = api_base
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)
    ready = asyncio.Event()

    class Floor(discord.Client):
        async def on_ready(self) -> None:
            ready.set()

        async def on_message(self, message: discord.Message) -> None:
            if message.author == self.user or self.user not in message.mentions:
                return
            if not visible:
                await message.channel.send(await _ask(client, message.content))
                return
            await message.add_reaction("👀")
            thread = await message.create_thread(name=message.content[:90] or "thread")
            working = await thread.send(WORKING)
            await working.edit(content=await _ask(client, message.content))

    intents = discord.Intents.default()
    intents.message_content = True
    bot = Floor(intents=intents)
    task = asyncio.create_task(bot.start(token))
    await asyncio.wait_for(ready.wait(), 60)
    await _until_stopped()
    await bot.close()
    await task


async def main(argv: list[str]) -> None:
    visible = "--visible" in argv
    platform, base_url, model_url, *tokens = [a for a in argv if a != "--visible"]
    client = openai.AsyncOpenAI(api_key="bench", base_url=model_url, max_retries=0)
    try:
        if platform == "slack":
            await slack(client, base_url, visible, *tokens)
        elif platform == "discord":
            await discord_bot(client, base_url, visible, *tokens)
        else:
            await telegram(client, base_url, visible)
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
