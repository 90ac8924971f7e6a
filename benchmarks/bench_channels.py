"""Channel benchmark: mention -> final-reply latency GEODE adds over each SDK's minimal bot.

Per platform, both sides talk to the same kind of wire-level fake (``geode.testing``) on
loopback, a fresh fake per side, **each fake in its own process** (``_fake_proc.py``): in
production the platform is a remote server, and a fake in the bot's process would bill its
HTTP server and JSON to the bot, four times as much to GEODE (~4 platform calls per reply)
as to the floor (1). ``--in-process`` runs the fakes in this process instead, as this
benchmark used to, to show that distortion.

* **floor**: the SDK's minimal echo bot, answering every mention with one message (what any
  bot on that SDK pays: intake, parsing, one send):
  Telegram: python-telegram-bot ``Application`` (long polling, ``reply_text``);
  Slack Socket Mode / HTTP Events API: slack-bolt ``AsyncApp`` (``say`` in the thread);
  Discord: discord.py ``Client`` (gateway, ``channel.send``);
* **GEODE**: ``Daemon`` + that platform's connector on a SQLite store with the scripted
  model (zero latency): the full path (durable record, binding / sender / mention checks,
  thread session, checkpointed turn, ack reaction, progress message, outbox, final edit).
* **calls** (Telegram): a PTB bot on GEODE's transport (``AiohttpRequest``) making exactly
  the platform calls of a GEODE reply (👀 reaction alongside the progress message, then the
  answer as its edit) and nothing else: no store, no model. A second table prints it and
  what GEODE takes beyond it, i.e. what the durable path (records, turn, layer) costs apart
  from the reply's visible steps.

For each thread count N (default 1, 10, 50) the fake receives N mentions at once, each
starting a new thread, ``--rounds`` times, after a warm-up of 2. A message's latency is from
the push to its final reply being visible in the fake, both instants read by the fake's
process (see ``_fake_proc.py``). Prints one table: p50 / p99 per side, what GEODE adds, the
p50 ratio, and CPU ms per message of the bot's process ("cpu": this process, which now runs
only the bot) and of the fake's process ("fake"). Targets (issue 6): added p50 <= 20 ms,
p99 <= 100 ms at 50 threads. Not a test.

The GEODE side settles its heap once started, as ``geode serve`` does (``Daemon(settle_heap=
True)``: startup's objects frozen out of the cyclic GC); ``GEODE_BENCH_SETTLE=0`` measures
without it.

Lanes: the GEODE side runs with ``[lanes] global_cap = channel_cap = 128`` and
``max_concurrent_threads = 128`` so that the lanes are not what is measured (the
defaults, 8 / 6, would queue a 50-message burst by design).

``--load N`` (issue 6: N = 1,000 with ``--model-latency 2.0``) adds, after the table, a
GEODE-only run per platform: N mentions at once, each a new thread, the scripted model
sleeping ``--model-latency`` s per response, lanes and ``max_concurrent_threads`` raised to
N, so that all N turns are in flight together. It reports how many were answered, the time
until the last answer, and the bot process's peak RSS (``VmHWM``) against the target
(all answered, <= 300 MB, MB = 2**20 bytes). Each load run is a fresh Python process, so
its peak RSS is that bot's alone (no earlier run, no fake). ``--load-only`` skips the table.

Run: ``python benchmarks/bench_channels.py [--rounds 5] [--threads 1 10 50]
[--platforms telegram slack-socket slack-http discord] [--quick] [--in-process]
[--load 1000 --model-latency 2.0 [--load-only]]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

# Measure the checkout this file lives in, not whatever copy is installed.
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("PTB_TIMEDELTA", "1")

import _fake_proc  # found through the sys.path lines above

from geode.daemon import Daemon
from geode.logging import configure_logging
from geode.messages import ModelResponse
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider
from geode.settings import BindingSettings, load_settings

_HERE = Path(__file__).resolve().parent
ANSWER = _fake_proc.ANSWER
#: lane caps and max_concurrent_threads of the GEODE side (a load run raises them to its N)
CONCURRENCY = 128
#: layer options shared by every GEODE side (progress edits unthrottled, no typing repeat)
LAYER = {"progress_edit_interval_s": 0.0, "typing_interval_s": 30.0, "pump_interval_s": 0.2}
ROUND_WITHIN_S = 60.0
#: a load run reports what was answered by then (a healthy run needs a fraction of it)
LOAD_WITHIN_S = 300.0
RSS_TARGET_MB = 300.0


class _Gauge:
    """Model calls in flight, and the most at once (are the turns really concurrent?)."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0


