"""The floor bot of ``bench_blackbox.py``: python-telegram-bot long polling, one
``AsyncOpenAI`` call and one ``sendMessage`` per message, nothing else (no store, no
progress, no pacing): what any model-backed Telegram bot pays at least.

    python benchmarks/_floor_bot.py TELEGRAM_BASE_URL MODEL_BASE_URL

Prints ``{"ready": true, "pid": N}`` once polling, runs until SIGTERM / SIGINT.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import openai
from telegram import Update
from telegram.ext import Application, ContextTypes, MessageHandler, filters

TOKEN = "123456:BENCH-TOKEN"


async def main(tg_base: str, model_base: str) -> None:
    client = openai.AsyncOpenAI(api_key="bench", base_url=model_base, max_retries=0)

    async def answer(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        msg = update.effective_message
        if msg is None or not msg.text:
            return
        completion = await client.chat.completions.create(
            model="bench-model", messages=[{"role": "user", "content": msg.text}],
            max_tokens=256)
        await msg.reply_text(completion.choices[0].message.content or "")

    app = (Application.builder().token(TOKEN).base_url(tg_base).concurrent_updates(True)
           .connection_pool_size(128).build())
    app.add_handler(MessageHandler(filters.TEXT, answer))
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(poll_interval=0.0, timeout=1)
        print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
        await stop.wait()
        await app.updater.stop()
        await app.stop()
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
