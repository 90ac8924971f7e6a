"""Channel benchmark: mention -> final-reply latency GEODE adds over each SDK's minimal bot.

Per platform, both sides talk to the same kind of wire-level fake (``geode.testing``) on
loopback, a fresh fake per side:

* **floor**: the SDK's minimal echo bot, answering every mention with one message (what any
  bot on that SDK pays: intake, parsing, one send):
  Telegram: python-telegram-bot ``Application`` (long polling, ``reply_text``);
  Slack Socket Mode / HTTP Events API: slack-bolt ``AsyncApp`` (``say`` in the thread);
  Discord: discord.py ``Client`` (gateway, ``channel.send``);
* **GEODE**: ``Daemon`` + that platform's connector on a SQLite store with the scripted
  model (zero latency): the full path (durable record, binding / sender / mention checks,
  thread session, checkpointed turn, ack reaction, progress message, outbox, final edit).

For each thread count N (default 1, 10, 50) the fake receives N mentions at once, each
starting a new thread, ``--rounds`` times; a message's latency is from the push to its
final reply being visible in the fake. Prints one table: p50 / p99 per side, what GEODE
adds, the p50 ratio, and CPU per message of the whole process (bot + fake: both sides run
in this one process, so at 50 threads the latency is mostly CPU). Targets (issue 6): added
p50 <= 20 ms, p99 <= 100 ms at 50 threads. Not a test.

Lanes: the GEODE side runs with ``[lanes] global_cap = channel_cap = 128`` and
``max_concurrent_threads = 128`` so that the lanes are not what is measured (the
defaults, 8 / 6, would queue a 50-message burst by design).

Run: ``python benchmarks/bench_channels.py [--rounds 5] [--threads 1 10 50]
[--platforms telegram slack-socket slack-http discord] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Measure the checkout this file lives in, not whatever copy is installed.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("PTB_TIMEDELTA", "1")

from geode.daemon import Daemon
from geode.logging import configure_logging
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider
from geode.settings import BindingSettings, load_settings

ANSWER = "answer to: "
LANES = {"global_cap": 128, "channel_cap": 128}
#: layer options shared by every GEODE side (progress edits unthrottled, no typing repeat)
LAYER = {"progress_edit_interval_s": 0.0, "typing_interval_s": 30.0, "pump_interval_s": 0.2,
         "max_concurrent_threads": 128}


def _answer(request: ModelRequest) -> str:
    for m in reversed(request.messages):
        if m.role == "user" and m.text and "(id " in m.text:
            return f"{ANSWER}{m.text.rsplit('): ', 1)[-1]}"
    return f"{ANSWER}?"


def _daemon(home: Path, binding: BindingSettings) -> Daemon:
    settings, secrets = load_settings(
        env={"GEODE_HOME": str(home)}, health_port=0, bindings=[binding],
        store={"url": f"sqlite:///{home / 'geode.db'}"}, lanes=LANES,
    )
    return Daemon(settings=settings, secrets=secrets,
                  provider_factory=lambda: ScriptedProvider([_answer], repeat_last=True),
                  workspace=home / "ws", drain_timeout_s=1.0)


@contextlib.asynccontextmanager
async def _serving(daemon: Daemon) -> AsyncIterator[None]:
    await daemon.start()
    try:
        yield
    finally:
        await daemon.shutdown()


def _strip_mention(text: str) -> str:
    """The pushed tag: the text after the leading mention (any platform's syntax)."""
    return text.split(" ", 1)[1] if " " in text else text


# -- platforms -----------------------------------------------------------------------------------


@dataclass
class Platform:
    """How to run one platform's fake, floor bot and GEODE connector."""

    name: str
    #: the fake server (an async context manager)
    fake: Callable[[], Any]
    #: the floor bot against a fake, while the context is open
    floor: Callable[[Any], contextlib.AbstractAsyncContextManager[None]]
    #: GEODE against a fake, with its store under a home directory
    geode: Callable[[Any, Path], contextlib.AbstractAsyncContextManager[None]]
    #: push mentions carrying these tags, all at once
    push: Callable[[Any, list[str]], Any]
    #: append-only lists of what the bot wrote, each with a getter for the text
    written: Callable[[Any], list[tuple[list[Any], Callable[[Any], str | None]]]]
    #: wait until a predicate holds (the fake's own change notification)
    wait: Callable[[Any, Callable[[], bool]], Any] = field(
        default=lambda fake, pred: fake.wait_until(pred, within=60))


# Telegram: python-telegram-bot on both sides -----------------------------------------------------

TG_TOKEN = "123456:BENCH-TOKEN"
TG_CHAT = -100123
TG_USER = 42


def _tg_fake() -> Any:
    from geode.testing.fake_telegram import FakeTelegramServer

    return FakeTelegramServer(token=TG_TOKEN, bot_username="geode_bot")


@contextlib.asynccontextmanager
async def _tg_floor(fake: Any) -> AsyncIterator[None]:
    from telegram import Update
    from telegram.ext import Application, ContextTypes, MessageHandler, filters

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        msg = update.effective_message
        if msg is not None and msg.text:
            await msg.reply_text(ANSWER + _strip_mention(msg.text))

    app = (Application.builder().token(TG_TOKEN).base_url(fake.base_url)
           .concurrent_updates(True).connection_pool_size(128).build())
    app.add_handler(MessageHandler(filters.TEXT, echo))
    await app.initialize()
    await app.start()
    assert app.updater is not None
    await app.updater.start_polling(poll_interval=0.0, timeout=1)
    try:
        yield
    finally:
        await app.updater.stop()
        await app.stop()
        await app.shutdown()


@contextlib.asynccontextmanager
async def _tg_geode(fake: Any, home: Path) -> AsyncIterator[None]:
    from bots.telegram import TelegramConnector, TelegramOptions

    binding = BindingSettings(platform="telegram", channel=str(TG_CHAT),
                              allow_users=[str(TG_USER)])
    daemon = _daemon(home, binding)
    opts = TelegramOptions.model_validate({
        "base_url": fake.base_url, "base_file_url": fake.base_file_url, "poll_timeout_s": 1,
        "rate_overall_per_s": 0, "rate_group_per_min": 0, **LAYER})
    daemon.add_connector(TelegramConnector(host=daemon, token=TG_TOKEN, bindings=[binding],
                                           options=opts))
    async with _serving(daemon):
        yield


async def _tg_push(fake: Any, tags: list[str]) -> None:
    for t in tags:
        fake.user_says(TG_CHAT, f"@geode_bot {t}", from_user=TG_USER)


TELEGRAM = Platform(
    name="telegram", fake=_tg_fake, floor=_tg_floor, geode=_tg_geode, push=_tg_push,
    written=lambda fake: [(fake.sent, lambda s: s.plain_text)],
)

# Slack: slack-bolt AsyncApp on both sides (Socket Mode, or the signed HTTP Events API) -----------

SLACK_CHANNEL = "C0GEODE"
SLACK_USER = "U0ALICE"


def _slack_fake() -> Any:
    from geode.testing.fake_slack import FakeSlack

    return FakeSlack()


def _slack_echo_app(fake: Any, *, http: bool) -> Any:
    from slack_bolt.app.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    app = AsyncApp(client=AsyncWebClient(token=fake.bot_token, base_url=fake.base_url),
                   signing_secret=fake.signing_secret, request_verification_enabled=http)

    @app.event("app_mention")
    async def mention(event: dict[str, Any], say: Any) -> None:
        await say(text=ANSWER + _strip_mention(event.get("text", "")),
                  thread_ts=event.get("thread_ts") or event["ts"])

    @app.event("message")
    async def message(event: dict[str, Any]) -> None:
        return None  # the mention's twin ``message`` event: acknowledged, not answered

    return app


@contextlib.asynccontextmanager
async def _slack_floor_socket(fake: Any) -> AsyncIterator[None]:
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_sdk.web.async_client import AsyncWebClient

    app = _slack_echo_app(fake, http=False)
    handler = AsyncSocketModeHandler(app, fake.app_token,
                                     web_client=AsyncWebClient(base_url=fake.base_url))
    await handler.connect_async()  # type: ignore[no-untyped-call]
    await fake.wait_until(lambda: fake.connected > 0, within=10)
    try:
        yield
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]