class _GaugedProvider(ScriptedProvider):
    def __init__(self, *args: Any, gauge: _Gauge, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gauge = gauge

    async def complete(self, request: ModelRequest) -> ModelResponse:
        g = self.gauge
        g.now += 1
        g.peak = max(g.peak, g.now)
        try:
            return await super().complete(request)
        finally:
            g.now -= 1


@dataclass(frozen=True, kw_only=True)
class Tuning:
    """What the GEODE side is configured with: its concurrency caps and the model's sleep."""

    concurrency: int = CONCURRENCY
    model_latency: float = 0.0
    gauge: _Gauge = field(default_factory=_Gauge, compare=False)

    @property
    def lanes(self) -> dict[str, int]:
        return {"global_cap": self.concurrency, "channel_cap": self.concurrency}

    @property
    def layer(self) -> dict[str, Any]:
        return {**LAYER, "max_concurrent_threads": self.concurrency}


def _answer(request: ModelRequest) -> str:
    for m in reversed(request.messages):
        if m.role == "user" and m.text and "(id " in m.text:
            return f"{ANSWER}{m.text.rsplit('): ', 1)[-1]}"
    return f"{ANSWER}?"


def _daemon(home: Path, binding: BindingSettings, tuning: Tuning) -> Daemon:
    settings, secrets = load_settings(
        env={"GEODE_HOME": str(home)}, health_port=0, bindings=[binding],
        store={"url": f"sqlite:///{home / 'geode.db'}"}, lanes=tuning.lanes,
    )
    return Daemon(settings=settings, secrets=secrets,
                  provider_factory=lambda: _GaugedProvider(
                      [_answer], repeat_last=True, latency=tuning.model_latency,
                      gauge=tuning.gauge),
                  workspace=home / "ws", drain_timeout_s=1.0,
                  settle_heap=os.environ.get("GEODE_BENCH_SETTLE", "1") == "1")


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


async def _poll(predicate: Callable[[], bool], *, within: float) -> None:
    """Wait for bot-side state (the fake's notifications are in another process)."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - connector state has no change event
            await asyncio.sleep(0.02)


# -- fakes: in their own process, or in this one ---------------------------------------------------


class Fake(Protocol):
    """A started fake as the benchmark sees it (requests: ``_fake_proc``'s docstring)."""

    #: what a bot needs to reach the fake (``base_url`` ...)
    info: dict[str, Any]
    #: the fake's process when it has its own, else None
    pid: int | None

    async def call(self, op: str, **args: Any) -> dict[str, Any]: ...


class _RemoteFake:
    def __init__(self, proc: asyncio.subprocess.Process, ready: dict[str, Any]) -> None:
        self.proc = proc
        self.info: dict[str, Any] = ready["ready"]
        self.pid: int | None = int(ready["pid"])

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
        await self.proc.stdin.drain()
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"fake process exited (code {await self.proc.wait()})")
        return _checked(op, json.loads(line))


class _LocalFake:
    def __init__(self, control: _fake_proc.FakeControl, info: dict[str, Any]) -> None:
        self.control = control
        self.info = info
        self.pid: int | None = None

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        return _checked(op, await self.control.handle({"op": op, **args}))


def _checked(op: str, reply: dict[str, Any]) -> dict[str, Any]:
    if "error" in reply:
        raise RuntimeError(f"fake: {op}: {reply['error']}")
    return reply


@contextlib.asynccontextmanager
async def _started_fake(kind: str, config: dict[str, Any], *, in_process: bool
                        ) -> AsyncIterator[Fake]:
    """A fresh fake of ``kind`` (a ``_fake_proc.DRIVERS`` key), stopped on exit."""
    if in_process:
        driver = _fake_proc.DRIVERS[kind]
        async with driver.make(config) as fake:
            yield _LocalFake(_fake_proc.FakeControl(driver, fake), driver.info(fake))
        return
    # Its own session: a ctrl-C in the terminal reaches only us, and we stop it in order.
    # If we die regardless, it sees the end of its stdin and exits.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(_HERE / "_fake_proc.py"), kind, json.dumps(config),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        start_new_session=True, limit=1 << 24)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if not line:
            raise RuntimeError(f"fake process for {kind} exited (code {await proc.wait()})")
        yield _RemoteFake(proc, json.loads(line))
    finally:
        await _stop_process(proc, quit_line=b'{"op": "quit"}\n')


async def _stop_process(proc: asyncio.subprocess.Process, *, quit_line: bytes | None = None,
                        grace: float = 10.0) -> None:
    """Ask a child to end (a quit request, else SIGINT), then kill it if it does not."""
    if proc.returncode is not None:
        return
    cancelled = False
    try:
        if quit_line is not None and proc.stdin is not None:
            with contextlib.suppress(ConnectionError):
                proc.stdin.write(quit_line)
                await proc.stdin.drain()
                proc.stdin.close()
        else:
            proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), grace)
    except TimeoutError:
        pass
    except asyncio.CancelledError:
        cancelled = True
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
    if cancelled:
        raise asyncio.CancelledError


