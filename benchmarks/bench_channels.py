"""Channel benchmark: mention -> final-reply latency GEODE adds over a minimal PTB bot.

Both bots talk to the same wire-level fake Telegram Bot API (``geode.testing``) on
loopback, with long polling:

* **floor**: a minimal python-telegram-bot ``Application`` that answers every message with
  ``reply_text`` (what any PTB bot pays: polling, parsing, one ``sendMessage``);
* **GEODE**: ``Daemon`` + ``TelegramConnector`` on a SQLite store with the scripted model
  (zero latency): the full path (durable record, binding / sender / mention checks, thread
  session, checkpointed turn, ack reaction, progress message, outbox, final edit).

For ``--threads`` N (default 1, 10, 50) the fake receives N mentions at once, each in a new
thread, ``--rounds`` times; a message's latency is from its arrival in the fake to the
final reply being visible there. Prints p50 / p99 per side and what GEODE adds (targets:
p50 <= 20 ms, p99 <= 100 ms added at 50 threads). Not a test.

Run: ``python benchmarks/bench_channels.py [--rounds 5] [--threads 1 10 50]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PTB_TIMEDELTA", "1")

from telegram import Update
from telegram.ext import Application, ContextTypes, MessageHandler, filters

from bots.telegram import TelegramConnector, TelegramOptions
from geode.daemon import Daemon
from geode.logging import configure_logging
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider
from geode.settings import BindingSettings, load_settings
from geode.testing.fake_telegram import FakeTelegramServer

TOKEN = "123456:BENCH-TOKEN"
CHAT = -100123
USER = 42


def _answer(request: ModelRequest) -> str:
    for m in reversed(request.messages):
        if m.role == "user" and m.text and "(id " in m.text:
            return f"answer to: {m.text.rsplit('): ', 1)[-1]}"
    return "answer to: ?"


class _Answers:
    """Answers visible in the fake, indexed incrementally (scanning ``sent`` per check
    would make the measuring itself O(n^2) and inflate both sides)."""

    def __init__(self, fake: FakeTelegramServer) -> None:
        self.fake = fake
        self.seen: dict[str, float] = {}
        self._read = 0

    def scan(self) -> None:
        now = time.perf_counter()
        sent = self.fake.sent
        for s in sent[self._read:]:
            if s.plain_text.startswith("answer to: "):
                self.seen.setdefault(s.plain_text[len("answer to: "):], now)
        self._read = len(sent)


async def _measure(fake: FakeTelegramServer, answers: _Answers, n: int, tag: str) -> list[float]:
    """Push n mentions at once; seconds from the push to each visible answer."""
    texts = [f"{tag}-{i}" for i in range(n)]
    t0 = time.perf_counter()
    for t in texts:
        fake.user_says(CHAT, f"@geode_bot {t}", from_user=USER)

    def all_done() -> bool:
        answers.scan()
        return all(t in answers.seen for t in texts)

    await fake.wait_until(all_done, within=60)
    return [answers.seen[t] - t0 for t in texts]


async def _floor(fake: FakeTelegramServer, levels: list[int], rounds: int
                 ) -> dict[int, list[float]]:
    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        msg = update.effective_message
        if msg is not None and msg.text:
            await msg.reply_text("answer to: " + msg.text.replace("@geode_bot ", ""))

    app = (Application.builder().token(TOKEN).base_url(fake.base_url)
           .concurrent_updates(True).connection_pool_size(128).build())
    app.add_handler(MessageHandler(filters.TEXT, echo))
    await app.initialize()
    await app.start()
    assert app.updater is not None
    await app.updater.start_polling(poll_interval=0.0, timeout=1)
    try:
        return await _levels(fake, levels, rounds, "floor")
    finally:
        await app.updater.stop()
        await app.stop()
        await app.shutdown()


async def _geode(fake: FakeTelegramServer, levels: list[int], rounds: int, home: Path
                 ) -> dict[int, list[float]]:
    settings, secrets = load_settings(
        env={"GEODE_HOME": str(home)}, health_port=0,
        bindings=[BindingSettings(platform="telegram", channel=str(CHAT), allow_users=[str(USER)])],
        store={"url": f"sqlite:///{home / 'geode.db'}"},
        lanes={"global_cap": 128, "channel_cap": 128},
    )
    daemon = Daemon(settings=settings, secrets=secrets,
                    provider_factory=lambda: ScriptedProvider([_answer], repeat_last=True),
                    workspace=home / "ws", drain_timeout_s=1.0)
    opts = TelegramOptions(base_url=fake.base_url, base_file_url=fake.base_file_url,
                           poll_timeout_s=1, progress_edit_interval_s=0.0, typing_interval_s=30,
                           pump_interval_s=0.2, rate_overall_per_s=0, rate_group_per_min=0,
                           max_concurrent_threads=128)
    daemon.add_connector(TelegramConnector(host=daemon, token=TOKEN, bindings=settings.bindings,
                                           options=opts))
    await daemon.start()
    try:
        return await _levels(fake, levels, rounds, "geode")
    finally:
        await daemon.shutdown()


async def _levels(fake: FakeTelegramServer, levels: list[int], rounds: int, side: str
                  ) -> dict[int, list[float]]:
    answers = _Answers(fake)
    await _measure(fake, answers, 1, f"{side}-warm")  # connections, first turn
    out: dict[int, list[float]] = {}
    for n in levels:
        samples: list[float] = []
        for r in range(rounds):
            samples += await _measure(fake, answers, n, f"{side}-{n}-{r}")
        out[n] = samples
    return out


def _pct(samples: list[float], q: float) -> float:
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


async def _run(levels: list[int], rounds: int) -> None:
    configure_logging(level="ERROR")
    home = Path(tempfile.mkdtemp(prefix="bench-ch-"))
    try:
        async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as fake:
            floor = await _floor(fake, levels, rounds)
        async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as fake:
            geode = await _geode(fake, levels, rounds, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(f"mention -> final reply, ms ({rounds} rounds per level; added = GEODE - floor)")
    print(f"{'threads':>7} | {'floor p50':>9} {'p99':>7} | {'GEODE p50':>9} {'p99':>7} | "
          f"{'added p50':>9} {'p99':>7} | {'ratio p50':>9}")
    for n in levels:
        f50, f99 = _pct(floor[n], 50) * 1e3, _pct(floor[n], 99) * 1e3
        g50, g99 = _pct(geode[n], 50) * 1e3, _pct(geode[n], 99) * 1e3
        print(f"{n:>7} | {f50:>9.1f} {f99:>7.1f} | {g50:>9.1f} {g99:>7.1f} | "
              f"{g50 - f50:>9.1f} {g99 - f99:>7.1f} | {g50 / f50 if f50 else 0:>8.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 10, 50])
    args = ap.parse_args()
    asyncio.run(_run(args.threads, args.rounds))



if __name__ == "__main__":
    main()
