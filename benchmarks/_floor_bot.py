"""The floor bot of ``bench_blackbox.py``: the platform's own SDK, one ``AsyncOpenAI`` call
and one message per mention, nothing else (no store, no progress, no pacing): what any
model-backed bot on that SDK pays at least.

    python benchmarks/_floor_bot.py telegram TELEGRAM_BASE_URL MODEL_BASE_URL
    python benchmarks/_floor_bot.py slack SLACK_BASE_URL MODEL_BASE_URL BOT_TOKEN APP_TOKEN
    python benchmarks/_floor_bot.py discord API_BASE MODEL_BASE_URL GATEWAY_URL BOT_TOKEN

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


async def _until_stopped() -> None:
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    await stop.wait()


async def telegram(client: openai.AsyncOpenAI, base_url: str) -> None:
    from telegram import Update
    from telegram.ext import Application, ContextTypes, MessageHandler, filters

    async def answer(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        msg = update.effective_message
        if msg is not None and msg.text:
            await msg.reply_text(await _ask(client, msg.text))

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


async def slack(client: openai.AsyncOpenAI, base_url: str, bot_token: str,
                app_token: str) -> None:
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_bolt.app.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    app = AsyncApp(client=AsyncWebClient(token=bot_token, base_url=base_url),
                   request_verification_enabled=False)

    @app.event("app_mention")
    async def mention(event: dict[str, Any], say: Any) -> None:
        await say(text=await _ask(client, event.get("text", "")),
                  thread_ts=event.get("thread_ts") or event["ts"])

    @app.event("message")
    async def message(event: dict[str, Any]) -> None:
        return None  # the mention's twin ``message`` event: acknowledged, not answered

    handler = AsyncSocketModeHandler(app, app_token,
                                     web_client=AsyncWebClient(base_url=base_url))
    await handler.connect_async()  # type: ignore[no-untyped-call]
    await _until_stopped()
    await handler.close_async()  # type: ignore[no-untyped-call]


async def discord_bot(client: openai.AsyncOpenAI, api_base: str, gateway_url: str,
                      token: str) -> None:
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
            if message.author != self.user and self.user in message.mentions:
                await message.channel.send(await _ask(client, message.content))

    intents = discord.Intents.default()
    intents.message_content = True
    bot = Floor(intents=intents)
    task = asyncio.create_task(bot.start(token))
    await asyncio.wait_for(ready.wait(), 60)
    await _until_stopped()
    await bot.close()
    await task


async def main(argv: list[str]) -> None:
    platform, base_url, model_url, *tokens = argv
    client = openai.AsyncOpenAI(api_key="bench", base_url=model_url, max_retries=0)
    try:
        if platform == "slack":
            await slack(client, base_url, *tokens)
        elif platform == "discord":
            await discord_bot(client, base_url, *tokens)
        else:
            await telegram(client, base_url)
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