# -- platforms -----------------------------------------------------------------------------------

Runner = contextlib.AbstractAsyncContextManager[None]


@dataclass(frozen=True, kw_only=True)
class Platform:
    """How to run one platform's fake, floor bot and GEODE connector."""

    name: str
    #: which fake (a ``_fake_proc.DRIVERS`` key) and what it is started with
    fake: str
    fake_config: dict[str, Any] = field(default_factory=dict)
    #: the floor bot against a fake, while the context is open
    floor: Callable[[Fake], Runner]
    #: GEODE against a fake, with its store under a home directory
    geode: Callable[[Fake, Path, Tuning], Runner]
    #: (chat, user) the mentions are pushed into / from
    audience: Callable[[Fake], tuple[Any, Any]]
    #: a bot on the same SDK and transport as GEODE's connector making the platform calls a
    #: GEODE reply makes, and nothing else (no store, no model): what the reply's visible
    #: steps cost on their own, so the table can tell them from GEODE's durable path
    calls: Callable[[Fake], Runner] | None = None


# Telegram: python-telegram-bot on both sides -----------------------------------------------------

TG_TOKEN = "123456:BENCH-TOKEN"
TG_CHAT = -100123
TG_USER = 42


@contextlib.asynccontextmanager
async def _tg_floor(fake: Fake) -> AsyncIterator[None]:
    from telegram import Update
    from telegram.ext import Application, ContextTypes, MessageHandler, filters

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        msg = update.effective_message
        if msg is not None and msg.text:
            await msg.reply_text(ANSWER + _strip_mention(msg.text))

    app = (Application.builder().token(TG_TOKEN).base_url(fake.info["base_url"])
           .concurrent_updates(True).connection_pool_size(128).build())
    app.add_handler(MessageHandler(filters.TEXT, echo))
    async with _tg_polling(app):
        yield