@contextlib.asynccontextmanager
async def _slack_floor_http(fake: Any) -> AsyncIterator[None]:
    from aiohttp import web
    from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request

    app = _slack_echo_app(fake, http=True)

    async def events(request: web.Request) -> web.Response:
        return await to_aiohttp_response(await app.async_dispatch(await to_bolt_request(request)))

    web_app = web.Application()
    web_app.router.add_post("/slack/events", events)
    runner = web.AppRunner(web_app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    fake.events_url = f"http://127.0.0.1:{port}/slack/events"
    try:
        yield
    finally:
        await runner.cleanup()


def _slack_geode(mode: str) -> Callable[[Any, Path], contextlib.AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def run(fake: Any, home: Path) -> AsyncIterator[None]:
        from bots.slack import SlackConnector, SlackOptions

        binding = BindingSettings(platform="slack", channel=SLACK_CHANNEL,
                                  allow_users=[SLACK_USER])
        daemon = _daemon(home, binding)
        opts = SlackOptions.model_validate({"base_url": fake.base_url, "mode": mode,
                                            "http_port": 0, **LAYER})
        connector = SlackConnector(
            host=daemon, bot_token=fake.bot_token,
            app_token=fake.app_token if mode == "socket" else None,
            signing_secret=fake.signing_secret, bindings=[binding], options=opts,
        )
        daemon.add_connector(connector)
        async with _serving(daemon):
            if mode == "http":
                fake.events_url = connector.events_url
            else:
                await fake.wait_until(lambda: fake.connected > 0, within=10)
            yield

    return run


async def _slack_push(fake: Any, tags: list[str]) -> None:
    await asyncio.gather(*(fake.user_posts(SLACK_CHANNEL, f"<@{fake.bot_user_id}> {t}",
                                           user=SLACK_USER) for t in tags))


def _slack_written(fake: Any) -> list[tuple[list[Any], Callable[[Any], str | None]]]:
    return [(fake.posts, lambda p: None if p.method == "chat.delete" else p.text)]


SLACK_SOCKET = Platform(name="slack-socket", fake=_slack_fake, floor=_slack_floor_socket,
                        geode=_slack_geode("socket"), push=_slack_push,
                        written=_slack_written)
SLACK_HTTP = Platform(name="slack-http", fake=_slack_fake, floor=_slack_floor_http,
                      geode=_slack_geode("http"), push=_slack_push, written=_slack_written)

# Discord: discord.py on both sides ---------------------------------------------------------------

DC_TOKEN = "bench-bot-token"


def _dc_fake() -> Any:
    from geode.testing.fake_discord import FakeDiscord

    return FakeDiscord(token=DC_TOKEN, heartbeat_interval_ms=5000)


@contextlib.asynccontextmanager
async def _dc_floor(fake: Any) -> AsyncIterator[None]:
    import discord

    ready = asyncio.Event()

    class Echo(discord.Client):
        async def before_identify_hook(self, shard_id: int | None, *,
                                       initial: bool = False) -> None:
            return None  # the fake has no identify rate limit

        async def on_ready(self) -> None:
            ready.set()

        async def on_message(self, message: discord.Message) -> None:
            if message.author != self.user and self.user in message.mentions:
                await message.channel.send(ANSWER + _strip_mention(message.content))

    intents = discord.Intents.default()
    intents.message_content = True
    with fake.patch_discord():
        client = Echo(intents=intents, guild_ready_timeout=0.05)
        task = asyncio.create_task(client.start(DC_TOKEN))
        try:
            await asyncio.wait_for(ready.wait(), 30)
            yield
        finally:
            await client.close()
            await asyncio.wait_for(task, 10)


@contextlib.asynccontextmanager
async def _dc_geode(fake: Any, home: Path) -> AsyncIterator[None]:
    from bots.discord import DiscordConnector, DiscordOptions

    binding = BindingSettings(platform="discord", channel=str(fake.channel_id),
                              allow_users=[str(fake.user_id)])
    daemon = _daemon(home, binding)
    opts = DiscordOptions.model_validate({
        "api_base": fake.api_base, "gateway_url": fake.gateway_url,
        "guild_ready_timeout_s": 0.05, "identify_delay_s": 0.0, **LAYER})
    c = DiscordConnector(host=daemon, token=DC_TOKEN, bindings=[binding], options=opts)
    daemon.add_connector(c)
    async with _serving(daemon):
        # Mentions sent before the gateway session and the first catch-up are not the
        # connector's to answer (its history cursor starts at "now"): wait for both.
        await fake.wait_for(lambda: c.catch_ups > 1 and not c.standby and c.layer is not None
                            and c.layer.processing, timeout=30)
        yield


async def _dc_push(fake: Any, tags: list[str]) -> None:
    await asyncio.gather(*(fake.user_says(fake.channel_id, t, mention_bot=True) for t in tags))


DISCORD = Platform(
    name="discord", fake=_dc_fake, floor=_dc_floor, geode=_dc_geode, push=_dc_push,
    written=lambda fake: [(fake.sent, lambda s: s.content), (fake.edits, lambda e: e[2])],
    wait=lambda fake, pred: fake.wait_for(pred, timeout=60),
)

PLATFORMS = {p.name: p for p in (TELEGRAM, SLACK_SOCKET, SLACK_HTTP, DISCORD)}

# -- measuring -----------------------------------------------------------------------------------


class _Answers:
    """Answers visible in the fake, indexed incrementally (scanning everything per check
    would make the measuring itself O(n^2) and inflate both sides)."""

    def __init__(self, sources: list[tuple[list[Any], Callable[[Any], str | None]]]) -> None:
        self.sources = sources
        self.seen: dict[str, float] = {}
        self._read = [0] * len(sources)

    def scan(self) -> None:
        now = time.perf_counter()
        for i, (items, text_of) in enumerate(self.sources):
            for item in items[self._read[i]:]:
                text = text_of(item)
                if text and text.startswith(ANSWER):
                    self.seen.setdefault(text[len(ANSWER):].strip(), now)
            self._read[i] = len(items)


@dataclass
class Level:
    samples: list[float] = field(default_factory=list)
    cpu_per_msg: list[float] = field(default_factory=list)


async def _measure(p: Platform, fake: Any, answers: _Answers, n: int, tag: str,
                   level: Level | None) -> None:
    """Push n mentions at once; seconds from the push to each visible answer."""
    tags = [f"{tag}-{i}" for i in range(n)]
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await p.push(fake, tags)

    def all_done() -> bool:
        answers.scan()
        return all(t in answers.seen for t in tags)

    await p.wait(fake, all_done)
    if level is not None:
        level.samples += [answers.seen[t] - t0 for t in tags]
        level.cpu_per_msg.append((time.process_time() - cpu0) / n)


async def _side(p: Platform, side: str, levels: list[int], rounds: int, home: Path
                ) -> dict[int, Level]:
    out: dict[int, Level] = {}
    async with p.fake() as fake:
        runner = p.floor(fake) if side == "floor" else p.geode(fake, home)
        async with runner:
            answers = _Answers(p.written(fake))
            # connections, first turn, the SDKs' lazy imports
            await _measure(p, fake, answers, 2, f"{side}-warm", None)
            for n in levels:
                out[n] = Level()
                for r in range(rounds):
                    await _measure(p, fake, answers, n, f"{side}-{n}-{r}", out[n])
    return out


def _pct(samples: Sequence[float], q: float) -> float:
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


async def _run(platforms: list[str], levels: list[int], rounds: int) -> None:
    configure_logging(level="ERROR")
    results: dict[str, tuple[dict[int, Level], dict[int, Level]]] = {}
    for name in platforms:
        p = PLATFORMS[name]
        home = Path(tempfile.mkdtemp(prefix="bench-ch-"))
        try:
            floor = await _side(p, "floor", levels, rounds, home)
            geode = await _side(p, "geode", levels, rounds, home)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        results[name] = (floor, geode)
        print(f"  {name}: done", file=sys.stderr, flush=True)
    _print(results, levels, rounds)


def _print(results: dict[str, tuple[dict[int, Level], dict[int, Level]]], levels: list[int],
           rounds: int) -> None:
    print(f"mention -> final reply, ms ({rounds} round(s) per level; added = GEODE - floor; "
          f"cpu = process CPU ms per message, bot + fake)")
    print(f"GEODE lanes: global_cap = channel_cap = {LANES['global_cap']}, "
          f"max_concurrent_threads = {LAYER['max_concurrent_threads']} (lanes are not the "
          "bottleneck here; the defaults are 8 / 6)")
    head = (f"{'platform':<12} {'thr':>3} | {'floor p50':>9} {'p99':>7} {'cpu':>5} | "
            f"{'GEODE p50':>9} {'p99':>7} {'cpu':>5} | {'added p50':>9} {'p99':>7} | "
            f"{'ratio p50':>9}")
    print(head)
    print("-" * len(head))
    verdicts: list[str] = []
    for name, (floor, geode) in results.items():
        for n in levels:
            f, g = floor[n], geode[n]
            f50, f99 = _pct(f.samples, 50) * 1e3, _pct(f.samples, 99) * 1e3
            g50, g99 = _pct(g.samples, 50) * 1e3, _pct(g.samples, 99) * 1e3
            fc = statistics.mean(f.cpu_per_msg) * 1e3
            gc = statistics.mean(g.cpu_per_msg) * 1e3
            print(f"{name:<12} {n:>3} | {f50:>9.1f} {f99:>7.1f} {fc:>5.1f} | "
                  f"{g50:>9.1f} {g99:>7.1f} {gc:>5.1f} | {g50 - f50:>9.1f} {g99 - f99:>7.1f} | "
                  f"{g50 / f50 if f50 else 0:>8.2f}x")
            if n == 50:
                ok = g50 - f50 <= 20 and g99 - f99 <= 100
                verdicts.append(f"{name}: {'met' if ok else 'NOT met'}")
    if verdicts:
        print("targets at 50 threads (added p50 <= 20 ms, p99 <= 100 ms): "
              + "; ".join(verdicts))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 10, 50])
    ap.add_argument("--platforms", nargs="+", choices=sorted(PLATFORMS),
                    default=list(PLATFORMS))
    ap.add_argument("--quick", action="store_true",
                    help="a short run: 1 round of 1 and 10 threads (unless given)")
    args = ap.parse_args()
    rounds, threads = args.rounds, args.threads
    if args.quick:
        rounds = 1
        if "--threads" not in sys.argv:
            threads = [1, 10]
    asyncio.run(_run(args.platforms, threads, rounds))


if __name__ == "__main__":
    main()