@contextlib.asynccontextmanager
async def _tg_polling(app: Any) -> AsyncIterator[None]:
    """A PTB ``Application`` long-polling the fake while the context is open."""
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
async def _tg_calls(fake: Fake) -> AsyncIterator[None]:
    """GEODE's three calls per reply on PTB + GEODE's aiohttp transport, nothing else: the
    ack reaction alongside the progress message, then the final answer as its edit."""
    from telegram import ReactionTypeEmoji, Update
    from telegram.ext import Application, ContextTypes, MessageHandler, filters

    from bots.telegram.client import AiohttpRequest

    async def reply(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        msg = update.effective_message
        if msg is None or not msg.text:
            return
        bot = context.bot

        async def progress_then_final() -> None:
            sent = await bot.send_message(msg.chat_id, "⏳ Working…",
                                          reply_to_message_id=msg.message_id)
            await bot.edit_message_text(ANSWER + _strip_mention(msg.text or ""),
                                        chat_id=msg.chat_id, message_id=sent.message_id)

        await asyncio.gather(
            bot.set_message_reaction(msg.chat_id, msg.message_id, [ReactionTypeEmoji("👀")]),
            progress_then_final())

    app = (Application.builder().token(TG_TOKEN).base_url(fake.info["base_url"])
           .concurrent_updates(True)
           .request(AiohttpRequest(connection_pool_size=CONCURRENCY))
           .get_updates_request(AiohttpRequest(connection_pool_size=1)).build())
    app.add_handler(MessageHandler(filters.TEXT, reply))
    async with _tg_polling(app):
        yield


@contextlib.asynccontextmanager
async def _tg_geode(fake: Fake, home: Path, tuning: Tuning) -> AsyncIterator[None]:
    from bots.telegram import TelegramConnector, TelegramOptions

    binding = BindingSettings(platform="telegram", channel=str(TG_CHAT),
                              allow_users=[str(TG_USER)])
    daemon = _daemon(home, binding, tuning)
    opts = TelegramOptions.model_validate({
        "base_url": fake.info["base_url"], "base_file_url": fake.info["base_file_url"],
        "poll_timeout_s": 1, "rate_overall_per_s": 0, "rate_group_per_min": 0,
        **tuning.layer})
    daemon.add_connector(TelegramConnector(host=daemon, token=TG_TOKEN, bindings=[binding],
                                           options=opts))
    async with _serving(daemon):
        yield


TELEGRAM = Platform(
    name="telegram", fake="telegram",
    fake_config={"token": TG_TOKEN, "bot_username": "geode_bot"},
    floor=_tg_floor, geode=_tg_geode, audience=lambda fake: (TG_CHAT, TG_USER),
    calls=_tg_calls,
)

# Slack: slack-bolt AsyncApp on both sides (Socket Mode, or the signed HTTP Events API) -----------

SLACK_CHANNEL = "C0GEODE"
SLACK_USER = "U0ALICE"


def _slack_echo_app(fake: Fake, *, http: bool) -> Any:
    from slack_bolt.app.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    app = AsyncApp(client=AsyncWebClient(token=fake.info["bot_token"],
                                         base_url=fake.info["base_url"]),
                   signing_secret=fake.info["signing_secret"],
                   request_verification_enabled=http)

    @app.event("app_mention")
    async def mention(event: dict[str, Any], say: Any) -> None:
        await say(text=ANSWER + _strip_mention(event.get("text", "")),
                  thread_ts=event.get("thread_ts") or event["ts"])

    @app.event("message")
    async def message(event: dict[str, Any]) -> None:
        return None  # the mention's twin ``message`` event: acknowledged, not answered

    return app


@contextlib.asynccontextmanager
async def _slack_floor_socket(fake: Fake) -> AsyncIterator[None]:
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_sdk.web.async_client import AsyncWebClient

    app = _slack_echo_app(fake, http=False)
    handler = AsyncSocketModeHandler(app, fake.info["app_token"],
                                     web_client=AsyncWebClient(base_url=fake.info["base_url"]))
    await handler.connect_async()  # type: ignore[no-untyped-call]
    await fake.call("wait_connected", within=10)
    try:
        yield
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]


@contextlib.asynccontextmanager
async def _slack_floor_http(fake: Fake) -> AsyncIterator[None]:
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
    await fake.call("set", events_url=f"http://127.0.0.1:{port}/slack/events")
    try:
        yield
    finally:
        await runner.cleanup()


def _slack_geode(mode: str) -> Callable[[Fake, Path, Tuning], Runner]:
    @contextlib.asynccontextmanager
    async def run(fake: Fake, home: Path, tuning: Tuning) -> AsyncIterator[None]:
        from bots.slack import SlackConnector, SlackOptions

        binding = BindingSettings(platform="slack", channel=SLACK_CHANNEL,
                                  allow_users=[SLACK_USER])
        daemon = _daemon(home, binding, tuning)
        opts = SlackOptions.model_validate({"base_url": fake.info["base_url"], "mode": mode,
                                            "http_port": 0, **tuning.layer})
        connector = SlackConnector(
            host=daemon, bot_token=fake.info["bot_token"],
            app_token=fake.info["app_token"] if mode == "socket" else None,
            signing_secret=fake.info["signing_secret"], bindings=[binding], options=opts,
        )
        daemon.add_connector(connector)
        async with _serving(daemon):
            if mode == "http":
                await fake.call("set", events_url=connector.events_url)
            else:
                await fake.call("wait_connected", within=10)
            yield

    return run


SLACK_SOCKET = Platform(name="slack-socket", fake="slack", floor=_slack_floor_socket,
                        geode=_slack_geode("socket"),
                        audience=lambda fake: (SLACK_CHANNEL, SLACK_USER))
SLACK_HTTP = Platform(name="slack-http", fake="slack", floor=_slack_floor_http,
                      geode=_slack_geode("http"),
                      audience=lambda fake: (SLACK_CHANNEL, SLACK_USER))

# Discord: discord.py on both sides ---------------------------------------------------------------

DC_TOKEN = "bench-bot-token"


@contextlib.contextmanager
def _discord_pointed_at(fake: Fake) -> Iterator[None]:
    # What FakeDiscord.patch_discord does, from the URLs alone (the fake may be elsewhere).
    import discord.gateway
    import discord.http
    import yarl

    route_cls, ws_cls = discord.http.Route, discord.gateway.DiscordWebSocket
    old_base, old_gateway = route_cls.BASE, ws_cls.DEFAULT_GATEWAY
    route_cls.BASE = fake.info["api_base"]
    ws_cls.DEFAULT_GATEWAY = yarl.URL(fake.info["gateway_url"])
    try:
        yield
    finally:
        route_cls.BASE, ws_cls.DEFAULT_GATEWAY = old_base, old_gateway


@contextlib.asynccontextmanager
async def _dc_floor(fake: Fake) -> AsyncIterator[None]:
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
    with _discord_pointed_at(fake):
        client = Echo(intents=intents, guild_ready_timeout=0.05)
        task = asyncio.create_task(client.start(DC_TOKEN))
        try:
            await asyncio.wait_for(ready.wait(), 30)
            yield
        finally:
            await client.close()
            await asyncio.wait_for(task, 10)


@contextlib.asynccontextmanager
async def _dc_geode(fake: Fake, home: Path, tuning: Tuning) -> AsyncIterator[None]:
    from bots.discord import DiscordConnector, DiscordOptions

    binding = BindingSettings(platform="discord", channel=str(fake.info["channel_id"]),
                              allow_users=[str(fake.info["user_id"])])
    daemon = _daemon(home, binding, tuning)
    opts = DiscordOptions.model_validate({
        "api_base": fake.info["api_base"], "gateway_url": fake.info["gateway_url"],
        "guild_ready_timeout_s": 0.05, "identify_delay_s": 0.0, **tuning.layer})
    c = DiscordConnector(host=daemon, token=DC_TOKEN, bindings=[binding], options=opts)
    daemon.add_connector(c)
    async with _serving(daemon):
        # Mentions sent before the gateway session and the first catch-up are not the
        # connector's to answer (its history cursor starts at "now"): wait for both.
        await _poll(lambda: c.catch_ups > 1 and not c.standby and c.layer is not None
                    and c.layer.processing, within=30)
        yield


DISCORD = Platform(
    name="discord", fake="discord", fake_config={"token": DC_TOKEN},
    floor=_dc_floor, geode=_dc_geode,
    audience=lambda fake: (fake.info["channel_id"], fake.info["user_id"]),
)

PLATFORMS = {p.name: p for p in (TELEGRAM, SLACK_SOCKET, SLACK_HTTP, DISCORD)}

# -- measuring -----------------------------------------------------------------------------------


@dataclass
class Round:
    """One burst: per-message latencies (None: not answered in time) and CPU seconds."""

    latencies: list[float | None]
    bot_cpu_s: float
    #: None when the fake runs in this process (its CPU is then inside ``bot_cpu_s``)
    fake_cpu_s: float | None


async def _burst(p: Platform, fake: Fake, tags: list[str], *, within: float = ROUND_WITHIN_S,
                 partial: bool = False) -> Round:
    """Push one mention per tag at once; the fake reports each one's push-to-answer time."""
    chat, user = p.audience(fake)
    cpu0 = time.process_time()
    reply = await fake.call("round", tags=tags, chat=chat, user=user, within=within,
                            partial=partial)
    bot_cpu = time.process_time() - cpu0
    return Round(latencies=reply["latencies"], bot_cpu_s=bot_cpu,
                 fake_cpu_s=reply["fake_cpu_s"] if fake.pid is not None else None)


@dataclass
class Level:
    samples: list[float] = field(default_factory=list)
    cpu_per_msg: list[float] = field(default_factory=list)
    fake_cpu_per_msg: list[float] = field(default_factory=list)

    def add(self, r: Round) -> None:
        n = len(r.latencies)
        self.samples += [s for s in r.latencies if s is not None]
        self.cpu_per_msg.append(r.bot_cpu_s / n)
        if r.fake_cpu_s is not None:
            self.fake_cpu_per_msg.append(r.fake_cpu_s / n)


def _runner(p: Platform, side: str, fake: Fake, home: Path, tuning: Tuning) -> Runner:
    if side == "calls":
        assert p.calls is not None
        return p.calls(fake)
    return p.floor(fake) if side == "floor" else p.geode(fake, home, tuning)


async def _side(p: Platform, side: str, levels: list[int], rounds: int, home: Path, *,
                in_process: bool) -> dict[int, Level]:
    out: dict[int, Level] = {}
    async with (_started_fake(p.fake, p.fake_config, in_process=in_process) as fake,
                _runner(p, side, fake, home, Tuning())):
        # connections, first turn, the SDKs' lazy imports
        await _burst(p, fake, [f"{side}-warm-{i}" for i in range(2)])
        for n in levels:
            out[n] = Level()
            for r in range(rounds):
                out[n].add(await _burst(p, fake, [f"{side}-{n}-{r}-{i}" for i in range(n)]))
    return out


def _pct(samples: Sequence[float], q: float) -> float:
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


def _ms(values: list[float]) -> str:
    return f"{statistics.mean(values) * 1e3:.1f}" if values else "-"


async def _run(platforms: list[str], levels: list[int], rounds: int, *,
               in_process: bool) -> None:
    configure_logging(level="ERROR")
    results: dict[str, tuple[dict[int, Level], dict[int, Level]]] = {}
    calls: dict[str, dict[int, Level]] = {}
    for name in platforms:
        p = PLATFORMS[name]
        home = Path(tempfile.mkdtemp(prefix="bench-ch-"))
        try:
            floor = await _side(p, "floor", levels, rounds, home, in_process=in_process)
            geode = await _side(p, "geode", levels, rounds, home, in_process=in_process)
            if p.calls is not None:
                calls[name] = await _side(p, "calls", levels, rounds, home,
                                          in_process=in_process)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        results[name] = (floor, geode)
        print(f"  {name}: done", file=sys.stderr, flush=True)
    _print(results, levels, rounds, in_process=in_process)
    if calls:
        _print_calls(results, calls, levels)


def _print_calls(results: dict[str, tuple[dict[int, Level], dict[int, Level]]],
                 calls: dict[str, dict[int, Level]], levels: list[int]) -> None:
    """Where GEODE's added time goes: the reply's platform calls alone vs the whole path."""
    print()
    print("the same platform calls without GEODE ('calls': the SDK on GEODE's transport making "
          "a GEODE reply's calls, no store, no model)")
    head = (f"{'platform':<12} {'thr':>3} | {'calls p50':>9} {'p99':>7} {'cpu':>5} | "
            f"{'GEODE - calls p50':>17} {'p99':>7} {'cpu':>5}")
    print(head)
    print("-" * len(head))
    for name, by_level in calls.items():
        geode = results[name][1]
        for n in levels:
            c, g = by_level[n], geode[n]
            c50, c99 = _pct(c.samples, 50) * 1e3, _pct(c.samples, 99) * 1e3
            g50, g99 = _pct(g.samples, 50) * 1e3, _pct(g.samples, 99) * 1e3
            extra_cpu = statistics.mean(g.cpu_per_msg) - statistics.mean(c.cpu_per_msg)
            print(f"{name:<12} {n:>3} | {c50:>9.1f} {c99:>7.1f} {_ms(c.cpu_per_msg):>5} | "
                  f"{g50 - c50:>17.1f} {g99 - c99:>7.1f} {extra_cpu * 1e3:>5.1f}")


def _print(results: dict[str, tuple[dict[int, Level], dict[int, Level]]], levels: list[int],
           rounds: int, *, in_process: bool) -> None:
    where = ("the fakes ran IN THIS PROCESS (--in-process): cpu = bot + fake, fake = -"
             if in_process else
             "each fake in its own process: cpu = the bot's process, fake = the fake's process")
    print(f"mention -> final reply, ms ({rounds} round(s) per level after a warm-up; "
          "added = GEODE - floor; cpu / fake = CPU ms per message)")
    print(where)
    print(f"GEODE lanes: global_cap = channel_cap = {CONCURRENCY}, max_concurrent_threads = "
          f"{CONCURRENCY} (lanes are not the bottleneck here; the defaults are 8 / 6)")
    head = (f"{'platform':<12} {'thr':>3} | {'floor p50':>9} {'p99':>7} {'cpu':>5} "
            f"{'fake':>5} | {'GEODE p50':>9} {'p99':>7} {'cpu':>5} {'fake':>5} | "
            f"{'added p50':>9} {'p99':>7} | {'ratio p50':>9}")
    print(head)
    print("-" * len(head))
    verdicts: list[str] = []
    for name, (floor, geode) in results.items():
        for n in levels:
            f, g = floor[n], geode[n]
            f50, f99 = _pct(f.samples, 50) * 1e3, _pct(f.samples, 99) * 1e3
            g50, g99 = _pct(g.samples, 50) * 1e3, _pct(g.samples, 99) * 1e3
            print(f"{name:<12} {n:>3} | {f50:>9.1f} {f99:>7.1f} {_ms(f.cpu_per_msg):>5} "
                  f"{_ms(f.fake_cpu_per_msg):>5} | {g50:>9.1f} {g99:>7.1f} "
                  f"{_ms(g.cpu_per_msg):>5} {_ms(g.fake_cpu_per_msg):>5} | "
                  f"{g50 - f50:>9.1f} {g99 - f99:>7.1f} | "
                  f"{g50 / f50 if f50 else 0:>8.2f}x")
            if n == 50:
                ok = g50 - f50 <= 20 and g99 - f99 <= 100
                verdicts.append(f"{name}: {'met' if ok else 'NOT met'}")
    if verdicts:
        print("targets at 50 threads (added p50 <= 20 ms, p99 <= 100 ms): "
              + "; ".join(verdicts))


# -- the load run ----------------------------------------------------------------------------------


def _status_mb(key: str = "VmRSS") -> float | None:
    """A size line of /proc/self/status, in MB (VmRSS: now; VmHWM: the peak)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) / 1024
    return None


async def _load(name: str, n: int, model_latency: float, *, in_process: bool) -> bool:
    """GEODE alone under ``n`` concurrent new threads; prints a report, True if on target.

    Meant to run in a fresh process (see ``_load_in_child``): ``VmHWM`` is a lifetime
    high-water mark.
    """
    configure_logging(level="ERROR")
    p = PLATFORMS[name]
    tuning = Tuning(concurrency=max(CONCURRENCY, n), model_latency=model_latency)
    home = Path(tempfile.mkdtemp(prefix="bench-load-"))
    try:
        async with (_started_fake(p.fake, p.fake_config, in_process=in_process) as fake,
                    p.geode(fake, home, tuning)):
            await _burst(p, fake, ["load-warm-0", "load-warm-1"])
            rss_before = _status_mb()
            tuning.gauge.peak = 0
            r = await _burst(p, fake, [f"load-{i}" for i in range(n)], within=LOAD_WITHIN_S,
                             partial=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    # VmHWM: this process's own peak. ru_maxrss would do where there is no /proc, but on
    # Linux it carries over the forked parent's peak across exec.
    hwm = _status_mb("VmHWM")
    source = "VmHWM" if hwm is not None else "ru_maxrss"
    peak_mb = hwm if hwm is not None else (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # KiB on Linux
    answered = [s for s in r.latencies if s is not None]
    ok = len(answered) == n and peak_mb <= RSS_TARGET_MB
    print(f"load ({name}, GEODE only): {n} mentions at once, each a new thread; scripted "
          f"model sleeps {model_latency:g} s per response; lanes global_cap = channel_cap = "
          f"max_concurrent_threads = {tuning.concurrency}"
          + ("; fake IN THIS PROCESS (--in-process)" if in_process else ""))
    if answered:
        print(f"  answered: {len(answered)} / {n}; "
              + (f"all answered after {max(answered):.2f} s" if len(answered) == n
                 else f"the rest not within {LOAD_WITHIN_S:g} s")
              + f" (latency p50 {_pct(answered, 50):.2f} s, p99 {_pct(answered, 99):.2f} s)")
    else:
        print(f"  answered: 0 / {n} within {LOAD_WITHIN_S:g} s")
    before = f"; {rss_before:.1f} MB before the burst" if rss_before is not None else ""
    fake_cpu = f"; fake process CPU {r.fake_cpu_s:.2f} s" if r.fake_cpu_s is not None else ""
    print(f"  model calls in flight at once: at most {tuning.gauge.peak} (of {n}; fewer means "
          "turns were waiting before their model call, on the bot's CPU or a cap)")
    print(f"  bot process: peak RSS {peak_mb:.1f} MB ({source}; MB = 2**20 bytes{before}); "
          f"CPU over the burst {r.bot_cpu_s:.2f} s{fake_cpu}")
    print(f"  target (all answered, peak RSS <= {RSS_TARGET_MB:g} MB): "
          f"{'met' if ok else 'NOT met'}", flush=True)
    return ok


async def _load_in_child(name: str, args: argparse.Namespace) -> int:
    """Run one load in a fresh process, its output going straight to ours."""
    argv = [sys.executable, str(_HERE / Path(__file__).name), "--load-worker", name,
            "--load", str(args.load), "--model-latency", str(args.model_latency)]
    if args.in_process:
        argv.append("--in-process")
    # Its own session: a ctrl-C reaches only us, and we pass it on, so that it stops its fake.
    proc = await asyncio.create_subprocess_exec(*argv, start_new_session=True)
    try:
        rc = await proc.wait()
    finally:
        await _stop_process(proc)
    if rc < 0:  # killed by a signal: no report was printed
        print(f"load ({name}): the load process was killed by signal {-rc}", flush=True)
        return 128 - rc
    return rc


async def _main(args: argparse.Namespace, levels: list[int], rounds: int) -> int:
    if not args.load_only:
        await _run(args.platforms, levels, rounds, in_process=args.in_process)
    code = 0
    if args.load:
        for name in args.platforms:
            print(flush=True)
            code = max(code, await _load_in_child(name, args))
    return code


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 10, 50])
    ap.add_argument("--platforms", nargs="+", choices=sorted(PLATFORMS),
                    default=list(PLATFORMS))
    ap.add_argument("--quick", action="store_true",
                    help="a short run: 1 round of 1 and 10 threads (unless given)")
    ap.add_argument("--in-process", action="store_true",
                    help="run the fakes in this process (bills their CPU to the bot)")
    ap.add_argument("--load", type=int, metavar="N", default=0,
                    help="after the table, a GEODE-only run of N concurrent new threads "
                         "per platform, each in a fresh process (peak RSS)")
    ap.add_argument("--model-latency", type=float, default=2.0, metavar="S",
                    help="the scripted model's sleep per response in the --load run")
    ap.add_argument("--load-only", action="store_true", help="with --load: skip the table")
    ap.add_argument("--load-worker", metavar="PLATFORM", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.load_only and not args.load:
        ap.error("--load-only needs --load N")
    rounds, threads = args.rounds, args.threads
    if args.quick:
        rounds = 1
        if "--threads" not in sys.argv:
            threads = [1, 10]
    try:
        if args.load_worker:
            ok = asyncio.run(_load(args.load_worker, args.load, args.model_latency,
                                   in_process=args.in_process))
            sys.exit(0 if ok else 1)
        sys.exit(asyncio.run(_main(args, threads, rounds)))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
